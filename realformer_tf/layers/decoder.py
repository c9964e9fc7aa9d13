"""The decoder of an encoder-decoder Transformer: `TransformerDecoderBlock` (causal
self-attention, cross-attention to the encoder's output and a feed-forward sublayer,
each in the `layer_norm_type` arrangement of `realformer_tf.layers.transformer`) and
`TransformerDecoder`, the stack. Self- and cross-attention carry separate RealFormer
score paths (`residual_attention`, `cross_residual_attention`), as the encoder's
self-attention has its own: the three paths of RealFormer on Admin."""

import keras

from realformer_tf.layers.masking import keras_mask_of
from realformer_tf.layers.normalization import LayerNorm
from realformer_tf.layers.transformer import _BlockBase, pop_block_options


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerDecoderBlock(_BlockBase):
    """Causal self-attention + cross-attention + feed-forward.

    Self- and cross-attention carry separate score paths (RealFormer on Admin):
    `residual_attention` switches the self-attention path, `cross_residual_attention`
    (default: the same) the cross-attention path.

    Args:
      num_heads, intermediate_size, layer_index and the `BLOCK_OPTIONS` (hidden_act,
        hidden_dropout, attention_dropout, layer_norm_type, residual_attention,
        use_running_mean, head_scale_position, use_residual_scale, initializer_range,
        layer_norm_epsilon) and weight options: as in `TransformerEncoderBlock`.

    Call args:
      x: [batch, target_len, hidden] decoder input.
      memory: [batch, memory_len, memory_hidden] encoder output.
      self_attention_mask: [batch, target_len] or [batch, target_len, target_len]
        (1 = attend), combined with the causal mask.
      memory_mask: [batch, memory_len] or [batch, target_len, memory_len]; Keras fills
        it from `memory`'s Keras mask when not given.
      prev_self_scores, prev_cross_scores: the previous block's carried scores of each
        path, or None.
      training: dropout on or off.
      cache: for decoding, the self-attention's `{"key", "value"}` of the earlier
        target positions (`x` is then the new positions only).
      admin_profile: Admin's profiling pass (`admin.AdminProfile`).

    Returns:
      `(output, self_scores, cross_scores)`: [batch, target_len, hidden],
      [batch, num_heads, target_len, target_len], [batch, num_heads, target_len,
      memory_len]; with `cache`, also the new cache.

    Example:
    >>> import numpy as np
    >>> x = np.random.rand(2, 4, 8).astype("float32")
    >>> memory = np.random.rand(2, 6, 8).astype("float32")
    >>> block = TransformerDecoderBlock(num_heads=2, intermediate_size=16)
    >>> y, self_scores, cross_scores = block(x, memory)
    >>> tuple(self_scores.shape), tuple(cross_scores.shape)
    ((2, 2, 4, 4), (2, 2, 4, 6))
    """

    def build(self, x_shape, memory_shape=None):
        input_shape = x_shape
        memory_shape = input_shape if memory_shape is None else memory_shape
        hidden_size = input_shape[-1]
        self._check_hidden_size(hidden_size)
        self.self_attention = self._attention(hidden_size, "self_attention")
        self.self_attention.build(input_shape, input_shape)
        self.self_attention_dropout = self._dropout("self_attention_output_dropout")
        self.self_attention_layer_norm = self._layer_norm("self_attention_layer_norm")
        self.self_attention_layer_norm.build(input_shape)
        self.self_attention_residual_scale = self._admin_scale("self_attention_residual_scale", hidden_size)
        self.cross_attention = self._attention(hidden_size, "cross_attention", self.cross_residual)
        self.cross_attention.build(input_shape, memory_shape)
        self.cross_attention_dropout = self._dropout("cross_attention_output_dropout")
        self.cross_attention_layer_norm = self._layer_norm("cross_attention_layer_norm")
        self.cross_attention_layer_norm.build(input_shape)
        self.cross_attention_residual_scale = self._admin_scale("cross_attention_residual_scale", hidden_size)
        if self.post_attention_norm:
            self.self_attention_post_layer_norm = self._layer_norm("self_attention_post_layer_norm")
            self.self_attention_post_layer_norm.build(input_shape)
            self.cross_attention_post_layer_norm = self._layer_norm("cross_attention_post_layer_norm")
            self.cross_attention_post_layer_norm.build(input_shape)
        self._build_feed_forward(input_shape)
        super().build(input_shape)

    def call(self, x, memory, self_attention_mask=None, memory_mask=None, prev_self_scores=None,
             prev_cross_scores=None, training=None, cache=None, admin_profile=None):
        x_mask = keras_mask_of(x)
        new_cache = []

        def self_attention(h, affine):
            out = self.self_attention(
                h, h, query_mask=x_mask, value_mask=x_mask, attention_mask=self_attention_mask,
                prev_scores=self._prev(prev_self_scores), use_causal_mask=True,
                training=training, query_affine=affine, value_affine=affine, cache=cache)
            new_cache.extend(out[2:])
            return out[:2]

        x, self_scores = self._attention_sublayer(
            x, self.self_attention_layer_norm, getattr(self, "self_attention_post_layer_norm", None),
            lambda t: self.self_attention_dropout(t, training=training), self_attention, training,
            residual_scale=self.self_attention_residual_scale, admin_profile=admin_profile)
        x, cross_scores = self._attention_sublayer(
            x, self.cross_attention_layer_norm, getattr(self, "cross_attention_post_layer_norm", None),
            lambda t: self.cross_attention_dropout(t, training=training),
            lambda h, affine: self.cross_attention(
                h, memory, query_mask=x_mask, attention_mask=memory_mask,
                prev_scores=self._prev_cross(prev_cross_scores), training=training, query_affine=affine),
            training, residual_scale=self.cross_attention_residual_scale, admin_profile=admin_profile)
        output = self._feed_forward_sublayer(x, training, admin_profile)
        return (output, self_scores, cross_scores) + tuple(new_cache)

    def compute_mask(self, x, previous_mask=None):
        """The output keeps `x`'s Keras mask; the scores carry none."""
        return previous_mask, None, None


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerDecoder(keras.layers.Layer):
    """A stack of `TransformerDecoderBlock`s threading the self- and cross-attention
    score paths separately; pre-LN and NormFormer stacks end with a final LayerNorm.

    Args:
      num_layers: number of blocks.
      num_heads, intermediate_size and the `BLOCK_OPTIONS` (`cross_residual_attention`
        and Admin's `admin_residual_scale` included) and weight options: as in
        `TransformerDecoderBlock`, for every block; block `l` gets `layer_index=l`.

    Call args:
      x: [batch, target_len, hidden]; memory: [batch, memory_len, hidden].
      self_attention_mask: [batch, target_len] (1 = a real token; with a cache, over the
        cached and the new positions); memory_mask: [batch, memory_len].
      training: dropout on or off.
      cache: for decoding, one self-attention `{"key", "value"}` per block.
      admin_profile: Admin's profiling pass for this stack.

    Returns:
      A dict: `sequence_output` [batch, target_len, hidden], `self_attention_scores` and
      `cross_attention_scores` (one carried tensor per block each), and with `cache`
      the new `cache`.

    Example:
    >>> import numpy as np
    >>> decoder = TransformerDecoder(num_layers=2, num_heads=2, intermediate_size=16)
    >>> out = decoder(np.ones((2, 3, 8), "float32"), np.ones((2, 5, 8), "float32"))
    >>> tuple(out["sequence_output"].shape), tuple(out["cross_attention_scores"][1].shape)
    ((2, 3, 8), (2, 2, 3, 5))
    """

    def __init__(self, num_layers, num_heads, intermediate_size, **kwargs):
        options, weight_options = pop_block_options(kwargs)
        super().__init__(**kwargs)
        self.num_layers = int(num_layers)
        self.block_config = dict(num_heads=num_heads, intermediate_size=intermediate_size, **options,
                                 **weight_options.get_config())
        self.blocks = [TransformerDecoderBlock(layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy,
                                               **self.block_config) for i in range(self.num_layers)]
        self.final_layer_norm = None
        if options["layer_norm_type"] != "post":
            self.final_layer_norm = LayerNorm(epsilon=options["layer_norm_epsilon"], name="final_layer_norm",
                                              dtype=self.dtype_policy)

    def build(self, x_shape, memory_shape=None):
        for block in self.blocks:
            block.build(x_shape, memory_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(x_shape)
        super().build(x_shape)

    def call(self, x, memory, self_attention_mask=None, memory_mask=None, training=None, cache=None,
             admin_profile=None):
        self_scores, cross_scores, new_cache = [], [], []
        prev_self = prev_cross = None
        for i, block in enumerate(self.blocks):
            out = block(x, memory, self_attention_mask=self_attention_mask, memory_mask=memory_mask,
                        prev_self_scores=prev_self, prev_cross_scores=prev_cross, training=training,
                        cache=None if cache is None else cache[i], admin_profile=admin_profile)
            x, prev_self, prev_cross = out[:3]
            new_cache.extend(out[3:])
            self_scores.append(prev_self)
            cross_scores.append(prev_cross)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
        outputs = {"sequence_output": x, "self_attention_scores": self_scores, "cross_attention_scores": cross_scores}
        return outputs if cache is None else dict(outputs, cache=new_cache)

    def compute_mask(self, x, memory=None, previous_mask=None):
        return None

    def get_config(self):
        return dict(super().get_config(), num_layers=self.num_layers, **self.block_config)
