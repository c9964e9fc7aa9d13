"""Activation functions by BERT config name.

BERT's `"gelu"` is the tanh approximation (google-research/bert modeling.py); the erf
form is available as `"gelu_exact"`. Keeping the names as strings keeps every layer
config JSON-serializable.

`"gelu"` is one op with a hand-written gradient (`keras.ops.custom_gradient`, every
backend): its backward pass keeps only the input and recomputes the slope, where the
composite's autodiff keeps x^3, tanh and their products, each as large as the
[batch, length, intermediate] activation. Same values (written as x * sigmoid(2u), the
same function in fewer elementwise passes). At the `small` benchmark preset a BERT
step with it takes 0.66x the memory and 0.97x the time of one with the composite
(benchmarks/results/latest_small_patches.md, `vanilla+keras_gelu`).
"""

import math

import keras
from keras import ops

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715


def _gelu_parts(x):
    """x * s, s and x^2, with s = sigmoid(2u), u = C * (x + K * x^3): BERT's
    0.5 * x * (1 + tanh(u)) = x * sigmoid(2u)."""
    x2 = x * x
    s = ops.sigmoid(x * (x2 * (2 * _GELU_C * _GELU_K) + 2 * _GELU_C))
    return x * s, s, x2


def _times_sigmoid_slope(g, s):
    """g * s * (1 - s) for s = sigmoid(v): on TensorFlow one op (SigmoidGrad) instead of
    three passes over the activation."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.raw_ops.SigmoidGrad(y=s, dy=g)
    return g * (s - s * s)


def gelu_and_slope(x):
    """BERT's gelu of x and its derivative, d/dx = s + x * s * (1 - s) * 2C * (1 + 3K x^2)."""
    a, s, x2 = _gelu_parts(x)
    return a, s + _times_sigmoid_slope(x * (x2 * (6 * _GELU_C * _GELU_K) + 2 * _GELU_C), s)


def gelu(x):
    """BERT's gelu (the tanh approximation); the backward pass keeps only `x`."""

    @ops.custom_gradient
    def forward(x):
        def backward(*args, upstream=None):
            dy = args[0] if upstream is None else upstream
            return dy * gelu_and_slope(x)[1]

        return _gelu_parts(x)[0], backward

    return forward(x)


_ACTIVATIONS = {
    "gelu": gelu,
    "gelu_exact": lambda x: keras.activations.gelu(x, approximate=False),
    "relu": keras.activations.relu,
    "tanh": keras.activations.tanh,
    "swish": keras.activations.silu,
    "silu": keras.activations.silu,
    "linear": keras.activations.linear,
}

ACTIVATION_NAMES = tuple(sorted(_ACTIVATIONS))


def get_activation(name):
    """Returns the activation function for a BERT config `hidden_act` string."""
    try:
        return _ACTIVATIONS[name.lower()]
    except (KeyError, AttributeError):
        raise ValueError(
            f"hidden_act={name!r} is not supported; use one of {', '.join(ACTIVATION_NAMES)}"
        ) from None
