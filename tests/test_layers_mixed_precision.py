"""Mixed precision: mixed_bfloat16 and mixed_float16 stacks run, stay finite (fully
masked rows included) and stay close to the float32 stack with the same weights.

Closeness is checked on the batch rows that have at least one real token. A fully
masked row is only required to be finite: its value is meaningless by construction and
differs between precisions (float32 keeps the logits' differences under the uniform
-10000 bias, so the row is the unmasked softmax; in float16/bfloat16 the bias is added
in the compute dtype, whose spacing near 1e4 is 8 / 64, so the row is ~uniform)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from realformer_tf.layers import TransformerDecoderBlock, TransformerEncoder

B, L, H, N, I = 3, 7, 20, 4, 37
REAL_ROWS = [0, 2]  # batch row 1 is fully masked in these tests
POLICIES = {"mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}


@pytest.fixture
def policy(request):
    """Sets the global Keras dtype policy for one test and restores float32 after."""
    keras.config.set_dtype_policy(request.param)
    try:
        yield request.param
    finally:
        keras.config.set_dtype_policy("float32")


def _stack(layer_norm_type, **extra):
    return TransformerEncoder(num_layers=3, num_heads=N, intermediate_size=I,
                              layer_norm_type=layer_norm_type, use_running_mean=True, **extra)


def _rel(actual, expected):
    """Max abs deviation relative to the max magnitude, over the rows with real tokens."""
    actual = np.asarray(tf.cast(actual, tf.float32), np.float64)[REAL_ROWS]
    expected = np.asarray(expected, np.float64)[REAL_ROWS]
    return float(np.max(np.abs(actual - expected)) / np.max(np.abs(expected)))


@pytest.mark.parametrize("policy", list(POLICIES), indirect=True)
@pytest.mark.parametrize(
    "layer_norm_type,extra",
    [("post", {}), ("pre", {}),
     ("normformer", dict(use_residual_scale=True, head_scale_position="after_projection"))],
)
def test_mixed_precision_stack_close_to_float32(policy, layer_norm_type, extra):
    compute_dtype = POLICIES[policy]
    rng = np.random.default_rng(300)
    x = rng.normal(size=(B, L, H)).astype(np.float32)
    mask = ref.padding_mask(B, L, [7, 0, 4])  # row 1 fully masked

    mixed = _stack(layer_norm_type, **extra)
    mixed(x, attention_mask=mask)
    full = _stack(layer_norm_type, dtype="float32", **extra)
    full(x, attention_mask=mask)
    ref.randomize_weights(full, seed=301)
    # Mixed-precision variables are float32, so the weights transfer exactly.
    assert all(v.dtype == "float32" for v in mixed.weights)
    mixed.set_weights(full.get_weights())

    got = mixed(x, attention_mask=mask, training=False)
    want = full(x, attention_mask=mask, training=False)
    seq = got["sequence_output"]
    assert seq.dtype == compute_dtype
    assert np.all(np.isfinite(np.asarray(tf.cast(seq, tf.float32))))
    for s in got["attention_scores"]:
        assert s.dtype == compute_dtype
        assert np.all(np.isfinite(np.asarray(tf.cast(s, tf.float32))))
    rel = _rel(seq, want["sequence_output"])
    variant = "/".join([policy, layer_norm_type] + [f"{k}={v}" for k, v in sorted(extra.items())])
    print(f"DEV mixed/{variant}/sequence_output rel {rel:.3e}")
    assert rel < 5e-2
    for i in range(3):
        rel_s = _rel(got["attention_scores"][i], want["attention_scores"][i])
        assert rel_s < 5e-2, (i, rel_s)

    # Also under training (dropout on) and backprop: finite gradients.
    with tf.GradientTape() as tape:
        out = mixed(x, attention_mask=mask, training=True)["sequence_output"]
        loss = tf.reduce_mean(tf.cast(out, tf.float32) ** 2)
    grads = tape.gradient(loss, mixed.trainable_variables)
    for v, g in zip(mixed.trainable_variables, grads):
        assert g is not None and np.all(np.isfinite(np.asarray(g))), v.path


@pytest.mark.parametrize("policy", list(POLICIES), indirect=True)
def test_mixed_precision_decoder_block_finite(policy):
    rng = np.random.default_rng(310)
    x = rng.normal(size=(B, L, H)).astype(np.float32)
    memory = rng.normal(size=(B, 5, H)).astype(np.float32)
    memory_mask = ref.padding_mask(B, 5, [5, 0, 2])
    block = TransformerDecoderBlock(num_heads=N, intermediate_size=I,
                                    layer_norm_type="normformer")
    block(x, memory, memory_mask=memory_mask)
    full = TransformerDecoderBlock(num_heads=N, intermediate_size=I,
                                   layer_norm_type="normformer", dtype="float32")
    full(x, memory, memory_mask=memory_mask)
    ref.randomize_weights(full, seed=311)
    block.set_weights(full.get_weights())
    got = block(x, memory, memory_mask=memory_mask)
    want = full(x, memory, memory_mask=memory_mask)
    for name, g, w in zip(["out", "self_scores", "cross_scores"], got, want):
        assert g.dtype == POLICIES[policy]
        assert np.all(np.isfinite(np.asarray(tf.cast(g, tf.float32))))
        assert _rel(g, w) < 5e-2


def test_policy_fixture_restored_global_policy():
    """Runs after the parametrized tests above in file order."""
    assert keras.config.dtype_policy().name == "float32"
