"""Multi-head attention with RealFormer residual scores and NormFormer head scales.

The score-threading contract: the layer is called as
`layer(query, value, attention_mask=..., prev_scores=None)` and returns
`(output, scores)`, where `scores` [batch, heads, query_len, key_len] is the running sum
of the scaled raw scores q.k^T/sqrt(d), taken before the mask, the softmax and dropout.
With `prev_scores=None` (first layer, or residual attention off) it is the layer's own
scaled raw scores. The math lives in `realformer_tf.layers.scores`.

Projections are plain `Dense` layers so the kernels keep BERT's 2-D checkpoint shapes
([hidden, heads*head_dim] and [heads*head_dim, hidden]) without reshaping.
"""

import keras
from keras import ops

from realformer_tf.layers import folding, masking
from realformer_tf.layers import scores as scores_lib
from realformer_tf.layers.dropout import Dropout

HEAD_SCALE_POSITIONS = ("before_projection", "after_projection")

# Constructor arguments that mean what they mean in keras.layers.MultiHeadAttention.
_SERIALIZED = ("kernel_initializer", "bias_initializer")
_REGULARIZERS = ("kernel_regularizer", "bias_regularizer")
_CONSTRAINTS = ("kernel_constraint", "bias_constraint")


def _output_width(output_dim, output_shape):
    """MultiHeadAttention's `output_shape` (an int or a 1-tuple) or our `output_dim`."""
    if output_shape is None:
        return output_dim
    if output_dim is not None:
        raise ValueError(
            f"output_dim={output_dim} and output_shape={output_shape} both given; they mean"
            " the same (the output projection's size), pass only one"
        )
    shape = (output_shape,) if isinstance(output_shape, int) else tuple(output_shape)
    if len(shape) != 1:
        raise ValueError(
            f"output_shape={output_shape}: this layer projects to one feature axis;"
            " pass an int (or a 1-tuple)"
        )
    return int(shape[0])


@keras.saving.register_keras_serializable(package="realformer_tf")
class ResidualMultiHeadAttention(keras.layers.Layer):
    """Multi-head attention that threads raw scores from layer to layer (RealFormer).

    Arguments follow `keras.layers.MultiHeadAttention` where the meaning is the same.
    Unlike it, the layer always returns `(output, scores)`: the next RealFormer layer
    needs this layer's pre-softmax scores, so they are an output, not an option.
    `scores` are what `MultiHeadAttention(return_attention_scores=True)` would return
    *before* its softmax; the probabilities it returns are
    `layer.attention_probabilities(scores, mask)` (without dropout).

    Args:
      num_heads: number of attention heads.
      key_dim: size of each head for query and key.
      value_dim: size of each head for value; defaults to `key_dim`.
      dropout: dropout rate on the attention probabilities.
      use_bias: whether the four projections have biases.
      output_shape: size of the output projection (an int or 1-tuple), as in
        `MultiHeadAttention`; defaults to the query's last dim. `output_dim` is the
        same (kept for existing configs); pass at most one.
      use_running_mean: divide the carried running sum by `layer_index + 1` before the
        softmax (RealFormer's running-mean variant for deep models).
      layer_index: 0-based position of this layer in its score path.
      use_head_scale: NormFormer's learned per-head scale (initialized to 1).
      head_scale_position: "before_projection" (the paper: each head's context is
        scaled before W^O) or "after_projection" (fairseq: the projected output is split
        into `num_heads` chunks, each scaled).
      kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: for the four projections.
      activity_regularizer: on the layer's output.
      seed: seed of the attention dropout.

    Call args:
      query: [batch, query_len, query_dim].
      value: [batch, key_len, value_dim_in].
      key: [batch, key_len, key_dim_in]; defaults to `value`.
      query_mask, value_mask, key_mask: [batch, query_len] / [batch, key_len] Keras
        masks (1/True = real); filled in by Keras from the inputs' masks, as for
        `MultiHeadAttention`. A masked query row attends uniformly (finite output).
      attention_mask: [batch, key_len], [batch, query_len, key_len] or
        [batch, 1|heads, query_len, key_len], 1 = attend; combined with the Keras masks.
      prev_scores: [batch, num_heads, query_len, key_len] carried scores of the previous
        layer in the same score path, or None.
      use_causal_mask: mask out future keys (queries aligned to the end of the keys).
      training: dropout on or off.
      query_affine, value_affine: `(scale, shift)` per-feature vectors the caller would
        otherwise apply to `query` / `value` (and `key`, when it is `value`) before this
        layer, e.g. a pre-LN LayerNorm's gamma and beta over standardized inputs. They
        fold into the projections' weights where they are plain Dense layers
        (`folding.project`), which saves the elementwise passes over the inputs.
      cache: for decoding, `{"key": k, "value": v}`, the split heads
        [batch, past_len, num_heads, head_dim] of the earlier positions (past_len may
        be 0), to which this call's keys and values are appended; the queries are the
        last positions. `attention_mask` then covers all past_len + key_len keys, and
        `prev_scores` (the previous layer's rows for these queries) too. The Keras
        masks of the key inputs are not used (give `attention_mask`).

    Returns:
      `(output, scores)`: [batch, query_len, output_dim] and
      [batch, num_heads, query_len, key_len]; with `cache`, `(output, scores,
      new_cache)`, the scores over all past_len + key_len keys.

    Example:
    >>> import numpy as np
    >>> layer = ResidualMultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(3, 5, 8).astype("float32")
    >>> out, scores = layer(x, x)
    >>> out2, scores2 = layer(x, x, prev_scores=scores)  # the next layer's call
    >>> tuple(out2.shape), tuple(scores2.shape)
    ((3, 5, 8), (3, 2, 5, 5))
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
        value_dim=None,
        use_bias=True,
        output_shape=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        activity_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(activity_regularizer=activity_regularizer, **kwargs)
        if head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(
                f"head_scale_position={head_scale_position!r}; use one of {HEAD_SCALE_POSITIONS}"
            )
        self.supports_masking = True
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.value_dim = int(value_dim) if value_dim else self.key_dim
        self.output_dim = _output_width(output_dim, output_shape)
        self.dropout = float(dropout)
        self.use_bias = bool(use_bias)
        self.use_running_mean = bool(use_running_mean)
        self.layer_index = int(layer_index)
        self.use_head_scale = bool(use_head_scale)
        self.head_scale_position = head_scale_position
        self.seed = seed
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

        self.query_dense = self._dense(self.num_heads * self.key_dim, "query")
        self.key_dense = self._dense(self.num_heads * self.key_dim, "key")
        self.value_dense = self._dense(self.num_heads * self.value_dim, "value")
        self.output_dense = None  # width known only in build()
        self.probability_dropout = Dropout(
            self.dropout, seed=seed, dtype=self.dtype_policy
        )

    def _dense(self, units, name):
        # Fresh initializer objects per projection: a seeded initializer object shared
        # by several layers gives them all the same kernel.
        fresh = {k: keras.initializers.get(keras.initializers.serialize(getattr(self, k)))
                 for k in _SERIALIZED}
        shared = {k: getattr(self, k) for k in _REGULARIZERS + _CONSTRAINTS}
        return keras.layers.Dense(
            units, use_bias=self.use_bias, name=name, dtype=self.dtype_policy,
            **fresh, **shared,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        out_dim = self.output_dim or query_shape[-1]
        self.query_dense.build(query_shape)
        self.key_dense.build(key_shape)
        self.value_dense.build(value_shape)
        self.output_dense = self._dense(out_dim, "output")
        self.output_dense.build(tuple(query_shape[:-1]) + (self.num_heads * self.value_dim,))
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

    def attention_probabilities(self, scores, mask=None):
        """This layer's softmax of carried `scores` under a 0/1 `mask` broadcastable to
        [batch, 1, query_len, key_len] (what `MultiHeadAttention` returns as scores)."""
        return scores_lib.attention_probabilities(
            scores, mask, self.layer_index, self.use_running_mean
        )

    def _check_prev_scores(self, prev_scores, query, key):
        want = (self.num_heads, query.shape[1], key.shape[1])
        got = tuple(prev_scores.shape[1:])
        # Only concrete (int) sizes are compared: a JAX symbolic dimension (Functional
        # shape inference) cannot be compared in Python.
        if len(prev_scores.shape) != 4 or any(
            isinstance(g, int) and isinstance(w, int) and g != w for g, w in zip(got, want)
        ):
            raise ValueError(
                f"prev_scores has shape {tuple(prev_scores.shape)}; this layer needs"
                f" [batch, num_heads={want[0]}, query_len={want[1]}, key_len={want[2]}]."
                " Pass the scores of the previous layer of the same score path, built"
                " with the same num_heads"
            )

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        key_mask=None,
        attention_mask=None,
        prev_scores=None,
        use_causal_mask=False,
        training=None,
        query_affine=None,
        value_affine=None,
        cache=None,
    ):
        key_affine = value_affine if key is None or key is value else None
        key_mask = None if key is None or key is value else key_mask
        key = value if key is None else key
        fold = bool(training)  # folding.py: folding pays in training, not at inference
        q = folding.project(self.query_dense, query, query_affine, fold)
        k = folding.project(self.key_dense, key, key_affine, fold)
        v = folding.project(self.value_dense, value, value_affine, fold)
        q = scores_lib.split_heads(q, self.num_heads, self.key_dim)
        k = scores_lib.split_heads(k, self.num_heads, self.key_dim)
        v = scores_lib.split_heads(v, self.num_heads, self.value_dim)
        if cache is not None:  # decoding: the keys and values of the earlier positions first
            k = ops.concatenate([ops.cast(cache["key"], k.dtype), k], axis=1)
            v = ops.concatenate([ops.cast(cache["value"], v.dtype), v], axis=1)
        if prev_scores is not None:
            self._check_prev_scores(prev_scores, query, k)
        scores = scores_lib.raw_scores(q, k, prev_scores)
        mask = masking.combine_masks(
            attention_mask, ops.shape(query)[1], ops.shape(k)[1], use_causal_mask,
            query_mask=query_mask, key_masks=(value_mask, key_mask) if cache is None else (),
        )
        probs = self.attention_probabilities(scores, mask)
        probs = self.probability_dropout(ops.cast(probs, v.dtype), training=training)
        context = scores_lib.merge_heads(scores_lib.context(probs, v))
        head_scale = self.head_scale if self.use_head_scale else None
        output = scores_lib.project_heads(self.output_dense, context, head_scale, self.head_scale_position, fold)
        if cache is not None:
            return output, scores, {"key": k, "value": v}
        return output, scores

    def compute_mask(self, query, previous_mask=None):
        """The output keeps the query's Keras mask; the scores carry none."""
        return previous_mask, None

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
            value_dim=self.value_dim,
            output_dim=self.output_dim,
            dropout=self.dropout,
            use_bias=self.use_bias,
            use_running_mean=self.use_running_mean,
            layer_index=self.layer_index,
            use_head_scale=self.use_head_scale,
            head_scale_position=self.head_scale_position,
            seed=self.seed,
        )
        for name in _SERIALIZED:
            config[name] = keras.initializers.serialize(getattr(self, name))
        for name in _REGULARIZERS:
            config[name] = keras.regularizers.serialize(getattr(self, name))
        for name in _CONSTRAINTS:
            config[name] = keras.constraints.serialize(getattr(self, name))
        return config
