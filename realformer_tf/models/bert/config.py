"""`BertConfig`: the original `bert_config.json` fields plus the RealFormer / NormFormer
switches, with validation that names the offending field. (The Hugging Face
`config.json` dialect is a checkpoint format: `realformer_tf.checkpoints.hf.config`.)"""

import dataclasses

from realformer_tf.errors import ConfigError
from realformer_tf.fileio import gfile
from realformer_tf.models.config import IGNORED_RELEASE_FIELDS, EncoderConfig

@dataclasses.dataclass
class BertConfig(EncoderConfig):
    """Configuration of a BERT / RealFormer / NormFormer encoder.

    The eleven positional arguments are the original BERT fields, with its defaults. Google BERT
    and RealFormer releases both ship just those eleven: a file without
    `residual_attention` leaves it unstated (None; a model built from it computes with
    the default, on), and loading weights then decides it from them
    (`realformer_tf.families.variant_evidence`) or asks to state it. A run decides it
    once, at its start (from scratch: the default, RealFormer), and every config file it
    writes states it.
    """

    file_description = "bert_config_file"
    ignored_fields = IGNORED_RELEASE_FIELDS
    positive_fields = ("max_position_embeddings", "type_vocab_size")

    # vocab_size ... attention_probs_dropout_prob and the RealFormer / NormFormer
    # switches: EncoderConfig's.
    max_position_embeddings: int = 512
    type_vocab_size: int = 16
    initializer_range: float = 0.02

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_json_file(cls, path):
        """Reads a bert_config.json (the original format, with our fields).

        A Hugging Face folder or its config.json (recognized by its "model_type" key) is
        another format, translated by `realformer_tf.checkpoints.hf.load_bert_config`,
        which reads both (as every program's --bert_config_file does).

        Raises:
            ConfigError: a missing or invalid file, or a Hugging Face config (naming
                the function that reads it).
        """
        hf_config = gfile().isdir(path)
        values = None if hf_config else cls._read_json_file(path)
        if hf_config or (isinstance(values, dict) and "model_type" in values):
            raise ConfigError(
                f"{path} is a Hugging Face config (it has {'config.json' if hf_config else 'model_type'}); "
                "read it with realformer_tf.checkpoints.hf.load_bert_config(path), which translates it "
                "(the programs' --bert_config_file take it as it is)")
        return cls.from_dict(values, source=str(path))

    def describe(self):
        """One line that names the variant, e.g. for the first lines of every script."""
        name = "RealFormer" if self.uses_residual_attention else "BERT"
        if self.layer_norm_type == "normformer":
            name += "+NormFormer" if self.uses_residual_attention else " NormFormer"
        parts = [
            f"residual attention {'on' if self.uses_residual_attention else 'off'}",
            f"{self.layer_norm_type}-LN" if self.layer_norm_type != "normformer" else "normformer (pre-LN)",
            f"running mean {'on' if self.use_running_mean and self.uses_residual_attention else 'off'}",
        ]
        if self.layer_norm_type == "normformer":
            parts.append(f"head scale {self.normformer_head_scale_position}")
            parts.append(f"residual scale {'on' if self.normformer_residual_scale else 'off'}")
        size = (
            f"{self.num_hidden_layers}L/{self.num_attention_heads}H/{self.hidden_size}"
            f"/{self.intermediate_size}"
        )
        return f"{name}: {', '.join(parts)} [{size}, vocab {self.vocab_size}]"
