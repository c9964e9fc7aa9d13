"""A per-feature scale and shift on a Dense layer's input, applied to its weights instead.

    dense(x * scale + shift) = x @ (scale[:, None] * W) + (shift @ W + b)

The left side costs two elementwise passes over the activation `x` and, in the backward
pass, two more plus two reductions over all of its rows; the right side touches only the
[in, out] kernel, a fraction of the activation's size for any real batch. Autodiff of the
right side gives the same gradients for x, scale, shift, W and b, so no hand-written
gradient is needed.

That trade pays when the activation has more rows than the kernel, which training's
forward and backward passes over a batch do. At inference a request often has a few
dozen rows (batch 1, a short text): there recomputing `scale[:, None] * W` and `shift @ W`
at every call costs more than the two passes over `x` (NormFormer, BERT-Base, batch 1,
~12 words: 1.9x vanilla's serving time folded; docs/serving.md). So the layers
fold only when training (`fold=bool(training)` below) and apply the scale and shift to
the inputs otherwise; both give the same outputs. Used for:

  * every pre-LN LayerNorm's gamma and beta, folded into the projections that follow
    (`LayerNorm.split_affine`, then `project`): the attention's query, key and value and
    the feed-forward's first projection;
  * NormFormer's feed-forward LayerNorm, folded into the output projection
    (`LayerNorm.activate_normalize_and_project`);
  * NormFormer's per-head scale before the attention output projection, folded into
    that projection's kernel (`scores.project_heads`).

Measured on CPU with TensorFlow, `small` preset: benchmarks/results/latest_small_patches.md
(`normformer+composite_ffn`, `normformer+unfolded_head_scale`).
"""

import keras
from keras import ops


def can_fold_into(dense):
    """Whether `dense` is a plain `keras.layers.Dense` whose call is `x @ kernel + bias`
    (no activation, not quantized), so that its input's scale and shift can move into
    its weights. LoRA is fine: `dense.kernel` already includes the low-rank update."""
    return (
        type(dense) is keras.layers.Dense
        and dense.quantization_mode is None
        and dense.activation is keras.activations.linear
    )


def project(dense, inputs, affine=None, fold=True):
    """`dense(inputs * scale + shift)` for `affine = (scale, shift)`; `dense(inputs)` for
    `affine=None`.

    Args:
      dense: the projection.
      inputs: [..., in] tensor.
      affine: `(scale, shift)`, each [in] (shift may be None), or None.
      fold: fold the scale and shift into `dense`'s weights where `can_fold_into(dense)`
        allows (pass the layer's `training`: see the module docstring); otherwise they
        are applied to the inputs.
    """
    if affine is None:
        return dense(inputs)
    scale, shift = affine
    if fold and can_fold_into(dense):
        return dense_of_scaled(dense, inputs, scale, shift)
    scaled = inputs * ops.cast(scale, inputs.dtype)
    return dense(scaled if shift is None else scaled + ops.cast(shift, inputs.dtype))


def dense_of_scaled(dense, x, scale, shift=None):
    """`dense(x * scale + shift)` computed as `x @ (scale[:, None] * kernel) + shift @ kernel + bias`.

    Args:
      dense: a built layer for which `can_fold_into(dense)` holds.
      x: [..., in] input in `dense`'s compute dtype.
      scale: [in] per-feature scale.
      shift: [in] per-feature shift, or None.

    The folded weights are computed in the variables' dtype (float32 under mixed
    precision) and cast to the compute dtype once, like Dense's own kernel.

    Example:
    >>> import numpy as np
    >>> dense = keras.layers.Dense(3)
    >>> dense.build((None, 4))
    >>> x = np.random.rand(2, 4).astype("float32")
    >>> scale, shift = np.full(4, 2.0, "float32"), np.ones(4, "float32")
    >>> folded = keras.ops.convert_to_numpy(dense_of_scaled(dense, x, scale, shift))
    >>> bool(np.allclose(folded, keras.ops.convert_to_numpy(dense(x * scale + shift)), atol=1e-6))
    True
    """
    weight_dtype = dense.variable_dtype
    kernel = ops.cast(dense.kernel, weight_dtype)
    folded_kernel = ops.cast(scale, weight_dtype)[:, None] * kernel
    bias = None if dense.bias is None else ops.cast(dense.bias, weight_dtype)
    if shift is not None:
        shifted = ops.matmul(ops.cast(shift, weight_dtype)[None, :], kernel)[0]
        bias = shifted if bias is None else bias + shifted
    y = ops.matmul(x, ops.cast(folded_kernel, dense.compute_dtype))
    # ops.add, as Dense: on TensorFlow a BiasAdd, whose gradient is one BiasAddGrad
    # (a broadcasting `+` takes a slower generic Sum over all rows).
    return y if bias is None else ops.add(y, ops.cast(bias, dense.compute_dtype))
