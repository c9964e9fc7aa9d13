"""Alternative implementations, swapped in by monkeypatching inside the benchmark
process only, so that a candidate change (or the code a change replaced) can be timed
side by side with the library's own in one run (`--variants normformer+keras_ln`).

keras_ln
    The library's `realformer_tf.layers.normalization.LayerNorm` (hand-written gradient,
    adopted from this benchmark's former `fused_ln` patch) replaced by Keras 3's
    composite `keras.layers.LayerNormalization.call`, i.e. the implementation it
    replaced: shows what the custom gradient buys.

composite_ffn
    NormFormer's feed-forward LayerNorm(gelu(x)) as the two composite ops instead of the
    library's one recomputing op (`LayerNorm.activate_and_normalize`, adopted from this
    benchmark's former `fused_ffn` patch): shows what the fusion buys.

gelu_recompute
    A candidate for the other blocks: BERT's tanh gelu as one op with a hand-written
    gradient that keeps only its input for the backward pass (the composite keeps x^3,
    tanh, ... each [B, L, intermediate]) and recomputes the rest there.
"""

import math
import types

import keras
import tensorflow as tf

from realformer_tf.layers import normalization
from realformer_tf.layers.activations import get_activation

PATCHES = {
    "keras_ln": "Keras 3's composite LayerNormalization instead of the library's LayerNorm",
    "composite_ffn": "NormFormer's LayerNorm(gelu(x)) as composite ops instead of the library's fused op",
    "gelu_recompute": "feed-forward gelu as one op that recomputes in the backward pass",
}

_C = math.sqrt(2.0 / math.pi)


def _gelu_and_slope(x):
    """BERT's tanh gelu and its derivative."""
    t = tf.tanh(_C * (x + 0.044715 * x * x * x))
    y = 0.5 * x * (1.0 + t)
    slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * _C * (1.0 + 3 * 0.044715 * x * x)
    return y, slope


@tf.custom_gradient
def gelu(x):
    """tanh gelu that keeps only its input for the backward pass."""

    def backward(dy):
        return dy * _gelu_and_slope(x)[1]

    return _gelu_and_slope(x)[0], backward


def _composite_activate_and_normalize(self, pre_activation, hidden_act):
    """What `LayerNorm.activate_and_normalize` replaced: the activation, then the norm."""
    return self(get_activation(hidden_act)(pre_activation))


def apply_to(model, names):
    """Applies the named patches to a built model's layers (before it is traced)."""
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}")
    if "keras_ln" in names:
        names = names + ["composite_ffn"]  # Keras' LayerNormalization has no fused entry point
    blocks = [layer for layer in model._flatten_layers() if hasattr(layer, "_feed_forward_sublayer")]
    if "gelu_recompute" in names or "composite_ffn" in names:
        acts = sorted({layer.hidden_act for layer in blocks} - {"gelu"})
        if acts:
            raise ValueError(f"gelu_recompute / composite_ffn patch hidden_act='gelu' only, not {acts}")
    for layer in blocks:
        if "gelu_recompute" in names and not layer.normformer:
            layer.activation = gelu
        if "composite_ffn" in names and layer.normformer:
            norm = layer.intermediate_layer_norm
            norm.activate_and_normalize = types.MethodType(_composite_activate_and_normalize, norm)
    if "keras_ln" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, normalization.LayerNorm):
                # Same weights and config; only `call` changes to the parent's.
                layer.__class__ = keras.layers.LayerNormalization
    return model
