"""Candidate speed-ups, tried by monkeypatching inside the benchmark process only.

Nothing here changes `realformer_tf/`: a patch is active only while a model is being
constructed and built (`with apply("fused_ln"): ...`), so the benchmark can time the
patched and the unpatched model side by side in one process. A patch that proves itself
is a suggestion for the library (see benchmarks/README.md).

fused_ln
    `keras.layers.LayerNormalization` -> `FusedLayerNorm`, a subclass (same weights,
    same names, same math) whose forward pass computes `xhat = (x - mean) * rstd` once and
    whose backward pass is written by hand (`tf.custom_gradient`):
        dxhat = dy * gamma
        dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))
        dgamma = sum(dy * xhat), dbeta = sum(dy)
    It keeps one full-size tensor (xhat) and one per-row scalar (rstd) for the backward
    pass, where Keras 3's composite `ops.layer_normalization` keeps the input, a
    full-size `rsqrt(var) * gamma` and more, and its autodiff backward runs ~2x the
    elementwise passes. Affects every LayerNorm of our model (embeddings, blocks, final
    LN, NormFormer's extra LNs); Model Garden (tf_keras) is untouched.
"""

import contextlib

import keras
import tensorflow as tf

_KerasLayerNorm = keras.layers.LayerNormalization


def _layer_norm_last_axis(x, gamma, beta, epsilon):
    @tf.custom_gradient
    def layer_norm(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)
        xhat = (x - mean) * rstd
        y = xhat * gamma + beta

        scope = tf.get_current_name_scope()

        def grad(dy):
            # Name the backward ops like autodiff does (gradient_tape/<forward scope>/...)
            # so profile_encoder.py attributes them to the model and the layer.
            with tf.name_scope(f"gradient_tape/{scope}/" if scope else "gradient_tape/"):
                reduce_axes = list(range(len(dy.shape) - 1))
                dxhat = dy * gamma
                dx = rstd * (dxhat - tf.reduce_mean(dxhat, -1, keepdims=True)
                             - xhat * tf.reduce_mean(dxhat * xhat, -1, keepdims=True))
                return dx, tf.reduce_sum(dy * xhat, reduce_axes), tf.reduce_sum(dy, reduce_axes)

        return y, grad

    return layer_norm(x, gamma, beta)


class FusedLayerNorm(_KerasLayerNorm):
    """`keras.layers.LayerNormalization` over the last axis with a hand-written
    gradient (float32 statistics, like Keras). Falls back to Keras for other setups."""

    def call(self, inputs):
        axis = self.axis if isinstance(self.axis, (list, tuple)) else [self.axis]
        last = len(inputs.shape) - 1
        if (list(axis) not in ([-1], [last]) or not self.center or not self.scale
                or getattr(self, "rms_scaling", False)):
            return super().call(inputs)
        x = tf.cast(inputs, tf.float32)
        gamma = tf.cast(tf.convert_to_tensor(self.gamma), tf.float32)
        beta = tf.cast(tf.convert_to_tensor(self.beta), tf.float32)
        y = _layer_norm_last_axis(x, gamma, beta, self.epsilon)
        return tf.cast(y, self.compute_dtype)


PATCHES = {
    "fused_ln": "LayerNorm with a hand-written gradient (benchmarks/patches.py)",
}


@contextlib.contextmanager
def apply(names):
    """Activates the named patches while models are constructed and built."""
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}")
    saved = keras.layers.LayerNormalization
    try:
        if "fused_ln" in names:
            keras.layers.LayerNormalization = FusedLayerNorm
        yield
    finally:
        keras.layers.LayerNormalization = saved
