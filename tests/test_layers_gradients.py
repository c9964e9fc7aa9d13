"""Gradients: finite, and equal to central finite differences.

Two kinds of finite differences:
* of the float64 NumPy reference (eps 1e-5; accurate to ~1e-9), compared with the
  float32 tape gradients of our layers: this checks the backward pass against the math;
* of our own layers built with dtype="float64" (eps 1e-3, loose tolerance): this checks
  the tape against the layer's own forward pass.
"""

import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from realformer_tf.layers import (
    ResidualMultiHeadAttention,
    TransformerEncoder,
    TransformerEncoderBlock,
)

B, L, H, N, I = 2, 5, 12, 4, 13


def _close_to_fd(label, tape_grad, fd_grad, rel=2e-3):
    tape_grad = np.asarray(tape_grad, np.float64)
    assert np.all(np.isfinite(tape_grad)), label
    scale = max(1.0, float(np.max(np.abs(fd_grad))))
    dev = float(np.nanmax(np.abs(tape_grad - fd_grad)))
    print(f"DEV grad/{label} {dev:.3e} (scale {scale:.2f})")
    assert dev <= rel * scale, f"{label}: |tape - fd| = {dev:.3e} > {rel * scale:.3e}"
    # The probe is meaningful: the gradient is not identically zero.
    assert np.nanmax(np.abs(fd_grad)) > 1e-3, label


@pytest.mark.parametrize("head_scale_position", ["before_projection", "after_projection"])
def test_attention_gradients_match_reference_finite_differences(head_scale_position):
    rng = np.random.default_rng(200)
    x = rng.normal(size=(B, L, H))
    prev = rng.normal(scale=2.0, size=(B, N, L, L))
    mask = ref.padding_mask(B, L, [5, 3])
    r_out = rng.normal(size=(B, L, H))
    r_scores = rng.normal(size=(B, N, L, L))
    layer = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N, use_running_mean=True,
                                       layer_index=1, use_head_scale=True,
                                       head_scale_position=head_scale_position)
    x32, prev32 = tf.constant(x, tf.float32), tf.constant(prev, tf.float32)
    layer(x32, x32, attention_mask=mask, prev_scores=prev32)
    ref.randomize_weights(layer, seed=201)

    with tf.GradientTape() as tape:
        tape.watch([x32, prev32])
        out, scores = layer(x32, x32, attention_mask=mask, prev_scores=prev32)
        loss = tf.reduce_sum(out * r_out) + tf.reduce_sum(scores * r_scores)
    wanted = [layer.head_scale, layer.query_dense.kernel, layer.value_dense.bias]
    g_x, g_prev, g_head, g_q, g_vb = tape.gradient(loss, [x32, prev32] + wanted)

    p = ref.attention_params(layer)

    def f():
        o, s = ref.attention(x, x, p, N, attention_mask=mask, prev_scores=prev,
                             use_running_mean=True, layer_index=1, head_scale=p["head_scale"],
                             head_scale_position=head_scale_position)
        return float(np.sum(o * r_out) + np.sum(s * r_scores))

    label = f"attention/{head_scale_position}"
    _close_to_fd(label + "/x", g_x, ref.numeric_grad(f, x))
    _close_to_fd(label + "/prev_scores", g_prev, ref.numeric_grad(f, prev))
    _close_to_fd(label + "/head_scale", g_head, ref.numeric_grad(f, p["head_scale"]))
    _close_to_fd(label + "/query_kernel", g_q, ref.numeric_grad(f, p["wq"]))
    _close_to_fd(label + "/value_bias", g_vb, ref.numeric_grad(f, p["bv"]))


@pytest.mark.parametrize("layer_norm_type", ["normformer", "post"])
def test_block_gradients_match_reference_finite_differences(layer_norm_type):
    normformer = layer_norm_type == "normformer"
    rng = np.random.default_rng(210)
    x = rng.normal(size=(B, L, H))
    prev = rng.normal(scale=2.0, size=(B, N, L, L))
    mask = ref.padding_mask(B, L, [5, 4])
    r_out = rng.normal(size=(B, L, H))
    cfg = dict(num_heads=N, layer_norm_type=layer_norm_type, layer_index=1,
               use_running_mean=True)
    block = TransformerEncoderBlock(intermediate_size=I, use_residual_scale=normformer, **cfg)
    x32, prev32 = tf.constant(x, tf.float32), tf.constant(prev, tf.float32)
    block(x32, attention_mask=mask, prev_scores=prev32)
    ref.randomize_weights(block, seed=211)

    named = {
        "intermediate_kernel": block.intermediate_dense.kernel,
        "output_ln_gamma": block.output_layer_norm.gamma,
        "attention_ln_beta": block.attention_layer_norm.beta,
    }
    if normformer:
        named.update(
            residual_scale=block.residual_scale,
            head_scale=block.attention.head_scale,
            intermediate_ln_gamma=block.intermediate_layer_norm.gamma,
            intermediate_ln_beta=block.intermediate_layer_norm.beta,
            output_kernel=block.output_dense.kernel,
            output_bias=block.output_dense.bias,
            attention_output_kernel=block.attention.output_dense.kernel,
            attention_post_ln_beta=block.attention_post_layer_norm.beta,
        )
    with tf.GradientTape() as tape:
        tape.watch([x32, prev32])
        out, _ = block(x32, attention_mask=mask, prev_scores=prev32, training=False)
        loss = tf.reduce_sum(out * r_out)
    grads = tape.gradient(loss, [x32, prev32] + list(named.values()))

    p = ref.encoder_block_params(block)
    ref_arrays = {
        "intermediate_kernel": p["ffn"]["w1"],
        "output_ln_gamma": p["ffn"]["ln_out"][0],
        "attention_ln_beta": p["ln_attention"][1],
    }
    if normformer:
        ref_arrays.update(
            residual_scale=p["ffn"]["residual_scale"],
            head_scale=p["attention"]["head_scale"],
            intermediate_ln_gamma=p["ffn"]["ln_inner"][0],
            intermediate_ln_beta=p["ffn"]["ln_inner"][1],
            output_kernel=p["ffn"]["w2"],
            output_bias=p["ffn"]["b2"],
            attention_output_kernel=p["attention"]["wo"],
            attention_post_ln_beta=p["ln_attention_post"][1],
        )

    def f():
        o, _ = ref.encoder_block(x, p, attention_mask=mask, prev_scores=prev, **cfg)
        return float(np.sum(o * r_out))

    label = f"block/{layer_norm_type}"
    _close_to_fd(label + "/x", grads[0], ref.numeric_grad(f, x))
    _close_to_fd(label + "/prev_scores", grads[1], ref.numeric_grad(f, prev))
    for (name, _), g in zip(named.items(), grads[2:]):
        _close_to_fd(f"{label}/{name}", g, ref.numeric_grad(f, ref_arrays[name]))


def test_float64_layer_gradient_matches_its_own_finite_differences():
    """Our own forward pass, differenced, in float64 (the layers accept dtype="float64")."""
    rng = np.random.default_rng(220)
    x = tf.constant(rng.normal(size=(B, L, H)), tf.float64)
    r_out = tf.constant(rng.normal(size=(B, L, H)), tf.float64)
    mask = ref.padding_mask(B, L, [5, 2])
    block = TransformerEncoderBlock(num_heads=N, intermediate_size=I,
                                    layer_norm_type="normformer", use_residual_scale=True,
                                    dtype="float64")
    block(x, attention_mask=mask)
    ref.randomize_weights(block, seed=221)
    assert all(v.dtype == "float64" for v in block.weights)

    def loss_fn(inp):
        out, scores = block(inp, attention_mask=mask, training=False)
        assert out.dtype == tf.float64 and scores.dtype == tf.float64
        return tf.reduce_sum(out * r_out)

    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = loss_fn(x)
    g = tape.gradient(loss, x).numpy()
    eps = 1e-3
    x_np = x.numpy()
    fd = np.full(x_np.shape, np.nan)
    probe = rng.choice(x_np.size, size=12, replace=False)
    for i in probe:
        up, down = x_np.copy(), x_np.copy()
        up.reshape(-1)[i] += eps
        down.reshape(-1)[i] -= eps
        diff = loss_fn(tf.constant(up)) - loss_fn(tf.constant(down))
        fd.reshape(-1)[i] = diff.numpy() / (2 * eps)
    dev = float(np.nanmax(np.abs(g.reshape(-1)[probe] - fd.reshape(-1)[probe])))
    print(f"DEV grad/float64_self_fd {dev:.3e}")
    assert dev <= 1e-3 * max(1.0, float(np.nanmax(np.abs(fd))))


@pytest.mark.parametrize("layer_norm_type", ["post", "pre", "normformer"])
def test_stack_gradients_finite_with_fully_masked_row(layer_norm_type):
    enc = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                             layer_norm_type=layer_norm_type, use_running_mean=True,
                             hidden_dropout=0.1, attention_dropout=0.1)
    x = tf.constant(np.random.default_rng(230).normal(size=(3, L, H)), tf.float32)
    mask = ref.padding_mask(3, L, [5, 0, 2])
    enc(x, attention_mask=mask)
    ref.randomize_weights(enc, seed=231)
    with tf.GradientTape() as tape:
        tape.watch(x)
        got = enc(x, attention_mask=mask, training=True)
        loss = tf.reduce_sum(got["sequence_output"] ** 2) + tf.reduce_sum(
            got["attention_scores"][-1] ** 2) * 1e-3
    grads = tape.gradient(loss, [x] + enc.trainable_variables)
    assert len(enc.trainable_variables) == len(enc.weights)
    for v, g in zip([x] + enc.trainable_variables, grads):
        name = getattr(v, "path", "input")
        assert g is not None, name
        g = np.asarray(g)
        assert np.all(np.isfinite(g)), name
        assert np.max(np.abs(g)) > 0, name


def test_float64_layers_compute_in_float64():
    """A layer built with dtype="float64" should agree with the float64 reference to
    float64 precision, not float32's. (Fails while attention.py builds the 1/sqrt(d)
    constant through a float32 tensor and always runs the softmax in float32.)"""
    rng = np.random.default_rng(240)
    x = rng.normal(size=(B, L, H))
    layer = ResidualMultiHeadAttention(num_heads=N, key_dim=3, dtype="float64")
    layer(x, x)
    ref.randomize_weights(layer, seed=241)
    out, scores = layer(x, x)
    want_out, want_scores = ref.attention(x, x, ref.attention_params(layer), N)
    ref.assert_close("float64/attention/scores", scores, want_scores, 1e-10)
    ref.assert_close("float64/attention/out", out, want_out, 1e-10)
