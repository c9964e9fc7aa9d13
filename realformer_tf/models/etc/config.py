"""`EtcConfig`: ETC's config fields (official names and defaults) plus the RealFormer /
NormFormer switches of `BertConfig`, and the layout of the model's weights."""

import dataclasses

from absl import logging

from realformer_tf.errors import ConfigError
from realformer_tf.layers.etc import relative_vocab_size_needed
from realformer_tf.layers.transformer import check_choice
from realformer_tf.models.config import EncoderConfig

LAYOUTS = ("official", "realformer_tf")
# Keys the official EtcConfig.to_json_string() always writes and our files before the
# `layout` field never had: a config with one of them and no `layout` is official.
_OFFICIAL_ONLY_FIELDS = ("embedding_size", "att_size_per_head", "grad_checkpointing_period")


@dataclasses.dataclass(kw_only=True)
class EtcConfig(EncoderConfig):
    """ETC's config fields (google-research etcmodel EtcConfig names and defaults) plus
    the RealFormer / NormFormer switches of `BertConfig` and the model `layout`.

    Official fields with their meaning here:
      embedding_size: width of the token embedding table (None = hidden_size); when it
        differs from hidden_size the lookup is projected to hidden_size (ALBERT-style
        factorized embedding; official layout only).
      att_size_per_head: size per attention head; None or hidden_size /
        num_attention_heads (other values are refused: our attention layers use that).
      use_pre_activation_order: ETC's Pre-LN; `layer_norm_type` then defaults to "pre"
        (it may also be "normformer", not "post").
      grad_checkpointing_period: activation recomputation in the official code, which
        changes memory only, never results; accepted and not used (this package keeps
        all activations).

    `layout` selects the model structure:
      "official": as google-research etcmodel builds it: separate absolute-position
        tables for the long and the global input, the factorized embedding above, no
        final LayerNorm after the last layer in pre-activation order, long segment ids
        defaulting to 1 and no attention mask when none is given; its checkpoints load
        and save under the official variable names.
      "realformer_tf": this package's earlier layout (one position table for both
        sides, final LayerNorm per side in Pre-LN, masks derived from padding id 0,
        segment ids defaulting to 0).
    A config file without `layout` is official when it has any of embedding_size,
    att_size_per_head, grad_checkpointing_period (the official writer always emits
    them), else "realformer_tf" (our files before the field existed).

    Positional arguments: vocab_size, hidden_size, num_hidden_layers,
    num_attention_heads, intermediate_size, hidden_act, hidden_dropout_prob,
    attention_probs_dropout_prob (as BertConfig's); every other field is keyword-only.
    """

    file_description = "ETC config file"
    positive_fields = ("segment_vocab_size", "local_radius")
    non_negative_fields = ("relative_pos_max_distance", "relative_vocab_size",
                           "max_absolute_position_embeddings")
    bool_fields = ("share_feed_forward_params", "share_kv_projections", "share_qkv_projections",
                   "share_att_output_projection", "use_pre_activation_order", "use_hard_g2l_mask",
                   "use_hard_l2g_mask")
    string_fields = ("layout",)

    # vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
    # hidden_act, the dropouts and the RealFormer / NormFormer switches: EncoderConfig's.
    segment_vocab_size: int = 16
    embedding_size: int = None
    initializer_range: float = 0.02
    local_radius: int = 84
    att_size_per_head: int = None
    relative_pos_max_distance: int = 12
    relative_vocab_size: int = 32
    max_absolute_position_embeddings: int = 0
    share_feed_forward_params: bool = True
    share_kv_projections: bool = False
    share_qkv_projections: bool = True
    share_att_output_projection: bool = False
    use_pre_activation_order: bool = False
    use_hard_g2l_mask: bool = False
    use_hard_l2g_mask: bool = False
    grad_checkpointing_period: int = 0
    layout: str = "realformer_tf"
    # "post" (ETC's default), "pre", "normformer"; None = from use_pre_activation_order.
    layer_norm_type: str = None

    def __post_init__(self):
        if self.layer_norm_type is None:
            self.layer_norm_type = "pre" if self.use_pre_activation_order is True else "post"
        super().__post_init__()

    @classmethod
    def from_dict(cls, values, source="config"):
        """`JsonConfig.from_dict`, choosing the layout of a file without one (see the
        class docstring)."""
        if isinstance(values, dict) and "layout" not in values:
            official = any(key in values for key in _OFFICIAL_ONLY_FIELDS)
            values = dict(values, layout="official" if official else "realformer_tf")
        if isinstance(values, dict) and values.get("layout") == "official" and "residual_attention" not in values:
            # google-research etcmodel has no residual attention: an official-layout file
            # that does not state it is plain ETC (files this package writes state it).
            values = dict(values, residual_attention=False)
            logging.info("%s: official ETC layout without residual_attention: plain ETC (residual "
                         "attention off); state it in the file to choose", source)
        return super().from_dict(values, source)

    @property
    def official(self):
        return self.layout == "official"

    @property
    def factorized_embedding(self):
        return self.embedding_size is not None and self.embedding_size != self.hidden_size

    def _validate_own(self):
        if self.relative_pos_max_distance > 0:
            needed = relative_vocab_size_needed(self.relative_pos_max_distance)
            if self.relative_vocab_size < needed:
                raise ConfigError(
                    f"relative_vocab_size ({self.relative_vocab_size}) must be at least "
                    f"2*relative_pos_max_distance+4 = {needed}: {2 * self.relative_pos_max_distance + 1} "
                    f"clipped relative positions (relative_pos_max_distance="
                    f"{self.relative_pos_max_distance}) + 3 extra ids (l2g/g2l other sentence, "
                    "same sentence, padding); raise relative_vocab_size or lower "
                    "relative_pos_max_distance")
        if self.use_pre_activation_order and self.layer_norm_type == "post":
            raise ConfigError(
                'use_pre_activation_order (ETC\'s Pre-LN) contradicts "layer_norm_type": "post"; '
                'drop one of them or use "pre" / "normformer"')
        check_choice("layout", self.layout, LAYOUTS, ConfigError)
        for name, low in (("embedding_size", 1), ("att_size_per_head", 1), ("grad_checkpointing_period", 0)):
            value = getattr(self, name)
            if value is None and name != "grad_checkpointing_period":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.factorized_embedding and not self.official:
            raise ConfigError(
                f"embedding_size {self.embedding_size} != hidden_size {self.hidden_size} (a factorized "
                'embedding) needs "layout": "official"')
        per_head = self.hidden_size // self.num_attention_heads
        if self.att_size_per_head is not None and self.att_size_per_head != per_head:
            raise ConfigError(
                f"att_size_per_head {self.att_size_per_head} differs from hidden_size / "
                f"num_attention_heads = {per_head}; the attention layers here use the latter. "
                "Use null (or that value)")

    def describe(self):
        name = "ETC+RealFormer" if self.uses_residual_attention else "ETC"
        if self.layer_norm_type == "normformer":
            name += "+NormFormer"
        parts = [
            f"residual attention {'on' if self.uses_residual_attention else 'off'} (separate long/global paths)",
            f"{self.layer_norm_type}-LN" if self.layer_norm_type != "normformer" else "normformer (pre-LN)",
            f"running mean {'on' if self.use_running_mean and self.uses_residual_attention else 'off'}",
            f"local radius {self.local_radius}",
            f"relative max distance {self.relative_pos_max_distance}",
        ]
        if self.use_hard_g2l_mask or self.use_hard_l2g_mask:
            parts.append("hard " + "/".join(n for n, on in (("g2l", self.use_hard_g2l_mask),
                                                              ("l2g", self.use_hard_l2g_mask)) if on) + " mask")
        size = (f"{self.num_hidden_layers}L/{self.num_attention_heads}H/{self.hidden_size}"
                f"/{self.intermediate_size}")
        return f"{name}: {', '.join(parts)} [{size}, vocab {self.vocab_size}]"
