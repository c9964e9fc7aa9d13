"""Alternative implementations, swapped in by monkeypatching inside the benchmark
process only, so that a candidate change (or the code a change replaced) can be timed
side by side with the library's own in one run (`--variants normformer+keras_ln`).

keras_ln
    The library's `realformer_tf.layers.normalization.LayerNorm` (hand-written gradient,
    adopted from this benchmark's former `fused_ln` patch) replaced by Keras 3's
    composite `keras.layers.LayerNormalization.call`, i.e. the implementation it
    replaced: shows what the custom gradient buys.

fused_ffn
    A candidate for the layers: the feed-forward's activation (BERT's tanh gelu) and,
    in NormFormer blocks, the extra LayerNorm over the [B, L, intermediate] activation
    become one op with a hand-written gradient that keeps only the pre-activation and
    two per-row statistics (mean, 1/std) for the backward pass and recomputes the gelu
    and the normalized activation there. The composite ops keep the pre-activation,
    gelu's temporaries (x^3, tanh, ...), the gelu output and the normalized activation,
    each [B, L, intermediate]. Same math; see `gelu_layer_norm`.
"""

import math
import types

import keras
import tensorflow as tf

from realformer_tf.layers import normalization

PATCHES = {
    "keras_ln": "Keras 3's composite LayerNormalization instead of the library's LayerNorm",
    "fused_ffn": "feed-forward gelu (+ NormFormer's intermediate LayerNorm) as one op that recomputes "
                 "in the backward pass",
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


def gelu_layer_norm(x, gamma, beta, epsilon):
    """LayerNorm(gelu(x)) over the last axis; the backward pass recomputes from x."""

    @tf.custom_gradient
    def forward(x, gamma, beta):
        a = _gelu_and_slope(x)[0]
        mean, variance = tf.nn.moments(a, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)

        def backward(dy):
            a, slope = _gelu_and_slope(x)
            xhat = (a - mean) * rstd
            dxhat = dy * gamma
            da = rstd * (dxhat - tf.reduce_mean(dxhat, -1, keepdims=True)
                         - xhat * tf.reduce_mean(dxhat * xhat, -1, keepdims=True))
            axes = list(range(len(dy.shape) - 1))
            return da * slope, tf.reduce_sum(dy * xhat, axes), tf.reduce_sum(dy, axes)

        return (a - mean) * rstd * gamma + beta, backward

    return forward(x, gamma, beta)


def _fused_feed_forward_sublayer(self, x, training):
    """The library's `_feed_forward_sublayer` with the fused ops above."""
    h = x if self.layer_norm_type == "post" else self.output_layer_norm(x)
    pre = tf.cast(self.intermediate_dense(h), tf.float32)
    if self.normformer:
        norm = self.intermediate_layer_norm
        inner = gelu_layer_norm(pre, tf.cast(norm.gamma, tf.float32), tf.cast(norm.beta, tf.float32),
                                norm.epsilon)
    else:
        inner = gelu(pre)
    out = self.output_dropout(self.output_dense(tf.cast(inner, self.compute_dtype)), training=training)
    if self.layer_norm_type == "post":
        return self.output_layer_norm(x + out)
    residual = x * self.residual_scale if self.use_residual_scale else x
    return residual + out


def apply_to(model, names):
    """Applies the named patches to a built model's layers (before it is traced)."""
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}")
    if "fused_ffn" in names:
        for layer in model._flatten_layers():
            if hasattr(layer, "_feed_forward_sublayer"):
                if layer.hidden_act != "gelu":
                    raise ValueError(f"fused_ffn implements hidden_act='gelu' only, not {layer.hidden_act!r}")
                layer._feed_forward_sublayer = types.MethodType(_fused_feed_forward_sublayer, layer)
    if "keras_ln" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, normalization.LayerNorm):
                # Same weights and config; only `call` changes to the parent's.
                layer.__class__ = keras.layers.LayerNormalization
    return model
