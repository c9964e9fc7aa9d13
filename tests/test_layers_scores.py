"""realformer_tf.layers.scores (the one home of the score math) against NumPy, on the
active Keras backend."""

import keras
import numpy as np
import pytest

import numpy_reference as ref
from realformer_tf.layers import scores

RNG = np.random.default_rng(900)
B, N, F, T, D = 2, 3, 5, 7, 4


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_raw_scores_add_the_carried_scores():
    q, k = RNG.normal(size=(B, F, N, D)), RNG.normal(size=(B, T, N, D))
    prev = RNG.normal(size=(B, N, F, T))
    want = np.einsum("bfnd,btnd->bnft", q, k) / np.sqrt(D) + prev
    got = scores.raw_scores(q.astype("float32"), k.astype("float32"), prev.astype("float32"))
    ref.assert_close("scores/raw", got, want, 1e-5)


@pytest.mark.parametrize("use_running_mean", [False, True])
def test_probabilities_are_the_masked_softmax_of_the_logits(use_running_mean):
    s = RNG.normal(scale=3.0, size=(B, N, F, T))
    mask = ref.padding_mask(B, T, [7, 4])[:, None, None, :]
    logits = s / 3.0 if use_running_mean else s
    want = _softmax(logits + (1 - mask) * -10000.0)
    got = scores.attention_probabilities(s.astype("float32"), mask, layer_index=2,
                                         use_running_mean=use_running_mean)
    ref.assert_close(f"scores/probs/mean={use_running_mean}", got, want, 1e-6)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_softmax_runs_in_float32_and_masked_rows_stay_finite(dtype):
    s = RNG.normal(scale=3.0, size=(B, N, F, T))
    mask = np.ones((B, 1, F, T), np.int32)
    mask[0, :, 1] = 0  # a fully masked query row
    half = keras.ops.cast(s, dtype)
    for value in (scores.MASK_VALUE, scores.safe_mask_value(dtype)):
        probs = scores.attention_probabilities(half, mask, mask_value=value)
        assert keras.backend.standardize_dtype(probs.dtype) == "float32"
        probs = ref.to_numpy(probs)
        assert np.all(np.isfinite(probs))
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
    # The dtype-safe minimum stays finite when added to a logit in its own dtype.
    sum_in_dtype = keras.ops.cast(scores.safe_mask_value(dtype), dtype) + keras.ops.cast(-100.0, dtype)
    assert np.isfinite(ref.to_numpy(keras.ops.cast(sum_in_dtype, "float32")))


def test_split_merge_and_scale_heads():
    x = RNG.normal(size=(B, F, N * D)).astype("float32")
    split = scores.split_heads(x, N, D)
    np.testing.assert_array_equal(ref.to_numpy(split), x.reshape(B, F, N, D))
    np.testing.assert_array_equal(ref.to_numpy(scores.merge_heads(split)), x)
    head_scale = np.array([0.5, 2.0, -1.0], np.float32)
    want = (x.reshape(B, F, N, D) * head_scale[:, None]).reshape(B, F, N * D)
    ref.assert_close("scores/scale_heads", scores.scale_heads(x, head_scale), want, 1e-6)
