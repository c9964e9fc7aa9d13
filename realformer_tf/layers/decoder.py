"""The decoder block of an encoder-decoder Transformer: causal self-attention,
cross-attention to the encoder's output and a feed-forward sublayer, each in the
`layer_norm_type` arrangement of `realformer_tf.layers.transformer`. Self- and
cross-attention carry separate RealFormer score paths."""

import keras

from realformer_tf.layers.masking import keras_mask_of
from realformer_tf.layers.transformer import _BlockBase


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerDecoderBlock(_BlockBase):
    """Causal self-attention + cross-attention + feed-forward.

    Self- and cross-attention carry separate score paths (RealFormer on ADMIN).

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

    Returns:
      `(output, self_scores, cross_scores)`: [batch, target_len, hidden],
      [batch, num_heads, target_len, target_len], [batch, num_heads, target_len,
      memory_len].

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
        self.cross_attention = self._attention(hidden_size, "cross_attention")
        self.cross_attention.build(input_shape, memory_shape)
        self.cross_attention_dropout = self._dropout("cross_attention_output_dropout")
        self.cross_attention_layer_norm = self._layer_norm("cross_attention_layer_norm")
        self.cross_attention_layer_norm.build(input_shape)
        if self.post_attention_norm:
            self.self_attention_post_layer_norm = self._layer_norm("self_attention_post_layer_norm")
            self.self_attention_post_layer_norm.build(input_shape)
            self.cross_attention_post_layer_norm = self._layer_norm("cross_attention_post_layer_norm")
            self.cross_attention_post_layer_norm.build(input_shape)
        self._build_feed_forward(input_shape)
        super().build(input_shape)

    def call(
        self,
        x,
        memory,
        self_attention_mask=None,
        memory_mask=None,
        prev_self_scores=None,
        prev_cross_scores=None,
        training=None,
    ):
        x_mask = keras_mask_of(x)
        x, self_scores = self._attention_sublayer(
            x,
            self.self_attention_layer_norm,
            getattr(self, "self_attention_post_layer_norm", None),
            lambda t: self.self_attention_dropout(t, training=training),
            lambda h, affine: self.self_attention(
                h, h, query_mask=x_mask, value_mask=x_mask, attention_mask=self_attention_mask,
                prev_scores=self._prev(prev_self_scores), use_causal_mask=True,
                training=training, query_affine=affine, value_affine=affine,
            ),
            training,
        )
        x, cross_scores = self._attention_sublayer(
            x,
            self.cross_attention_layer_norm,
            getattr(self, "cross_attention_post_layer_norm", None),
            lambda t: self.cross_attention_dropout(t, training=training),
            lambda h, affine: self.cross_attention(
                h, memory, query_mask=x_mask, attention_mask=memory_mask,
                prev_scores=self._prev(prev_cross_scores), training=training,
                query_affine=affine,
            ),
            training,
        )
        return self._feed_forward_sublayer(x, training), self_scores, cross_scores

    def compute_mask(self, x, previous_mask=None):
        """The output keeps `x`'s Keras mask; the scores carry none."""
        return previous_mask, None, None
