"""Encoder-decoder translation models (RealFormer's Table 7 system: post-LN, Admin, residual
attention on three paths): the model of `realformer_tf.models.translation` under our
names (`realformer_tf.checkpoints.translation`).

A translation model has one kind, "translation"; its data are sentence pairs
(`realformer_tf.data.translation`), so its job is its own
(`realformer_tf.jobs.tasks.translation`) and the BERT-layout programs refuse it.
"""

from realformer_tf.checkpoints import translation as translation_checkpoint
from realformer_tf.checkpoints.hf import marian
from realformer_tf.errors import ConfigError
from realformer_tf.families.base import ModelFamily
from realformer_tf.fileio import gfile
from realformer_tf.models.translation.config import TranslationConfig
from realformer_tf.models.translation.model import TranslationModel


class TranslationFamily(ModelFamily):
    """The translation model: its one model, its names and checkpoints."""

    name = "translation"
    config_class = TranslationConfig
    head_prefixes = translation_checkpoint.HEAD_PREFIXES
    max_length_field = "max_position_embeddings"
    checkpoint_name = "translation_model.ckpt"
    names_description = "the translation model's names"
    config_name = "translation_config.json"
    export_tasks = ("translate",)
    hf_folder_description = "a Marian folder (MarianMTModel, --model_type=translation)"

    _named_variables = staticmethod(translation_checkpoint.translation_variables)
    _check_fits = staticmethod(translation_checkpoint.check_checkpoint_fits)
    _load = staticmethod(translation_checkpoint.load_translation_checkpoint)
    _save = staticmethod(translation_checkpoint.save_translation_checkpoint)

    def model_classes(self):
        return {"translation": TranslationModel}

    def checkpoint_heads(self, prefix, kind, num_labels=None):
        """The output projection is the embedding table: every checkpoint holds it."""
        return kind == "translation"

    def read_config(self, path):
        """A translation config file (a folder, e.g. a Marian folder, is refused: it
        describes no model of ours)."""
        if gfile().isdir(path):
            raise ConfigError(f"{path} is a folder, not a translation config file: give the config JSON the run "
                              f"wrote ({self.config_name}; --bert_config_file). Marian folders are written "
                              "(convert_checkpoint.py --output_format=hf), not read")
        return super().read_config(path)

    def check_hf_exportable(self, config, folder, allow_variant=False):
        """Marian computes the post-LN model without Admin or residual attention: other
        variants are refused, `allow_variant` or not (Marian folders have no variant)."""
        marian.check_exportable(config, folder)

    def save_hf_folder(self, model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
        """A `MarianMTModel` folder (`checkpoints.translation.save_marian_folder`; no
        tokenizer files)."""
        return translation_checkpoint.save_marian_folder(model, folder)


TRANSLATION = TranslationFamily()
