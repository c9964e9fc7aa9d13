"""LayerNorm over the last axis with a hand-written gradient, on every Keras backend.

Same weights, names and math as `keras.layers.LayerNormalization` (statistics in
float32 under mixed precision), but the backward pass keeps only the normalized input
and a per-row scale, where Keras 3's composite op keeps the input plus a full-size
`rsqrt(var) * gamma` and runs about twice the elementwise passes. Measured on CPU with
TensorFlow (benchmarks/results/latest_small.md): NormFormer, whose extra LayerNorm runs
on the [B, L, intermediate] activation, -17% step memory and -10% step time; vanilla
-5%/-4%.

    dxhat  = dy * gamma
    dx     = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
    dgamma = sum(dy * xhat),  dbeta = sum(dy)

NormFormer's feed-forward LayerNorm(gelu(x)) runs as one such op
(`LayerNorm.activate_and_normalize`), which keeps only gelu's input and two per-row
statistics for the backward pass and recomputes the rest there: NormFormer's step
memory 1.21-1.25x -> 0.89x vanilla BERT's at the `small` benchmark preset.

The gradient goes through `keras.ops.custom_gradient` (tf.custom_gradient,
jax.custom_gradient, a torch.autograd.Function). On PyTorch, Keras runs the forward of
such a function without autograd and hands the backward only `upstream`; the closure
below needs nothing else, so the same code serves all three backends.
"""

import math

import keras
from keras import ops


def _moments(x):
    mean = ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(ops.square(x - mean), axis=-1, keepdims=True)
    return mean, variance


def _normalize_backward(dy, xhat, rstd, gamma):
    """(dx, dgamma, dbeta) of y = xhat * gamma + beta, xhat = (x - mean) * rstd."""
    batch_axes = tuple(range(len(dy.shape) - 1))
    dxhat = dy * gamma
    dx = rstd * (dxhat - ops.mean(dxhat, -1, keepdims=True)
                 - xhat * ops.mean(dxhat * xhat, -1, keepdims=True))
    return dx, ops.sum(dy * xhat, batch_axes), ops.sum(dy, batch_axes)


def _upstream(args, upstream):
    return args[0] if upstream is None else upstream


def _layer_norm(x, gamma, beta, epsilon):
    @ops.custom_gradient
    def forward(x, gamma, beta):
        mean, variance = _moments(x)
        rstd = ops.rsqrt(variance + epsilon)
        xhat = (x - mean) * rstd

        def backward(*args, upstream=None):
            return _normalize_backward(_upstream(args, upstream), xhat, rstd, gamma)

        return xhat * gamma + beta, backward

    return forward(x, gamma, beta)


_GELU_C = math.sqrt(2.0 / math.pi)


def _tanh_gelu(x):
    """BERT's gelu (the tanh approximation) and the tanh it needs for its slope."""
    t = ops.tanh(_GELU_C * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1.0 + t), t


def _tanh_gelu_slope(x, t):
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _GELU_C * (1.0 + 3 * 0.044715 * x * x)


def _gelu_layer_norm(x, gamma, beta, epsilon, stats_dtype):
    """LayerNorm(gelu(x)) over the last axis as one op: NormFormer's feed-forward.

    The composite keeps gelu's temporaries, its output and the normalized activation,
    each as large as x ([batch, length, intermediate]), for the backward pass; this keeps
    x and two per-row statistics and recomputes the rest there (same math, about a
    quarter less step memory for a NormFormer model). gelu runs in x's dtype, the
    normalization in `stats_dtype`, as in the composite."""

    @ops.custom_gradient
    def forward(x, gamma, beta):
        a = ops.cast(_tanh_gelu(x)[0], stats_dtype)
        mean, variance = _moments(a)
        rstd = ops.rsqrt(variance + epsilon)

        def backward(*args, upstream=None):
            a, t = _tanh_gelu(x)
            xhat = (ops.cast(a, stats_dtype) - mean) * rstd
            da, dgamma, dbeta = _normalize_backward(_upstream(args, upstream), xhat, rstd, gamma)
            return ops.cast(da, x.dtype) * _tanh_gelu_slope(x, t), dgamma, dbeta

        return (a - mean) * rstd * gamma + beta, backward

    return forward(x, gamma, beta)


@keras.saving.register_keras_serializable(package="realformer_tf")
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization(axis=-1)` with the cheaper gradient above."""

    def call(self, inputs):
        if not self._normalizes_last_axis(inputs):
            return super().call(inputs)
        stats_dtype = self._stats_dtype(inputs)
        y = _layer_norm(
            ops.cast(inputs, stats_dtype),
            ops.cast(self.gamma, stats_dtype),
            ops.cast(self.beta, stats_dtype),
            self.epsilon,
        )
        return ops.cast(y, self.compute_dtype)

    def _normalizes_last_axis(self, inputs):
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        return list(axis) in ([-1], [len(inputs.shape) - 1]) and self.center and self.scale

    def _stats_dtype(self, inputs):
        return "float64" if keras.backend.standardize_dtype(inputs.dtype) == "float64" else "float32"

    def activate_and_normalize(self, pre_activation, hidden_act):
        """self(get_activation(hidden_act)(pre_activation)); for BERT's "gelu" as one op
        that recomputes the activation in the backward pass (`_gelu_layer_norm`).

        Args:
          pre_activation: the tensor the activation applies to, normalized over its last axis.
          hidden_act: a BERT config activation name (realformer_tf.layers.activations).
        """
        if hidden_act != "gelu" or not self._normalizes_last_axis(pre_activation):
            from realformer_tf.layers.activations import get_activation

            return self(get_activation(hidden_act)(pre_activation))
        stats_dtype = self._stats_dtype(pre_activation)
        y = _gelu_layer_norm(pre_activation, ops.cast(self.gamma, stats_dtype), ops.cast(self.beta, stats_dtype),
                             self.epsilon, stats_dtype)
        return ops.cast(y, self.compute_dtype)
