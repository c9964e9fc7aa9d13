"""`CausalLMConfig`: a GPT-style decoder-only language model, Pre-LN by default, with
NormFormer's four switches and RealFormer's residual attention stated in the file.

NormFormer's switches, one to one with fairseq's (`examples/normformer`):

| fairseq flag     | field                               | what it adds                               |
|------------------|-------------------------------------|--------------------------------------------|
| `--scale-attn`   | `normformer_attention_output_norm`  | a LayerNorm on the attention output        |
| `--scale-fc`     | `normformer_ffn_activation_norm`    | a LayerNorm on the feed-forward activation |
| `--scale-heads`  | `normformer_head_scale`             | a learned scale per attention head         |
| `--scale-resids` | `normformer_residual_scale`         | a learned scale on the FFN residual        |

`layer_norm_type="normformer"` is Pre-LN with the first three on (each may still be
turned off); `normformer_head_scale_position` is "before_projection" (the paper) or
"after_projection" (fairseq).
"""

import dataclasses
from typing import Optional

from realformer_tf.errors import ConfigError
from realformer_tf.models.config import EncoderConfig, _keyword

# The NormFormer switches of this config -> the transformer blocks' options.
SWITCH_OPTIONS = {
    "normformer_attention_output_norm": "attention_output_norm",
    "normformer_ffn_activation_norm": "ffn_activation_norm",
    "normformer_head_scale": "use_head_scale",
}


@dataclasses.dataclass
class CausalLMConfig(EncoderConfig):
    """Configuration of a causal language model (GPT-2's layout: token and learned
    position embeddings, a stack of causal blocks, a final LayerNorm in Pre-LN, the
    output projection tied to the token embeddings).

    Defaults are GPT-2 small's and fairseq's `transformer_lm_gpt` (12 layers, 768, 12
    heads, 3072, BERT's tanh "gelu" as GPT-2's "gelu_new", LayerNorm epsilon 1e-5).

    Example:
    >>> config = CausalLMConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                         num_attention_heads=4, intermediate_size=64,
    ...                         layer_norm_type="normformer")
    >>> config.describe()
    'Causal LM, NormFormer (attention-output LN, FFN-activation LN, head scale): residual attention off, pre-LN [2L/4H/32/64, vocab 100, 1024 positions]'
    """

    file_description = "causal LM config file"
    option_fields = {option: field for field, option in SWITCH_OPTIONS.items()}
    positive_fields = ("max_position_embeddings",)
    residual_attention_may_be_unstated = False

    max_position_embeddings: int = 1024
    initializer_range: float = 0.02
    residual_attention: Optional[bool] = _keyword(False)
    layer_norm_type: str = _keyword("pre")
    layer_norm_eps: float = _keyword(1e-5)
    normformer_attention_output_norm: Optional[bool] = _keyword(None)
    normformer_ffn_activation_norm: Optional[bool] = _keyword(None)
    normformer_head_scale: Optional[bool] = _keyword(None)
    # What the file is (every causal LM config file says so; a BERT config never does).
    model_type: str = _keyword("causal_lm")

    def switches(self):
        """{field: on} of the NormFormer switches (unset: as layer_norm_type)."""
        values = {field: getattr(self, field) for field in SWITCH_OPTIONS}
        default = self.layer_norm_type == "normformer"
        switches = {field: default if value is None else value for field, value in values.items()}
        switches["normformer_residual_scale"] = self.normformer_residual_scale
        return switches

    def block_options(self):
        """The blocks' options: a Pre-LN block with any NormFormer switch on is a
        "normformer" block with the switches given one by one."""
        options = super().block_options()
        switches = self.switches()
        if self.layer_norm_type != "post" and any(switches.values()):
            options["layer_norm_type"] = "normformer"
        options.update({option: switches[field] for field, option in SWITCH_OPTIONS.items()})
        return options

    @classmethod
    def from_dict(cls, values, source="config"):
        """As `JsonConfig.from_dict`, refusing a BERT (masked-LM) config with one line."""
        if isinstance(values, dict) and ("type_vocab_size" in values or values.get("model_type", "causal_lm") != "causal_lm"):
            kind = values.get("model_type") or "BERT (masked-LM)"
            raise ConfigError(f"{source} is a {kind} config, not a causal LM's (model_type causal_lm); give a "
                              "causal LM config, or the program the --model_type of this one")
        return super().from_dict(values, source)

    def _validate_own(self):
        if self.model_type != "causal_lm":
            raise ConfigError(f"model_type must be 'causal_lm', got {self.model_type!r}")
        for field in SWITCH_OPTIONS:
            value = getattr(self, field)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"{field} must be true, false or null (as layer_norm_type), got {value!r}")
        on = [field for field, value in self.switches().items() if value]
        if on and self.layer_norm_type == "post":
            raise ConfigError(f"{', '.join(on)}: NormFormer operations of a Pre-LN model; they need "
                              "layer_norm_type 'pre' or 'normformer', not 'post'")
        if self.residual_attention is None:
            raise ConfigError("residual_attention must be true or false: a causal LM config states its variant")

    def describe(self):
        """One line that names the variant, for the first lines of every program."""
        names = {"normformer_attention_output_norm": "attention-output LN",
                 "normformer_ffn_activation_norm": "FFN-activation LN", "normformer_head_scale": "head scale",
                 "normformer_residual_scale": "residual scale"}
        on = [names[field] for field, value in self.switches().items() if value]
        if on and self.normformer_head_scale and self.normformer_head_scale_position != "before_projection":
            on[on.index("head scale")] = f"head scale {self.normformer_head_scale_position}"
        name = "Causal LM" + (f", NormFormer ({', '.join(on)})" if on else "")
        parts = [f"residual attention {'on' if self.residual_attention else 'off'}",
                 "post-LN" if self.layer_norm_type == "post" else "pre-LN"]
        if self.residual_attention and self.use_running_mean:
            parts.append("running mean on")
        size = (f"{self.num_hidden_layers}L/{self.num_attention_heads}H/{self.hidden_size}/{self.intermediate_size}, "
                f"vocab {self.vocab_size}, {self.max_position_embeddings} positions")
        return f"{name}: {', '.join(parts)} [{size}]"
