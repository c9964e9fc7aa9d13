"""The config of realformer_tf's causal LM variants (RealFormer residual attention on the
causal path, Post-LN, NormFormer's four switches, activations GPT-2 lacks) as Hugging
Face transformers remote code.

realformer_tf (`convert_checkpoint.py --model_type=causal_lm --output_format=hf
--hf_allow_variant`, or `realformer_tf.checkpoints.causal_lm.save_gpt2_folder(model,
folder, allow_variant=True)`) copies this file and modeling_realformer_causal_lm.py into
the folders it writes for those variants; transformers loads them with
trust_remote_code=True:

    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

config.json holds realformer_tf's own CausalLMConfig fields, under their own names and
meanings (it is realformer_tf's lm_config.json plus transformers' keys).

Matches realformer_tf 0.1.0 (`REALFORMER_TF_VERSION`). Needs only torch and
transformers, not realformer_tf.
"""

from transformers import PretrainedConfig

REALFORMER_TF_VERSION = "0.1.0"

LAYER_NORM_TYPES = ("post", "pre", "normformer")
HEAD_SCALE_POSITIONS = ("before_projection", "after_projection")
# realformer_tf's activation names: "gelu" is the tanh approximation (GPT-2's and
# transformers' "gelu_new"), "gelu_exact" the erf form (transformers' "gelu").
ACTIVATION_NAMES = ("gelu", "gelu_exact", "relu", "tanh", "swish", "silu", "linear")
# NormFormer's switches; None: on exactly when layer_norm_type is "normformer".
SWITCHES = ("normformer_attention_output_norm", "normformer_ffn_activation_norm", "normformer_head_scale")


class RealFormerTfCausalLMConfig(PretrainedConfig):
    """realformer_tf's CausalLMConfig (GPT-2's layout: token + learned position
    embeddings, causal blocks, a final LayerNorm in Pre-LN, the output projection tied to
    the token embeddings, no bias):

    - hidden_act: realformer_tf's names ("gelu" = tanh form, "gelu_exact" = erf form).
    - residual_attention: RealFormer on the causal self-attention path: each block adds
      the previous block's pre-softmax, pre-mask scores to its own.
    - use_running_mean: with residual attention, the softmax sees the carried sum
      divided by layer_index + 1.
    - layer_norm_type: "post", "pre" (GPT-2's) or "normformer" (Pre-LN with the first
      three NormFormer switches on unless set otherwise).
    - normformer_attention_output_norm, normformer_ffn_activation_norm,
      normformer_head_scale: NormFormer's LayerNorm on the attention output, LayerNorm
      on the feed-forward activation, and learned per-head scale (true, false, or null:
      as layer_norm_type).
    - normformer_head_scale_position: "before_projection" (each head's context is
      scaled before the output projection) or "after_projection" (the projected
      output's num_attention_heads equal chunks are scaled).
    - normformer_residual_scale: NormFormer's learned scale of the feed-forward residual.
    """

    model_type = "realformer_causal_lm"

    def __init__(self, vocab_size=50257, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=1024, initializer_range=0.02,
                 layer_norm_eps=1e-5, residual_attention=False, use_running_mean=False, layer_norm_type="pre",
                 normformer_attention_output_norm=None, normformer_ffn_activation_norm=None,
                 normformer_head_scale=None, normformer_head_scale_position="before_projection",
                 normformer_residual_scale=False, use_cache=True, tie_word_embeddings=True, **kwargs):
        if layer_norm_type not in LAYER_NORM_TYPES:
            raise ValueError(f"layer_norm_type={layer_norm_type!r} is not one of {', '.join(LAYER_NORM_TYPES)}")
        if normformer_head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(f"normformer_head_scale_position={normformer_head_scale_position!r} is not one of "
                             f"{', '.join(HEAD_SCALE_POSITIONS)}")
        if str(hidden_act).lower() not in ACTIVATION_NAMES:
            raise ValueError(f"hidden_act={hidden_act!r} is not one of {', '.join(ACTIVATION_NAMES)} "
                             "(realformer_tf's names: 'gelu' is the tanh form)")
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads "
                             f"{num_attention_heads}")
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.max_position_embeddings = max_position_embeddings
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.residual_attention = residual_attention
        self.use_running_mean = use_running_mean
        self.layer_norm_type = layer_norm_type
        self.normformer_attention_output_norm = normformer_attention_output_norm
        self.normformer_ffn_activation_norm = normformer_ffn_activation_norm
        self.normformer_head_scale = normformer_head_scale
        self.normformer_head_scale_position = normformer_head_scale_position
        self.normformer_residual_scale = normformer_residual_scale
        self.use_cache = use_cache
        on = [name for name, value in self.normformer_switches().items() if value]
        if on and layer_norm_type == "post":
            raise ValueError(f"{', '.join(on)}: NormFormer operations of a Pre-LN model; they need "
                             "layer_norm_type 'pre' or 'normformer', not 'post'")
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def normformer_switches(self):
        """{switch: on} of NormFormer's four operations (unset ones as layer_norm_type)."""
        default = self.layer_norm_type == "normformer"
        switches = {name: default if getattr(self, name) is None else bool(getattr(self, name))
                    for name in SWITCHES}
        switches["normformer_residual_scale"] = bool(self.normformer_residual_scale)
        return switches
