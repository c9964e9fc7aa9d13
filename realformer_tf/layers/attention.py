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
from keras import ops

from realformer_tf.layers import masking
from realformer_tf.layers import scores as scores_lib

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

    def attention_logits(self, scores):
        """Carried scores -> softmax logits (before the mask)."""
        return scores_lib.scores_to_logits(scores, self.layer_index, self.use_running_mean)

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
        q = scores_lib.split_heads(self.query_dense(query), self.num_heads, self.key_dim)
        k = scores_lib.split_heads(self.key_dense(key), self.num_heads, self.key_dim)
        v = scores_lib.split_heads(self.value_dense(value), self.num_heads, self.key_dim)
        scores = scores_lib.raw_scores(q, k, prev_scores)
        mask = masking.combine_masks(
            attention_mask, ops.shape(query)[1], ops.shape(key)[1], use_causal_mask
        )
        probs = scores_lib.attention_probabilities(
            scores, mask, self.layer_index, self.use_running_mean
        )
        probs = self.probability_dropout(ops.cast(probs, v.dtype), training=training)
        context = scores_lib.merge_heads(scores_lib.context(probs, v))
        if self.use_head_scale and self.head_scale_position == "before_projection":
            context = scores_lib.scale_heads(context, self.head_scale)
        output = self.output_dense(context)
        if self.use_head_scale and self.head_scale_position == "after_projection":
            output = scores_lib.scale_heads(output, self.head_scale)
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
