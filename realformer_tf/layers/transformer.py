"""The transformer blocks' options and sublayers, and the encoder block: post-LN, pre-LN
and NormFormer, with or without RealFormer residual attention (the decoder block is
`layers.decoder`).

`layer_norm_type`:
  post        x = LN(x + Attn(x));            x = LN(x + FFN(x))            (BERT)
  pre         x = x + Attn(LN(x));            x = x + FFN(LN(x))
  normformer  x = x + LN_post(Attn'(LN(x)));  x = r*x + W2 LN_fc(act(W1 LN(x)))
              with Attn' scaling each head (NormFormer), r the optional residual scale.
The final LayerNorm of pre/normformer stacks belongs to the stack, not the block.
NormFormer's three operations are also switches of their own (fairseq's `scale_attn`,
`scale_fc`, `scale_heads`; `scale_resids` is `use_residual_scale`): each defaults to
whether `layer_norm_type` is "normformer", and may be set on a pre-LN block.

Residual attention is orthogonal: with it on, the block feeds `prev_scores` to its
attention layer; with it off, `prev_scores` is ignored and each layer returns its own
scores (so analysis works for every variant).
"""

import keras
from keras import ops

from realformer_tf.layers.normalization import LayerNorm

from realformer_tf.layers.activations import get_activation
from realformer_tf.layers.attention import HEAD_SCALE_POSITIONS, ResidualMultiHeadAttention
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.masking import keras_mask_of, set_keras_mask
from realformer_tf.layers.weights import WeightOptions

LAYER_NORM_TYPES = ("post", "pre", "normformer")


# Every option of a transformer block besides num_heads, intermediate_size and its
# layer_index, with its default: the one list the blocks (TransformerEncoderBlock,
# TransformerDecoderBlock, ETC's GlobalLocalBlock and EtcFeedForward), the stacks that
# hand them to every block (TransformerEncoder, GlobalLocalEncoder) and the configs'
# `block_options` (realformer_tf.models.config) use.
BLOCK_OPTIONS = dict(
    hidden_act="gelu",
    hidden_dropout=0.1,
    attention_dropout=0.1,
    layer_norm_type="post",
    residual_attention=True,
    use_running_mean=False,
    head_scale_position="before_projection",
    use_residual_scale=False,
    initializer_range=0.02,
    layer_norm_epsilon=1e-12,
    # NormFormer's operations one by one; None: as layer_norm_type ("normformer": on).
    attention_output_norm=None,  # fairseq's scale_attn: LN on the attention output
    ffn_activation_norm=None,  # scale_fc: LN on the feed-forward activation
    use_head_scale=None,  # scale_heads: a learned scale per head
    # Admin (Liu et al. 2020; post-LN): LN(w * x + f(x)), a learned w per residual, set
    # at initialization by a profiling pass (`AdminProfile`).
    admin_residual_scale=False,
    # Decoder blocks: residual attention on the cross-attention path (None: as
    # residual_attention, which then sets the self-attention path alone).
    cross_residual_attention=None,
)
NORMFORMER_SWITCHES = ("attention_output_norm", "ffn_activation_norm", "use_head_scale")
TRANSLATION_OPTIONS = ("admin_residual_scale", "cross_residual_attention")  # the translation config's
BLOCK_OPTION_NAMES = ("num_heads", "intermediate_size") + tuple(BLOCK_OPTIONS)


def pop_block_options(kwargs):
    """`(options, weight_options)` taken out of a layer's `kwargs`: the `BLOCK_OPTIONS`
    (defaults filled in, checked by `check_norm_options`) and the `WeightOptions`
    (weights.NAMES); what is left is for `keras.layers.Layer`."""
    options = {name: kwargs.pop(name, default) for name, default in BLOCK_OPTIONS.items()}
    check_norm_options(options)
    return options, WeightOptions.pop_from(kwargs, options["initializer_range"])


def first_rows_spec(spec, axis, output_range):
    """The symbolic `spec` (a KerasTensor) with its `axis` cut to the first
    `output_range` positions, as the call computes them. (TensorFlow's slice of an
    unknown length has an unknown length, so the symbolic shape is set here.)"""
    length = spec.shape[axis]
    rows = output_range if length is None else min(output_range, length)
    return keras.KerasTensor(spec.shape[:axis] + (rows,) + spec.shape[axis + 1:], dtype=spec.dtype)


def check_choice(name, value, choices, error=ValueError):
    """Raises `error` unless `value` is one of the strings `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise error(f"{name}={value!r} is not one of {', '.join(choices)}")


def check_norm_options(options, error=ValueError, names=None):
    """The one check of the LayerNorm arrangement options in `options` (keys as in
    `BLOCK_OPTIONS`: layer_norm_type, head_scale_position, use_residual_scale and the
    NormFormer switches).

    Layers raise ValueError naming their keywords; a config passes `error=ConfigError`
    and `names`, its field name for each keyword, so the message names the field.

    Example:
    >>> check_norm_options(dict(layer_norm_type="pre"))
    >>> check_norm_options(dict(layer_norm_type="sandwich"))
    Traceback (most recent call last):
    ValueError: layer_norm_type='sandwich' is not one of post, pre, normformer
    """
    name = (lambda key: (names or {}).get(key, key))
    layer_norm_type = options.get("layer_norm_type", BLOCK_OPTIONS["layer_norm_type"])
    check_choice(name("layer_norm_type"), layer_norm_type, LAYER_NORM_TYPES, error)
    check_choice(name("head_scale_position"),
                 options.get("head_scale_position", BLOCK_OPTIONS["head_scale_position"]),
                 HEAD_SCALE_POSITIONS, error)
    if options.get("use_residual_scale") and layer_norm_type != "normformer":
        raise error(f"{name('use_residual_scale')} is a NormFormer option: it needs "
                    f"{name('layer_norm_type')}='normformer'")
    if options.get("admin_residual_scale") and layer_norm_type != "post":
        raise error(f"{name('admin_residual_scale')} is Admin's scale of a post-LN residual: it needs "
                    f"{name('layer_norm_type')}='post'")
    switches = [key for key in NORMFORMER_SWITCHES if options.get(key)]
    if switches and layer_norm_type == "post":
        raise error(f"{', '.join(name(s) for s in switches)}: NormFormer operations of a pre-LN "
                    f"block; they need {name('layer_norm_type')}='pre' or 'normformer', not 'post'")


def _typed(name, value):
    """A block option as given (strings; unset NormFormer switches stay None), numbers
    and switches in their default's type."""
    default = BLOCK_OPTIONS[name]
    if isinstance(default, str):
        return value
    if default is None:
        return None if value is None else bool(value)
    return type(default)(value)


def _residual_plus(residual, branch, scale=None, admin_profile=None):
    """residual + branch, or Admin's residual * scale + branch; a profiling pass
    (`admin_profile`) sets the scale from the variances before it is used."""
    if scale is None:
        return residual + branch
    if admin_profile is not None:
        admin_profile.set_scale(scale, residual, branch)
    return residual * ops.cast(scale, residual.dtype) + branch


class _BlockBase(keras.layers.Layer):
    """Options and sublayers shared by encoder and decoder blocks."""

    def __init__(self, num_heads, intermediate_size, layer_index=0, **kwargs):
        # `kwargs`: the BLOCK_OPTIONS, the weights.NAMES options, then Layer's own.
        options, weight_options = pop_block_options(kwargs)
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.intermediate_size = int(intermediate_size)
        self.layer_index = int(layer_index)
        self.options = {name: _typed(name, value) for name, value in options.items()}
        for name, value in self.options.items():
            setattr(self, name, value)
        self.weight_options = weight_options
        self.activation = get_activation(self.hidden_act)
        self.normformer = self.layer_norm_type == "normformer"
        # NormFormer's operations, each on where its switch says (unset: as normformer).
        self.post_attention_norm, self.ffn_norm, self.scales_heads = (
            self.normformer if self.options[key] is None else self.options[key] for key in NORMFORMER_SWITCHES)
        self.cross_residual = (self.residual_attention if self.cross_residual_attention is None
                               else self.cross_residual_attention)

    # -- sublayer factories -------------------------------------------------------------
    def _initializer(self):
        """A fresh kernel initializer (TruncatedNormal(initializer_range) by default)."""
        return self.weight_options.layer_kwargs()["kernel_initializer"]

    def _layer_norm(self, name):
        return LayerNorm(
            epsilon=self.layer_norm_epsilon, name=name, dtype=self.dtype_policy
        )

    def _dense(self, units, name, activation=None):
        return keras.layers.Dense(
            units,
            activation=activation,
            name=name,
            **self.weight_options.layer_kwargs(),
            dtype=self.dtype_policy,
        )

    def _dropout(self, name):
        return Dropout(self.hidden_dropout, name=name, dtype=self.dtype_policy)

    def _attention(self, hidden_size, name, residual_attention=None):
        residual = self.residual_attention if residual_attention is None else residual_attention
        return ResidualMultiHeadAttention(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
            dropout=self.attention_dropout,
            use_running_mean=residual and self.use_running_mean,
            layer_index=self.layer_index,
            use_head_scale=self.scales_heads,
            head_scale_position=self.head_scale_position,
            name=name,
            **self.weight_options.layer_kwargs(),
            dtype=self.dtype_policy,
        )

    def _check_hidden_size(self, hidden_size):
        if hidden_size % self.num_heads:
            raise ValueError(
                f"hidden size {hidden_size} is not a multiple of num_heads={self.num_heads}"
            )

    def _build_feed_forward(self, input_shape):
        hidden_size = input_shape[-1]
        inner_shape = tuple(input_shape[:-1]) + (self.intermediate_size,)
        self.intermediate_dense = self._dense(self.intermediate_size, "intermediate")
        self.intermediate_dense.build(input_shape)
        self.output_dense = self._dense(hidden_size, "output")
        self.output_dense.build(inner_shape)
        self.output_dropout = self._dropout("output_dropout")
        self.output_layer_norm = self._layer_norm("output_layer_norm")
        self.output_layer_norm.build(input_shape)
        if self.ffn_norm:
            self.intermediate_layer_norm = self._layer_norm("intermediate_layer_norm")
            self.intermediate_layer_norm.build(inner_shape)
        if self.use_residual_scale:
            self.residual_scale = self.add_weight(
                name="residual_scale", shape=(hidden_size,), initializer="ones"
            )
        self.ffn_residual_scale = self._admin_scale("ffn_residual_scale", hidden_size)

    def _admin_scale(self, name, hidden_size):
        """Admin's learned residual scale (ones until a profiling pass sets it), or None."""
        if not self.admin_residual_scale:
            return None
        return self.add_weight(name=name, shape=(hidden_size,), initializer="ones")

    # -- sublayer application -----------------------------------------------------------
    def _attention_sublayer(self, x, layer_norm, post_norm, dropout, call_attention, training, output_range=None,
                            residual_scale=None, admin_profile=None):
        """Applies one attention sublayer in the configured LayerNorm arrangement.

        `call_attention(h, affine)` runs the attention and returns (output, scores): on
        the raw input (post, `affine` None) or on the standardized input with the
        LayerNorm's (gamma, beta) as `affine`, to fold into its input projections
        (pre/normformer; `LayerNorm.split_affine`). With `output_range` r the attention
        answers the first r queries only, and the residual is `x[:, :r]`. Admin scales
        the residual by `residual_scale` (`_residual_plus`).
        """
        residual = x if output_range is None else x[:, :output_range]
        if self.layer_norm_type == "post":
            out, scores = call_attention(x, None)
            return layer_norm(_residual_plus(residual, dropout(out), residual_scale, admin_profile)), scores
        out, scores = call_attention(*layer_norm.split_affine(x, training))
        if post_norm is not None:
            out = post_norm(out)
        return residual + dropout(out), scores

    def _feed_forward_sublayer(self, x, training, admin_profile=None):
        if self.layer_norm_type == "post":
            inner = self.intermediate_dense(x)
        else:
            inner = self.output_layer_norm.normalize_and_project(x, self.intermediate_dense, training)
        if self.ffn_norm:
            out = self.intermediate_layer_norm.activate_normalize_and_project(
                inner, self.hidden_act, self.output_dense, training)
        else:
            out = self.output_dense(self.activation(inner))
        out = self.output_dropout(out, training=training)
        if self.layer_norm_type == "post":
            return self.output_layer_norm(_residual_plus(x, out, self.ffn_residual_scale, admin_profile))
        residual = x * self.residual_scale if self.use_residual_scale else x
        return residual + out

    def _prev(self, prev_scores):
        return prev_scores if self.residual_attention else None

    def _prev_cross(self, prev_scores):
        return prev_scores if self.cross_residual else None

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads, intermediate_size=self.intermediate_size,
            layer_index=self.layer_index, **self.options, **self.weight_options.get_config(),
        )
        return config


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerEncoderBlock(_BlockBase):
    """Self-attention + feed-forward block with RealFormer residual scores.

    Args:
      num_heads: attention heads; must divide the hidden size (the input's last dim).
      intermediate_size: width of the feed-forward layer.
      hidden_act: feed-forward activation by BERT config name ("gelu" is BERT's tanh
        approximation, "gelu_exact" the erf form, "relu", "swish", ...).
      hidden_dropout: dropout on each sublayer's output.
      attention_dropout: dropout on the attention probabilities.
      layer_norm_type: "post" (BERT), "pre" or "normformer".
      residual_attention: RealFormer's residual attention: add `prev_scores` to this
        block's raw scores (False: ignore them; the block still returns its scores).
      use_running_mean: divide the carried sum by `layer_index + 1` before the softmax.
      layer_index: 0-based position of the block in its stack.
      head_scale_position: NormFormer head scale "before_projection" (paper) or
        "after_projection" (fairseq).
      use_residual_scale: NormFormer's learned scale on the FFN residual.
      initializer_range: stddev of the default TruncatedNormal kernel initializer.
      layer_norm_epsilon: LayerNorm epsilon (1e-12 as BERT).
      kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: for every projection (as in
        `keras.layers.Dense`); `kernel_initializer=None` means
        TruncatedNormal(initializer_range).

    Call args:
      x: [batch, seq_len, hidden] float input.
      attention_mask: [batch, seq_len] or [batch, seq_len, seq_len], 1 = attend.
      prev_scores: [batch, num_heads, seq_len, seq_len] carried scores of the previous
        block, or None (first block).
      training: dropout on or off.
      mask: [batch, seq_len] Keras mask of `x` (filled in by Keras, e.g. after
        `Embedding(mask_zero=True)`); combined with `attention_mask`.
      output_range: compute the output for the first `output_range` positions only
        (all positions are still attended to), as Model Garden's `output_range`: a
        classifier's last block needs only [CLS]. None: every position.
      use_causal_mask: each position attends to itself and the earlier ones only (a
        decoder-only language model).
      cache: for decoding, this block's `{"key", "value"}` of the earlier positions
        (`ResidualMultiHeadAttention`); `x` is then the new positions only.
      admin_profile: Admin's profiling pass (`AdminProfile`), which sets this block's
        residual scales from the variances it sees.

    Returns:
      `(output, scores)`: [batch, seq_len, hidden] (keeps `x`'s Keras mask) and the
      carried [batch, num_heads, seq_len, seq_len] scores for the next block; with
      `output_range` r, [batch, r, hidden] and [batch, num_heads, r, seq_len]; with
      `cache`, `(output, scores, new_cache)`, the scores over the cached and new keys.

    Example:
    >>> import numpy as np
    >>> x = np.random.rand(2, 5, 8).astype("float32")
    >>> block0 = TransformerEncoderBlock(num_heads=2, intermediate_size=16)
    >>> block1 = TransformerEncoderBlock(num_heads=2, intermediate_size=16, layer_index=1)
    >>> y, scores = block0(x)
    >>> y, scores = block1(y, prev_scores=scores)
    >>> tuple(y.shape), tuple(scores.shape)
    ((2, 5, 8), (2, 2, 5, 5))
    """

    def build(self, input_shape):
        hidden_size = input_shape[-1]
        self._check_hidden_size(hidden_size)
        self.attention = self._attention(hidden_size, "attention")
        self.attention.build(input_shape, input_shape)
        self.attention_dropout_layer = self._dropout("attention_output_dropout")
        self.attention_layer_norm = self._layer_norm("attention_layer_norm")
        self.attention_layer_norm.build(input_shape)
        self.attention_residual_scale = self._admin_scale("attention_residual_scale", hidden_size)
        if self.post_attention_norm:
            self.attention_post_layer_norm = self._layer_norm("attention_post_layer_norm")
            self.attention_post_layer_norm.build(input_shape)
        self._build_feed_forward(input_shape)
        super().build(input_shape)

    def call(self, x, attention_mask=None, prev_scores=None, training=None, mask=None, output_range=None,
             use_causal_mask=False, cache=None, admin_profile=None):
        mask = keras_mask_of(x) if mask is None else mask
        prev_scores = self._prev(prev_scores)
        query_mask, query_attention_mask = mask, attention_mask
        if output_range is not None:  # the first queries only; keys and values stay whole
            first = slice(None, output_range)
            query_mask = None if mask is None else mask[:, first]
            if attention_mask is not None and len(attention_mask.shape) > 2:  # [.., query, key]
                query_attention_mask = attention_mask[..., first, :]
            prev_scores = None if prev_scores is None else prev_scores[:, :, first]
        new_cache = []

        def call_attention(h, affine):
            query = h if output_range is None else h[:, :output_range]
            out = self.attention(
                query, h, query_mask=query_mask, value_mask=mask, attention_mask=query_attention_mask,
                prev_scores=prev_scores, training=training, use_causal_mask=use_causal_mask,
                query_affine=affine, value_affine=affine, cache=cache,
            )
            new_cache.extend(out[2:])
            return out[:2]

        x, scores = self._attention_sublayer(
            x,
            self.attention_layer_norm,
            getattr(self, "attention_post_layer_norm", None),
            lambda t: self.attention_dropout_layer(t, training=training),
            call_attention,
            training,
            output_range,
            self.attention_residual_scale,
            admin_profile,
        )
        output = self._feed_forward_sublayer(x, training, admin_profile)
        if output_range is not None and mask is not None:  # the output's own positions
            set_keras_mask(output, query_mask)
        return (output, scores) if cache is None else (output, scores, new_cache[0])

    def compute_mask(self, x, previous_mask=None):
        """The output keeps the input's Keras mask; the scores carry none."""
        return previous_mask, None

    def compute_output_shape(self, x_shape):
        return x_shape, (x_shape[0], self.num_heads, x_shape[1], x_shape[1])

    def compute_output_spec(self, x, *args, output_range=None, **kwargs):
        # compute_output_shape cannot see `output_range`: cut the query axis here.
        output, scores = super().compute_output_spec(x, *args, **kwargs)
        if output_range is None:
            return output, scores
        return first_rows_spec(output, 1, output_range), first_rows_spec(scores, 2, output_range)
