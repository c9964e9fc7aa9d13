"""Alternative implementations, swapped in by monkeypatching inside the benchmark
process only, so that a candidate change (or the code a change replaced) can be timed
side by side with the library's own in one run (`--variants normformer+keras_ln`).

keras_ln
    The library's `realformer_tf.layers.normalization.LayerNorm` (hand-written gradient,
    adopted from this benchmark's former `fused_ln` patch) replaced by Keras 3's
    composite `keras.layers.LayerNormalization.call`, i.e. the implementation it
    replaced: shows what the custom gradient buys.

composite_ffn
    NormFormer's feed-forward output_dense(LayerNorm(gelu(x))) as the three layers one
    after the other instead of the library's `LayerNorm.activate_normalize_and_project`
    (gelu and the standardization as one recomputing op, gamma and beta folded into the
    projection): shows what the fusion and the fold buy.

unfolded_head_scale
    NormFormer's head scale as a multiply on the [batch, length, heads * head_dim]
    context before the output projection instead of folded into that projection's
    kernel: shows what the fold buys.

tf_ops
    The model's `fused_kernels` option off (`kernels.use_fused_kernels(model, False)`),
    so every LayerNorm (and NormFormer's gelu + standardization) and every dropout runs
    as TensorFlow's ops instead of the fused CPU kernels the layers use by default:
    shows what the kernels buy. Applied by benchmark_encoder.build_ours.

keras_dropout
    Every dropout layer as Keras' `keras.layers.Dropout` (TensorFlow's four-op
    dropout that stores its mask) instead of the library's fused CPU dropout, the
    LayerNorm kernels kept: shows what the dropout kernel alone buys.

keras_gelu
    The feed-forward gelu of the other variants as Keras' composite
    `keras.activations.gelu(approximate=True)` instead of the library's `"gelu"` (one op
    whose backward pass recomputes the slope from the input; adopted from this
    benchmark's former `gelu_recompute` patch): shows what the recomputation buys.
"""

import types

import keras

from realformer_tf.layers import normalization
from realformer_tf.layers.attention import ResidualMultiHeadAttention
from realformer_tf.layers.dropout import Dropout

PATCHES = {
    "keras_ln": "Keras 3's composite LayerNormalization instead of the library's LayerNorm",
    "composite_ffn": "NormFormer's dense(LayerNorm(gelu(x))) as three layers instead of the library's fused and folded op",
    "unfolded_head_scale": "NormFormer's head scale multiplied into the context instead of folded into the kernel",
    "keras_gelu": "feed-forward gelu as Keras' composite instead of the library's recomputing op",
    "tf_ops": "LayerNorms and dropout as TensorFlow's ops instead of the fused CPU kernels",
    "keras_dropout": "dropout as Keras' Dropout instead of the fused CPU dropout kernel",
}

def keras_gelu(x):
    """What the library's "gelu" replaced: Keras' composite tanh gelu."""
    return keras.activations.gelu(x, approximate=True)


class _UnfoldableDense(keras.layers.Dense):
    """A Dense layer that `folding.can_fold_into` refuses (it takes exact Dense only), so
    the library falls back to running the scale, the norm and the projection one after
    the other: the code paths the fold replaced."""


def _refuse_folding(dense):
    dense.__class__ = _UnfoldableDense


def _composite_activate_normalize_and_project(self, pre_activation, hidden_act, dense):
    """`LayerNorm.activate_normalize_and_project`'s fallback, for a Keras LayerNormalization."""
    from realformer_tf.layers.activations import get_activation

    return dense(self(get_activation(hidden_act)(pre_activation)))


def _composite_normalize_and_project(self, inputs, dense):
    """`LayerNorm.normalize_and_project`'s fallback, for a Keras LayerNormalization."""
    return dense(self(inputs))


def apply_to(model, names):
    """Applies the named patches to a built model's layers (before it is traced)."""
    names = [n for n in names if n]
    unknown = sorted(set(names) - set(PATCHES))
    if unknown:
        raise ValueError(f"unknown patch(es) {', '.join(unknown)}; known: {', '.join(PATCHES)}")
    if "keras_ln" in names:
        names = names + ["composite_ffn"]  # Keras' LayerNormalization has no fused op
    blocks = [layer for layer in model._flatten_layers() if hasattr(layer, "_feed_forward_sublayer")]
    if "keras_gelu" in names or "composite_ffn" in names:
        acts = sorted({layer.hidden_act for layer in blocks} - {"gelu"})
        if acts:
            raise ValueError(f"keras_gelu / composite_ffn patch hidden_act='gelu' only, not {acts}")
    for layer in blocks:
        if "keras_gelu" in names and not layer.normformer:
            layer.activation = keras_gelu
        if "composite_ffn" in names and layer.normformer:
            _refuse_folding(layer.output_dense)
    if "unfolded_head_scale" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, ResidualMultiHeadAttention):
                _refuse_folding(layer.output_dense)
    if "keras_dropout" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, Dropout):
                layer.__class__ = keras.layers.Dropout  # same config and seed generator
    if "keras_ln" in names:
        for layer in model._flatten_layers():
            if isinstance(layer, normalization.LayerNorm):
                # Same weights and config; only `call` changes to the parent's.
                layer.__class__ = keras.layers.LayerNormalization
                layer.activate_normalize_and_project = types.MethodType(
                    _composite_activate_normalize_and_project, layer)
                layer.normalize_and_project = types.MethodType(_composite_normalize_and_project, layer)
    return model
