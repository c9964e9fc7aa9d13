"""Alternative implementations, swapped in by monkeypatching inside the benchmark
process only, so that a candidate change (or the code a change replaced) can be timed
side by side with the library's own in one run (`--variants normformer+keras_ln`).

keras_ln
    The library's `realformer_tf.layers.normalization.LayerNorm` (hand-written gradient,
    adopted from this benchmark's former `fused_ln` patch) replaced by Keras 3's
    composite `keras.layers.LayerNormalization.call`, i.e. the implementation it
    replaced: shows what the custom gradient buys.
"""

import keras

from realformer_tf.layers import normalization

PATCHES = {
    "keras_ln": "Keras 3's composite LayerNormalization instead of the library's LayerNorm",
}


def apply_to(model, names):
    """Applies the named patches to a built model's layers (before it is traced)."""
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}")
    if "keras_ln" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, normalization.LayerNorm):
                # Same weights and config; only `call` changes to the parent's.
                layer.__class__ = keras.layers.LayerNormalization
    return model
