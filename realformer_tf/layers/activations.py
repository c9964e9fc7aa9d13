"""Activation functions by BERT config name.

BERT's `"gelu"` is the tanh approximation (google-research/bert modeling.py); the erf
form is available as `"gelu_exact"`. Keeping the names as strings keeps every layer
config JSON-serializable.
"""

import keras

_ACTIVATIONS = {
    "gelu": lambda x: keras.activations.gelu(x, approximate=True),
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
