"""BERT / RealFormer / NormFormer: the models of `realformer_tf.models.bert` under the
original BERT variable names (`realformer_tf.checkpoints.bert`), and the public loader
that decides an unstated variant from the weights.

    from realformer_tf.families.bert import BERT, load_bert_checkpoint

    model = BERT.build_model(config, "classifier", num_labels=2)
    load_bert_checkpoint(model, "bert_model.ckpt", skip_heads=True)
"""

from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import hf
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.bert import model as bert_models
from realformer_tf.models.bert.config import BertConfig


class BertFamily(ModelFamily):
    """BERT's models by kind, their original names and checkpoints, and the jobs' side."""

    name = "bert"
    config_class = BertConfig
    head_prefixes = bert_checkpoint.HEAD_PREFIXES
    classifier_weights_name = bert_checkpoint.CLASSIFIER_WEIGHTS_NAME
    max_length_field = "max_position_embeddings"
    checkpoint_name = "bert_model.ckpt"
    names_description = "the original BERT variable names"
    config_name = "bert_config.json"
    export_tasks = ("classifier", "squad", "encoder")
    hf_folder_description = "a BERT folder (--model_type=bert)"
    hf_folder_needs_vocab = True

    _named_variables = staticmethod(bert_checkpoint.bert_variables)
    _check_fits = staticmethod(bert_checkpoint.check_checkpoint_fits)
    _load = staticmethod(bert_checkpoint.load_bert_checkpoint)
    _save = staticmethod(bert_checkpoint.save_bert_checkpoint)

    def model_classes(self):
        return {"pretraining": bert_models.BertPretrainingModel,
                "classifier": bert_models.BertClassifierModel,
                "squad": bert_models.BertSquadModel, "encoder": bert_models.BertModel}

    def build_model(self, config, kind, num_labels=None, dtype=None):
        model = super().build_model(config, kind, num_labels, dtype)
        if kind == "squad":
            # The span head reads the sequence output only: the pooler gets no gradient and,
            # as in the original (whose optimizer skips None gradients), stays as loaded.
            model.bert.pooler.trainable = False
        return model

    def read_config(self, path):
        """A bert_config.json, or a Hugging Face folder / config.json (translated)."""
        return hf.load_bert_config(path)

    def check_hf_exportable(self, config, folder, allow_variant=False):
        """A variant stock transformers does not compute only with `allow_variant`."""
        hf.check_exportable(config, folder, allow_variant)

    def hf_warning(self, config):
        """A line for a folder of a variant stock transformers cannot compute (written
        with `allow_variant`, with its remote code); None for vanilla post-LN BERT."""
        return None if hf.stock_transformers_computes(config) else hf.variant_folder_warning(config)

    def save_hf_folder(self, model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
        """`checkpoints.bert.save_hf_folder`: BertFor* (or, with `allow_variant`, our
        variant's model_type), with the tokenizer files of `vocab_file`."""
        return bert_checkpoint.save_hf_folder(model, folder, allow_variant=allow_variant, vocab_file=vocab_file,
                                              do_lower_case=do_lower_case)


BERT = BertFamily()


def load_bert_checkpoint(model, path, skip_heads=False, allow_nonfinite=False):
    """Loads an original-named checkpoint, one of our training checkpoints or a Hugging
    Face BERT folder into `model` (`checkpoints.bert.load_bert_checkpoint`); a config
    that does not state residual_attention is decided from the weights first, or
    refused with one ConfigError (`variant_evidence`). Returns the prefix read."""
    return BERT.load_checkpoint(model, path, skip_heads=skip_heads, allow_nonfinite=allow_nonfinite)
