"""LayerNorm over the last axis with a hand-written gradient, on every Keras backend.

Same weights, names and math as `keras.layers.LayerNormalization` (statistics in
float32 under mixed precision), but the backward pass keeps only the normalized input
and a per-row scale, where Keras 3's composite op keeps the input plus a full-size
`rsqrt(var) * gamma` and runs about twice the elementwise passes: less step memory and
time, most for NormFormer, whose extra LayerNorm runs on the [B, L, intermediate]
activation (benchmarks/patches.py `keras_ln` measures it).

    dxhat  = dy * gamma
    dx     = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    dgamma = sum(dy * xhat),  dbeta = sum(dy)

Where a LayerNorm feeds only plain Dense layers (every pre-LN LayerNorm: the attention's
query, key and value projections and the feed-forward's first; NormFormer's
feed-forward LayerNorm before the second), gamma and beta fold into those layers'
weights (`realformer_tf/layers/folding.py`) and only the standardization runs on the
activation (`LayerNorm.split_affine`, `LayerNorm.normalize_and_project`). NormFormer's
feed-forward LayerNorm(gelu(x)) is one standardizing op with gelu inside that keeps
gelu's slope for the backward pass (`LayerNorm.activate_normalize_and_project`). They
exist so that NormFormer's extra normalizations cost passes over the activations, not
extra copies of them (benchmarks/results/latest_small*.md has the current ratios).

All of this is for training calls (`training=True`, which `model.fit` and the
package's trainer pass), the fused CPU kernels (`realformer_tf.kernels`) included. An
inference call (`predict`, `model.export`, `tf.saved_model.save`, a user's own serving
`tf.function`) runs the plain formula in keras.ops, so a graph traced for it holds only
TensorFlow's ops and a SavedModel of it loads in TensorFlow Serving and in any Python
without this package.

The gradient goes through `keras.ops.custom_gradient` (tf.custom_gradient,
jax.custom_gradient, a torch.autograd.Function). On PyTorch, Keras runs the forward of
such a function without autograd and hands the backward only `upstream`; the closure
below needs nothing else, so the same code serves all three backends.
"""

import keras
from keras import ops

from realformer_tf import kernels
from realformer_tf.layers import folding
from realformer_tf.layers.activations import gelu_and_slope, get_activation


def _moments(x):
    mean = ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
    return mean, variance


def _standardize_forward(x, epsilon):
    """(xhat, rstd): xhat = (x - mean) * rstd, rstd = 1 / sqrt(variance + epsilon)."""
    mean, variance = _moments(x)
    rstd = ops.rsqrt(variance + epsilon)
    return (x - mean) * rstd, rstd


def _standardize_backward(dxhat, xhat, rstd):
    """dx of xhat = (x - mean) * rstd."""
    return rstd * (dxhat - ops.mean(dxhat, -1, keepdims=True)
                   - xhat * ops.mean(dxhat * xhat, -1, keepdims=True))


def _normalize_backward(dy, xhat, rstd, gamma):
    """(dx, dgamma, dbeta) of y = xhat * gamma + beta, xhat = (x - mean) * rstd."""
    batch_axes = tuple(range(len(dy.shape) - 1))
    dx = _standardize_backward(dy * gamma, xhat, rstd)
    return dx, ops.sum(dy * xhat, batch_axes), ops.sum(dy, batch_axes)


def _upstream(args, upstream):
    return args[0] if upstream is None else upstream


def _no_slope():
    return ops.zeros(kernels.NO_SLOPE_SHAPE, "float32")


# The training forms. Each op below runs as the library's fused CPU kernel where the
# layer's `fused_kernels` option and `kernels.ops_for` allow (TensorFlow on a CPU,
# float32, no XLA) and as the keras.ops composite elsewhere; both compute the same
# formulas. Inference calls use `_standardize_forward` alone: no gradient bookkeeping.

def _layer_norm(x, gamma, beta, epsilon, fused_kernels=True):
    fused = kernels.ops_for(x, fused_kernels)

    @ops.custom_gradient
    def forward(x, gamma, beta):
        if fused:
            y, xhat, rstd = fused.realformer_layer_norm(x, gamma, beta, epsilon=epsilon)
        else:
            xhat, rstd = _standardize_forward(x, epsilon)
            y = xhat * gamma + beta

        def backward(*args, upstream=None):
            dy = _upstream(args, upstream)
            if fused:
                return tuple(fused.realformer_layer_norm_grad(dy, xhat, rstd, gamma))
            return _normalize_backward(dy, xhat, rstd, gamma)

        return y, backward

    return forward(x, gamma, beta)


def _gelu_standardize(x, epsilon, stats_dtype, fused_kernels=True):
    """(gelu(x) - mean) / std over the last axis as one op: NormFormer's feed-forward
    LayerNorm without its gamma and beta (which fold into the next projection).

    The backward pass keeps the result (which the next projection keeps anyway), gelu's
    slope and two per-row statistics: one [batch, length, intermediate] tensor of its
    own, where the composite keeps gelu's input, its output and the normalized
    activation (with the fold: NormFormer's step 0.96x the time and 0.89x the memory of
    the composite's, benchmarks/patches.py `composite_ffn`). gelu runs in x's dtype, the
    statistics and the result in `stats_dtype`, as in the composite."""
    fused = kernels.ops_for(x, fused_kernels) if stats_dtype == "float32" else None

    @ops.custom_gradient
    def forward(x):
        if fused:
            xhat, rstd, slope = fused.realformer_gelu_standardize(x, epsilon=epsilon)
        else:
            a, slope = gelu_and_slope(x)
            xhat, rstd = _standardize_forward(ops.cast(a, stats_dtype), epsilon)

        def backward(*args, upstream=None):
            dxhat = _upstream(args, upstream)
            if fused:
                return fused.realformer_standardize_grad(dxhat, xhat, rstd, slope)
            return ops.cast(_standardize_backward(dxhat, xhat, rstd), x.dtype) * slope

        return xhat, backward

    return forward(x)


def _standardize(x, epsilon, fused_kernels=True):
    """(x - mean) / std over the last axis, with the backward of `_standardize_backward`."""
    fused = kernels.ops_for(x, fused_kernels)

    @ops.custom_gradient
    def forward(x):
        if fused:
            xhat, rstd = fused.realformer_standardize(x, epsilon=epsilon)
        else:
            xhat, rstd = _standardize_forward(x, epsilon)

        def backward(*args, upstream=None):
            dxhat = _upstream(args, upstream)
            if fused:
                return fused.realformer_standardize_grad(dxhat, xhat, rstd, _no_slope())
            return _standardize_backward(dxhat, xhat, rstd)

        return xhat, backward

    return forward(x)


@keras.saving.register_keras_serializable(package="realformer_tf")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization(axis=-1)` with the cheaper gradient above.

    Args:
        fused_kernels: bool, run training calls as the library's fused CPU kernels
            where they apply (TensorFlow on CPU, float32, outside XLA;
            `realformer_tf.kernels`). Default True. Inference calls never use them, so
            exported graphs load without this package. The same formulas either way.
        **kwargs: as `keras.layers.LayerNormalization` (`epsilon`, `name`, `dtype`, ...).

    Call args:
        inputs: [..., width] tensor.
        training: bool; True lets the fused kernels run (Keras passes the caller's
            `training` on to nested layers). Default False.

    Example:

        import numpy as np
        from realformer_tf.layers.normalization import LayerNorm

        layer = LayerNorm(epsilon=1e-12)
        y = layer(np.random.default_rng(0).normal(size=(2, 5, 24)).astype("float32"))
    """

    def __init__(self, fused_kernels=True, **kwargs):
        super().__init__(**kwargs)
        self.fused_kernels = bool(fused_kernels)

    def get_config(self):
        return dict(super().get_config(), fused_kernels=self.fused_kernels)

    def call(self, inputs, training=False):
        if not self._normalizes_last_axis(inputs):
            return super().call(inputs)
        stats_dtype = self._stats_dtype(inputs)
        x, gamma, beta = (ops.cast(t, stats_dtype) for t in (inputs, self.gamma, self.beta))
        if training:
            y = _layer_norm(x, gamma, beta, self.epsilon, self.fused_kernels)
        else:
            y = _standardize_forward(x, self.epsilon)[0] * gamma + beta
        return ops.cast(y, self.compute_dtype)

    def _normalizes_last_axis(self, inputs):
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        return list(axis) in ([-1], [len(inputs.shape) - 1]) and self.center and self.scale

    def _stats_dtype(self, inputs):
        return "float64" if keras.backend.standardize_dtype(inputs.dtype) == "float64" else "float32"

    def split_affine(self, inputs, training=False):
        """`(standardized, (gamma, beta))`: `self(inputs)` without its gamma and beta, for a
        caller that folds them into the projections that follow
        (`folding.project(dense, standardized, affine)`); `(self(inputs), None)` where
        this LayerNorm does not normalize the last axis with both.

        Args:
          inputs: [..., width] tensor.
          training: the caller's `training`: True lets the fused kernels run.
        """
        if not self._normalizes_last_axis(inputs):
            return self(inputs, training=training), None
        x = ops.cast(inputs, self._stats_dtype(inputs))
        xhat = _standardize(x, self.epsilon, self.fused_kernels) if training else _standardize_forward(x, self.epsilon)[0]
        return ops.cast(xhat, self.compute_dtype), (self.gamma, self.beta)

    def normalize_and_project(self, inputs, dense, training=False):
        """dense(self(inputs)), with gamma and beta folded into `dense`'s weights where it
        allows (`split_affine`, `folding.project`): the pre-LN feed-forward's first
        projection.

        Args:
          inputs: [..., width] tensor, normalized over its last axis.
          dense: the projection that takes the normalized tensor.
          training: the caller's `training`: folds (`folding.project`) and lets the
            fused kernels run when True.
        """
        return folding.project(dense, *self.split_affine(inputs, training), fold=bool(training))

    def activate_normalize_and_project(self, pre_activation, hidden_act, dense, training=False):
        """dense(self(get_activation(hidden_act)(pre_activation))), NormFormer's feed-forward.

        In training, gamma and beta fold into `dense`'s weights where it allows
        (`folding`), so only the standardization runs on the [batch, length,
        intermediate] activation, and for BERT's "gelu" the activation and the
        standardization are one op that keeps gelu's slope for the backward pass
        (`_gelu_standardize`); inference runs them one after the other.

        Args:
          pre_activation: [..., width] input of the activation; normalized over its last axis.
          hidden_act: a BERT config activation name (realformer_tf.layers.activations).
          dense: the projection that takes the normalized activation.
          training: the caller's `training`: folds (`folding.project`) and lets the
            fused kernels run when True.
        """
        if not (training and hidden_act == "gelu" and self._normalizes_last_axis(pre_activation)):
            return self.normalize_and_project(get_activation(hidden_act)(pre_activation), dense, training)
        xhat = _gelu_standardize(pre_activation, self.epsilon, self._stats_dtype(pre_activation),
                                 self.fused_kernels)
        return folding.project(dense, ops.cast(xhat, dense.compute_dtype), (self.gamma, self.beta),
                               bool(training))
