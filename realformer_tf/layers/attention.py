"""Multi-head attention with RealFormer residual scores and NormFormer head scales.

The score-threading contract (DESIGN.md): the layer is called as
`layer(query, value, attention_mask=..., prev_scores=None)` and returns
`(output, scores)`, where `scores` [batch, heads, query_len, key_len] is the running sum
of the scaled raw scores q.k^T/sqrt(d), taken before the mask, the softmax and dropout.
With `prev_scores=None` (first layer, or residual attention off) it is the layer's own
scaled raw scores.

Projections are plain `Dense` layers so the kernels keep BERT's 2-D checkpoint shapes
([hidden, heads*head_dim] and [heads*head_dim, hidden]) without reshaping.
"""

import keras
import tensorflow as tf

from realformer_tf.layers import masking

HEAD_SCALE_POSITIONS = ("before_projection", "after_projection")


@keras.saving.register_keras_serializable(package="realformer_tf")
class ResidualMultiHeadAttention(keras.layers.Layer):
    """Multi-head attention that threads raw scores from layer to layer.

    Args:
      num_heads: number of attention heads.
      key_dim: size of each head (queries, keys and values).
      output_dim: size of the output projection; defaults to the query's last dim.
      dropout: dropout rate on the attention probabilities.
      use_running_mean: divide the carried running sum by `layer_index + 1` before the
        softmax (RealFormer's running-mean variant for deep models).
      layer_index: 0-based position of this layer in its score path.
      use_head_scale: NormFormer's learned per-head scale (initialized to 1).
      head_scale_position: "before_projection" (the paper: each head's context is
        scaled before W^O) or "after_projection" (fairseq: the projected output is split
        into `num_heads` chunks, each scaled).
      kernel_initializer, bias_initializer: for the four projections.
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        output_dim=None,
        dropout=0.0,
        use_running_mean=False,
        layer_index=0,
        use_head_scale=False,
        head_scale_position="before_projection",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(
                f"head_scale_position={head_scale_position!r}; use one of {HEAD_SCALE_POSITIONS}"
            )
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.output_dim = output_dim
        self.dropout = float(dropout)
        self.use_running_mean = bool(use_running_mean)
        self.layer_index = int(layer_index)
        self.use_head_scale = bool(use_head_scale)
        self.head_scale_position = head_scale_position
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

        projection = dict(
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            dtype=self.dtype_policy,
        )
        width = self.num_heads * self.key_dim
        self.query_dense = keras.layers.Dense(width, name="query", **projection)
        self.key_dense = keras.layers.Dense(width, name="key", **projection)
        self.value_dense = keras.layers.Dense(width, name="value", **projection)
        self.output_dense = None  # width known only in build()
        self._projection = projection
        self.probability_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        out_dim = self.output_dim or query_shape[-1]
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense = keras.layers.Dense(out_dim, name="output", **self._projection)
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.key_dim,))
        if self.use_head_scale:
            if self.head_scale_position == "after_projection" and out_dim % self.num_heads:
                raise ValueError(
                    f"head_scale_position='after_projection' splits the output ({out_dim})"
                    f" into {self.num_heads} equal chunks; it must divide evenly"
                )
            self.head_scale = self.add_weight(
                name="head_scale", shape=(self.num_heads,), initializer="ones"
            )
        super().build(query_shape)

    def _split_heads(self, x):
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1], self.num_heads, self.key_dim])

    def _scale_heads(self, x, chunk):
        """Multiplies each of the `num_heads` chunks (of size `chunk`) of the last dim."""
        shape = tf.shape(x)
        heads = tf.reshape(x, [shape[0], shape[1], self.num_heads, chunk])
        heads = heads * tf.cast(self.head_scale, x.dtype)[:, None]
        return tf.reshape(heads, [shape[0], shape[1], self.num_heads * chunk])

    def attention_logits(self, scores):
        """Carried scores -> softmax logits (before the mask)."""
        if self.use_running_mean:
            return scores / tf.cast(self.layer_index + 1, scores.dtype)
        return scores

    def call(
        self,
        query,
        value,
        key=None,
        attention_mask=None,
        prev_scores=None,
        use_causal_mask=False,
        training=None,
    ):
        key = value if key is None else key
        q = self._split_heads(self.query_dense(query))
        k = self._split_heads(self.key_dense(key))
        v = self._split_heads(self.value_dense(value))

        # Scale q rather than q.k^T: same math, B*F*N*D multiplies instead of B*N*F*T.
        q = q * tf.constant(self.key_dim**-0.5, dtype=q.dtype)
        scores = tf.einsum("bfnd,btnd->bnft", q, k)
        if prev_scores is not None:
            scores = scores + tf.cast(prev_scores, scores.dtype)

        # Mask and softmax in float32 under mixed precision: a -10000 bias added in
        # half precision would swamp the logits (bf16 spacing near 1e4 is 64), and a
        # half-precision exp/sum loses small probabilities.
        softmax_dtype = tf.float32 if scores.dtype in (tf.float16, tf.bfloat16) else scores.dtype
        logits = tf.cast(self.attention_logits(scores), softmax_dtype)
        mask = masking.combine_masks(
            attention_mask, tf.shape(query)[1], tf.shape(key)[1], use_causal_mask
        )
        if mask is not None:
            logits = logits + masking.mask_bias(mask, softmax_dtype)
        probs = tf.cast(tf.nn.softmax(logits, axis=-1), v.dtype)
        probs = self.probability_dropout(probs, training=training)

        context = tf.einsum("bnft,btnd->bfnd", probs, v)
        context = tf.reshape(
            context, [tf.shape(context)[0], tf.shape(context)[1], self.num_heads * self.key_dim]
        )
        if self.use_head_scale and self.head_scale_position == "before_projection":
            context = self._scale_heads(context, self.key_dim)
        output = self.output_dense(context)
        if self.use_head_scale and self.head_scale_position == "after_projection":
            output = self._scale_heads(output, output.shape[-1] // self.num_heads)
        return output, scores

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        key_shape = query_shape if key_shape is None else key_shape
        out_dim = self.output_dim or query_shape[-1]
        return (
            tuple(query_shape[:-1]) + (out_dim,),
            (query_shape[0], self.num_heads, query_shape[1], key_shape[1]),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            output_dim=self.output_dim,
            dropout=self.dropout,
            use_running_mean=self.use_running_mean,
            layer_index=self.layer_index,
            use_head_scale=self.use_head_scale,
            head_scale_position=self.head_scale_position,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config
