"""GPT-style causal language models (NormFormer's own system, with RealFormer's residual
attention on the causal self-attention path): the model of
`realformer_tf.models.causal_lm` under our names (`realformer_tf.checkpoints.causal_lm`).

A causal LM has one kind, "pretraining" (next-token prediction); its data are token
blocks (`realformer_tf.data.causal_lm`), not BERT's records, so its jobs are its own
(`realformer_tf.jobs.tasks.causal_lm`); the classifier and SQuAD programs refuse it.
"""

from realformer_tf.checkpoints import causal_lm as lm_checkpoint
from realformer_tf.checkpoints.hf import gpt2
from realformer_tf.errors import ConfigError
from realformer_tf.fileio import gfile
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.causal_lm.config import CausalLMConfig
from realformer_tf.models.causal_lm.model import CausalLMModel
from realformer_tf.models.config import read_json_file


class CausalLMFamily(ModelFamily):
    """The causal LM: its one model, its names and checkpoints."""

    name = "causal_lm"
    config_class = CausalLMConfig
    head_prefixes = lm_checkpoint.HEAD_PREFIXES
    max_length_field = "max_position_embeddings"
    checkpoint_name = "lm_model.ckpt"
    names_description = "the causal LM's names"
    config_name = "lm_config.json"
    export_tasks = ("generate",)
    hf_folder_description = "a GPT-2 folder (GPT2LMHeadModel, variants with remote code; --model_type=causal_lm)"

    _named_variables = staticmethod(lm_checkpoint.lm_variables)
    _check_fits = staticmethod(lm_checkpoint.check_checkpoint_fits)
    _load = staticmethod(lm_checkpoint.load_lm_checkpoint)
    _save = staticmethod(lm_checkpoint.save_lm_checkpoint)

    def model_classes(self):
        return {"pretraining": CausalLMModel}

    def read_config(self, path):
        """An lm_config.json, or a Hugging Face GPT-2 folder / its config.json
        (translated: Pre-LN, no residual attention), or a variant's folder (model_type
        realformer_causal_lm: our fields)."""
        if gpt2.is_causal_lm_folder(path) or (path.endswith(".json") and _says_hf_causal_lm(path)):
            return gpt2.load_gpt2_config(path)
        return super().read_config(path)

    def config_beside(self, init_checkpoint):
        """A GPT-2 (or variant) folder is its own config; else lm_config.json beside the
        checkpoint."""
        if gpt2.is_causal_lm_folder(init_checkpoint):
            return init_checkpoint
        return super().config_beside(init_checkpoint)

    def trained_checkpoint(self, output_dir):
        """A GPT-2 (or variant) folder is read as it is; else as a run's output_dir."""
        return output_dir if gpt2.is_causal_lm_folder(output_dir) else super().trained_checkpoint(output_dir)

    def checkpoint_heads(self, prefix, kind, num_labels=None):
        """A causal LM's output projection is its embedding table: every checkpoint of
        one holds its "head"."""
        return kind == "pretraining"

    def check_hf_exportable(self, config, folder, allow_variant=False):
        """GPT-2 computes Pre-LN without residual attention or NormFormer: other
        variants are refused unless `allow_variant` (a folder with our remote code)."""
        gpt2.check_exportable(config, folder, allow_variant)

    def hf_warning(self, config):
        """The line about a variant's folder (written only with `allow_variant`, with
        its remote code); None for the Pre-LN model GPT-2 computes."""
        return gpt2.variant_folder_warning(config)

    def save_hf_folder(self, model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
        """A `GPT2LMHeadModel` folder, or with `allow_variant` a variant's folder with its
        remote code (`checkpoints.causal_lm.save_gpt2_folder`; no tokenizer files)."""
        return lm_checkpoint.save_gpt2_folder(model, folder, allow_variant=allow_variant)


def _says_hf_causal_lm(path):
    """Whether the JSON file at `path` is a GPT-2 (or variant) config.json (a missing or
    unreadable file: no; the family's own reader then says what is wrong with it)."""
    if not gfile().exists(path):
        return False
    try:
        values = read_json_file(path)
    except ConfigError:
        return False
    return isinstance(values, dict) and values.get("model_type") in (gpt2.MODEL_TYPE, gpt2.VARIANT_MODEL_TYPE)


CAUSAL_LM = CausalLMFamily()
