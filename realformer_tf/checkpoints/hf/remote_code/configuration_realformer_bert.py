"""The config of realformer_tf's BERT variants (RealFormer residual attention, pre-LN,
NormFormer) as Hugging Face transformers remote code.

realformer_tf (`convert_checkpoint.py --output_format=hf --hf_allow_variant`, or
`realformer_tf.checkpoints.bert.save_hf_folder(model, folder, allow_variant=True)`)
copies this file and modeling_realformer_bert.py into the folders it writes for those
variants; transformers loads them with trust_remote_code=True:

    model = AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)

Matches realformer_tf 0.1.0 (`REALFORMER_TF_VERSION`). Needs only torch and
transformers, not realformer_tf.
"""

from transformers import PretrainedConfig

REALFORMER_TF_VERSION = "0.1.0"

LAYER_NORM_TYPES = ("post", "pre", "normformer")
HEAD_SCALE_POSITIONS = ("before_projection", "after_projection")


class RealFormerTfBertConfig(PretrainedConfig):
    """BERT's config.json fields plus realformer_tf's:

    - residual_attention: RealFormer: each layer adds the previous layer's pre-softmax
      scores to its own (true, or null = unstated, which realformer_tf computes as true).
    - use_running_mean: with residual attention, the softmax sees the carried sum
      divided by layer_index + 1.
    - layer_norm_type: "post" (BERT), "pre", or "normformer" (pre-LN plus NormFormer's
      attention-output LayerNorm, feed-forward-activation LayerNorm and per-head scale).
    - normformer_head_scale_position: "before_projection" (each head's context is
      scaled before the output projection) or "after_projection" (the projected output's
      num_attention_heads equal chunks are scaled).
    - normformer_residual_scale: NormFormer's learned scale of the feed-forward residual.

    hidden_act uses Hugging Face's names: "gelu_new" is BERT's tanh approximation
    (realformer_tf's "gelu"), "gelu" the exact erf form (realformer_tf's "gelu_exact").
    """

    model_type = "realformer_bert"

    def __init__(self, vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu_new", hidden_dropout_prob=0.1,
                 attention_probs_dropout_prob=0.1, max_position_embeddings=512, type_vocab_size=16,
                 initializer_range=0.02, layer_norm_eps=1e-12, position_embedding_type="absolute",
                 residual_attention=True, use_running_mean=False, layer_norm_type="post",
                 normformer_head_scale_position="before_projection", normformer_residual_scale=False,
                 pad_token_id=0, tie_word_embeddings=True, **kwargs):
        if layer_norm_type not in LAYER_NORM_TYPES:
            raise ValueError(f"layer_norm_type={layer_norm_type!r} is not one of {', '.join(LAYER_NORM_TYPES)}")
        if normformer_head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(f"normformer_head_scale_position={normformer_head_scale_position!r} is not one of "
                             f"{', '.join(HEAD_SCALE_POSITIONS)}")
        if normformer_residual_scale and layer_norm_type != "normformer":
            raise ValueError("normformer_residual_scale needs layer_norm_type='normformer'")
        if position_embedding_type != "absolute":
            raise ValueError(f"position_embedding_type={position_embedding_type!r}: only 'absolute' is computed")
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
        self.type_vocab_size = type_vocab_size
        self.initializer_range = initializer_range
        self.layer_norm_eps = layer_norm_eps
        self.position_embedding_type = position_embedding_type
        self.residual_attention = residual_attention
        self.use_running_mean = use_running_mean
        self.layer_norm_type = layer_norm_type
        self.normformer_head_scale_position = normformer_head_scale_position
        self.normformer_residual_scale = normformer_residual_scale
        super().__init__(pad_token_id=pad_token_id, tie_word_embeddings=tie_word_embeddings, **kwargs)
