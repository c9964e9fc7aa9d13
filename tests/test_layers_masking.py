"""Padding invariance and fully masked rows (float32; mixed precision in
test_layers_mixed_precision.py)."""

import itertools

import numpy as np
import pytest

import numpy_reference as ref
from realformer_tf.layers import (
    ResidualMultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoder,
)

B, H, N, I = 3, 12, 4, 37
REAL, PAD = 5, 3  # real length, appended padding


def _encoder(layer_norm_type, residual_attention, use_running_mean=False):
    extra = {}
    if layer_norm_type == "normformer":
        extra = dict(use_residual_scale=True)
    enc = TransformerEncoder(
        num_layers=3, num_heads=N, intermediate_size=I, layer_norm_type=layer_norm_type,
        residual_attention=residual_attention, use_running_mean=use_running_mean, **extra,
    )
    enc(np.zeros((B, REAL, H), np.float32))
    ref.randomize_weights(enc, seed=100)
    return enc


@pytest.mark.parametrize(
    "layer_norm_type,residual_attention",
    list(itertools.product(["post", "pre", "normformer"], [True, False])),
)
def test_appended_padding_does_not_change_real_positions(layer_norm_type, residual_attention):
    enc = _encoder(layer_norm_type, residual_attention, use_running_mean=residual_attention)
    rng = np.random.default_rng(101)
    x = rng.normal(size=(B, REAL, H)).astype(np.float32)
    # Real lengths 5, 4, 2: the shorter rows are already padded inside the short batch.
    lengths = [5, 4, 2]
    short_mask = ref.padding_mask(B, REAL, lengths)
    long_x = np.concatenate([x, rng.normal(scale=3.0, size=(B, PAD, H)).astype(np.float32)], 1)
    long_mask = ref.padding_mask(B, REAL + PAD, lengths)
    short = enc(x, attention_mask=short_mask)
    long = enc(long_x, attention_mask=long_mask)
    for b, n in enumerate(lengths):
        ref.assert_close(
            f"padding/{layer_norm_type}/residual={residual_attention}/row{b}",
            np.asarray(long["sequence_output"])[b, :n],
            np.asarray(short["sequence_output"])[b, :n],
            1e-5,
        )
        for i in range(3):
            # The carried scores between real positions are unchanged as well.
            np.testing.assert_allclose(
                np.asarray(long["attention_scores"][i])[b, :, :n, :n],
                np.asarray(short["attention_scores"][i])[b, :, :n, :n],
                rtol=0, atol=1e-5,
            )
    # Garbage in the padded slots does not leak into real positions either.
    garbage = long_x.copy()
    for b, n in enumerate(lengths):
        garbage[b, n:] = 1e3
    out_garbage = enc(garbage, attention_mask=long_mask)["sequence_output"]
    for b, n in enumerate(lengths):
        np.testing.assert_allclose(np.asarray(out_garbage)[b, :n],
                                   np.asarray(long["sequence_output"])[b, :n], rtol=0, atol=1e-5)


def test_decoder_memory_padding_does_not_change_outputs():
    block = TransformerDecoderBlock(num_heads=N, intermediate_size=I, layer_norm_type="pre")
    rng = np.random.default_rng(102)
    x = rng.normal(size=(B, 6, H)).astype(np.float32)
    memory = rng.normal(size=(B, REAL, H)).astype(np.float32)
    block(x, memory)
    ref.randomize_weights(block, seed=103)
    lengths = [5, 3, 1]
    short = block(x, memory, memory_mask=ref.padding_mask(B, REAL, lengths))[0]
    long_memory = np.concatenate([memory, rng.normal(size=(B, PAD, H)).astype(np.float32)], 1)
    long = block(x, long_memory, memory_mask=ref.padding_mask(B, REAL + PAD, lengths))[0]
    ref.assert_close("padding/decoder_memory", long, short, 1e-5)


@pytest.mark.parametrize("layer_norm_type", ["post", "pre", "normformer"])
def test_fully_masked_rows_are_finite(layer_norm_type):
    enc = _encoder(layer_norm_type, residual_attention=True, use_running_mean=True)
    rng = np.random.default_rng(104)
    x = rng.normal(size=(B, REAL, H)).astype(np.float32)
    mask = ref.padding_mask(B, REAL, [5, 0, 3])  # row 1 fully masked
    got = enc(x, attention_mask=mask)
    assert np.all(np.isfinite(np.asarray(got["sequence_output"])))
    for s in got["attention_scores"]:
        assert np.all(np.isfinite(np.asarray(s)))
    # Rows with real tokens are unaffected by the fully masked neighbour.
    alone = enc(x[2:], attention_mask=mask[2:])["sequence_output"]
    np.testing.assert_allclose(np.asarray(got["sequence_output"])[2:], np.asarray(alone),
                               rtol=0, atol=1e-5)


def test_fully_masked_attention_row_is_uniform_average():
    """Official semantics: with every key masked, the -10000 bias is uniform across the
    row, so the softmax is the unmasked one (finite, no NaN). Check against the reference."""
    layer = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N)
    rng = np.random.default_rng(105)
    x = rng.normal(size=(B, REAL, H)).astype(np.float32)
    mask = np.zeros((B, REAL), np.int32)
    layer(x, x, attention_mask=mask)
    ref.randomize_weights(layer, seed=106)
    out, _ = layer(x, x, attention_mask=mask)
    want, _ = ref.attention(x.astype(np.float64), x.astype(np.float64),
                            ref.attention_params(layer), N, attention_mask=mask)
    assert np.all(np.isfinite(np.asarray(out)))
    # float32 logits near -10000 carry ~1e-3 absolute rounding (ulp(1e4) = 2**-10), as in
    # the original BERT; hence the looser tolerance than elsewhere.
    ref.assert_close("attention/fully_masked", out, want, 3e-3)
    unmasked, _ = layer(x, x)
    ref.assert_close("attention/fully_masked_vs_unmasked", out, unmasked, 3e-3)
