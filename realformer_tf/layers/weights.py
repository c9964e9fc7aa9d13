"""The kernel/bias options every block and stack passes to its projections.

Blocks take `keras.layers.Dense`'s weight arguments and hand fresh copies to each
sublayer (a seeded initializer object shared by two layers would give them the same
kernel). `kernel_initializer=None` means BERT's TruncatedNormal(initializer_range).
"""

import keras

_KINDS = {
    "initializer": keras.initializers,
    "regularizer": keras.regularizers,
    "constraint": keras.constraints,
}
NAMES = tuple(f"{part}_{kind}" for kind in _KINDS for part in ("kernel", "bias"))


def _module(name):
    return _KINDS[name.split("_", 1)[1]]


class WeightOptions:
    """kernel/bias initializer, regularizer and constraint, serializable."""

    def __init__(self, initializer_range=0.02, **options):
        unknown = set(options) - set(NAMES)
        if unknown:
            raise TypeError(f"unknown weight options {sorted(unknown)}; use {NAMES}")
        if options.get("kernel_initializer") is None:
            options["kernel_initializer"] = keras.initializers.TruncatedNormal(
                stddev=initializer_range)
        options.setdefault("bias_initializer", "zeros")
        self._config = {
            name: _module(name).serialize(_module(name).get(options.get(name)))
            for name in NAMES
        }

    @classmethod
    def pop_from(cls, kwargs, initializer_range=0.02):
        """The options of `NAMES` taken out of a layer's `kwargs`."""
        return cls(initializer_range, **{name: kwargs.pop(name) for name in NAMES if name in kwargs})

    def layer_kwargs(self):
        """Fresh objects for one sublayer's constructor."""
        return {name: _module(name).get(value) for name, value in self._config.items()}

    def get_config(self):
        return dict(self._config)
