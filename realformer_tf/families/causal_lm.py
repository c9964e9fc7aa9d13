"""GPT-style causal language models (NormFormer's own system, with RealFormer's residual
attention on the causal self-attention path): the model of
`realformer_tf.models.causal_lm` under our names (`realformer_tf.checkpoints.causal_lm`).

A causal LM has one kind, "pretraining" (next-token prediction); its data are token
blocks (`realformer_tf.data.causal_lm`), not BERT's records, so its jobs are its own
(`realformer_tf.jobs.tasks.causal_lm`); the classifier and SQuAD programs refuse it.
"""

from realformer_tf.checkpoints import causal_lm as lm_checkpoint
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.causal_lm.config import CausalLMConfig
from realformer_tf.models.causal_lm.model import CausalLMModel


class CausalLMFamily(ModelFamily):
    """The causal LM: its one model, its names and checkpoints."""

    name = "causal_lm"
    config_class = CausalLMConfig
    head_prefixes = lm_checkpoint.HEAD_PREFIXES
    max_length_field = "max_position_embeddings"
    checkpoint_name = "lm_model.ckpt"
    config_name = "lm_config.json"
    export_tasks = ("generate",)

    _named_variables = staticmethod(lm_checkpoint.lm_variables)
    _check_fits = staticmethod(lm_checkpoint.check_checkpoint_fits)
    _load = staticmethod(lm_checkpoint.load_lm_checkpoint)
    _save = staticmethod(lm_checkpoint.save_lm_checkpoint)

    def model_classes(self):
        return {"pretraining": CausalLMModel}

    def checkpoint_heads(self, prefix, kind, num_labels=None):
        """A causal LM's output projection is its embedding table: every checkpoint of
        one holds its "head"."""
        return kind == "pretraining"


CAUSAL_LM = CausalLMFamily()
