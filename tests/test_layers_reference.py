"""Every layer variant against the independent NumPy reference (tests/numpy_reference.py).

Shapes are tiny and deliberately not powers of two; all weights (LayerNorm gamma/beta,
head scales, residual scales included) are randomized so every parameter is exercised.
Run with `-s` to see the max abs deviation per variant (`DEV ...` lines).
"""

import itertools

import numpy as np
import pytest
import keras

import numpy_reference as ref
from realformer_tf.layers import (
    BertEmbeddings,
    ResidualMultiHeadAttention,
    TransformerDecoderBlock,
    TransformerEncoder,
    TransformerEncoderBlock,
    get_activation,
)

B, L, M, H, N, I = 3, 7, 5, 12, 4, 37  # batch, seq, memory seq, hidden, heads, intermediate
ATOL = 1e-5
LENGTHS = [7, 5, 3]
MEMORY_LENGTHS = [5, 2, 4]


def _x(seed=0, shape=(B, L, H)):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _prev(seed=1, shape=(B, N, L, L)):
    return np.random.default_rng(seed).normal(scale=2.0, size=shape).astype(np.float32)


def _block_kwargs(layer_norm_type, residual_attention, use_running_mean, **extra):
    return dict(
        num_heads=N,
        intermediate_size=I,
        layer_norm_type=layer_norm_type,
        residual_attention=residual_attention,
        use_running_mean=use_running_mean,
        **extra,
    )


def _ref_cfg(kwargs):
    """The subset of block kwargs the reference takes."""
    keys = ("layer_norm_type", "residual_attention", "use_running_mean", "layer_index",
            "head_scale_position", "hidden_act")
    cfg = {k: kwargs[k] for k in keys if k in kwargs}
    cfg["num_heads"] = kwargs["num_heads"]
    return cfg


# ------------------------------------------------------------------- activations
def test_gelu_is_bert_tanh_approximation_and_gelu_exact_is_erf():
    x = np.linspace(-5, 5, 101).astype(np.float32)
    approx = ref.to_numpy(get_activation("gelu")(keras.ops.convert_to_tensor(x)))
    exact = ref.to_numpy(get_activation("gelu_exact")(keras.ops.convert_to_tensor(x)))
    ref.assert_close("activation/gelu", approx, ref.gelu_tanh(x.astype(np.float64)), 1e-6)
    ref.assert_close("activation/gelu_exact", exact, ref.gelu_erf(x.astype(np.float64)), 1e-6)
    # The two forms really differ, so the test above distinguishes them.
    assert np.max(np.abs(approx - exact)) > 1e-4
    # Names are case-insensitive like BERT configs written by hand.
    np.testing.assert_allclose(ref.to_numpy(get_activation("GELU")(keras.ops.convert_to_tensor(x))), approx)


def test_gelu_hand_written_gradient_matches_finite_differences():
    """"gelu"'s backward pass (recomputed from its input) on this backend against central
    differences of NumPy's float64 tanh gelu, over the range where its slope changes."""
    rng = np.random.default_rng(34)
    x, r = rng.uniform(-6, 6, size=(3, 17)), rng.normal(size=(3, 17))
    (grad,) = _backend_gradients(
        lambda t: keras.ops.sum(get_activation("gelu")(t) * keras.ops.convert_to_tensor(r, "float32")),
        [x.astype(np.float32)],
    )
    fd = ref.numeric_grad(lambda: float(np.sum(ref.gelu_tanh(x) * r)), x)
    ref.assert_close("gelu_grad/x", grad, fd, 2e-5)


# --------------------------------------------------------------------- attention
@pytest.mark.parametrize("with_prev", [False, True])
@pytest.mark.parametrize("use_running_mean", [False, True])
@pytest.mark.parametrize("head_scale", [None, "before_projection", "after_projection"])
def test_attention_matches_reference(with_prev, use_running_mean, head_scale):
    layer_index = 2
    layer = ResidualMultiHeadAttention(
        num_heads=N,
        key_dim=H // N,
        use_running_mean=use_running_mean,
        layer_index=layer_index,
        use_head_scale=head_scale is not None,
        head_scale_position=head_scale or "before_projection",
    )
    x = _x(0)
    mask = ref.padding_mask(B, L, LENGTHS)
    prev = _prev(1) if with_prev else None
    layer(x, x, attention_mask=mask, prev_scores=prev)  # build
    ref.randomize_weights(layer, seed=3)
    out, scores = layer(x, x, attention_mask=mask, prev_scores=prev, training=False)
    p = ref.attention_params(layer)
    want_out, want_scores = ref.attention(
        x.astype(np.float64), x.astype(np.float64), p, N,
        attention_mask=mask, prev_scores=prev, use_running_mean=use_running_mean,
        layer_index=layer_index, head_scale=p.get("head_scale"),
        head_scale_position=head_scale or "before_projection",
    )
    label = f"attention/prev={with_prev}/mean={use_running_mean}/head_scale={head_scale}"
    assert tuple(scores.shape) == (B, N, L, L)
    ref.assert_close(label + "/out", out, want_out, ATOL)
    ref.assert_close(label + "/scores", scores, want_scores, ATOL)
    if with_prev:
        # The carried tensor is raw + prev, undivided even with the running mean.
        raw = ref.attention(x.astype(np.float64), x.astype(np.float64), p, N)[1]
        ref.assert_close(label + "/carried=raw+prev", scores, raw + prev, ATOL)


def test_running_mean_divides_the_logits_by_layer_index_plus_one():
    """Metamorphic check, independent of the reference: a running-mean layer at
    layer_index k fed prev P equals a plain layer whose query projection and prev are
    both divided by (k + 1), since then its logits are (raw + P) / (k + 1) too. The
    carried tensors differ by exactly that factor (the carried sum is undivided)."""
    k = 3
    x, prev = _x(4), _prev(5)
    mean_layer = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N, use_running_mean=True,
                                            layer_index=k)
    plain = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N, layer_index=k)
    mean_layer(x, x, prev_scores=prev)
    plain(x, x, prev_scores=prev)
    ref.randomize_weights(mean_layer, seed=6)
    plain.set_weights(mean_layer.get_weights())
    plain.query_dense.kernel.assign(mean_layer.query_dense.kernel / (k + 1))
    plain.query_dense.bias.assign(mean_layer.query_dense.bias / (k + 1))
    out_mean, scores_mean = mean_layer(x, x, prev_scores=prev)
    out_plain, scores_plain = plain(x, x, prev_scores=prev / (k + 1))
    ref.assert_close("attention/running_mean_metamorphic/out", out_mean, out_plain, ATOL)
    ref.assert_close("attention/running_mean_metamorphic/scores", scores_mean,
                     ref.to_numpy(scores_plain) * (k + 1), ATOL)
    # And the option matters: without it the same weights give another output.
    plain.set_weights(mean_layer.get_weights())
    assert np.max(np.abs(ref.to_numpy(plain(x, x, prev_scores=prev)[0]) - ref.to_numpy(out_mean))) > 1e-2


def test_cross_attention_with_other_key_length_3d_mask_and_output_dim():
    out_dim = 20  # != hidden, divisible by heads for after_projection chunks of 5
    layer = ResidualMultiHeadAttention(
        num_heads=N, key_dim=3, output_dim=out_dim, use_head_scale=True,
        head_scale_position="after_projection",
    )
    x = _x(7)
    memory = _x(8, (B, M, 9))
    mask3 = (np.random.default_rng(9).uniform(size=(B, L, M)) > 0.3).astype(np.int32)
    prev = _prev(10, (B, N, L, M))
    layer(x, memory, attention_mask=mask3, prev_scores=prev)
    ref.randomize_weights(layer, seed=11)
    out, scores = layer(x, memory, attention_mask=mask3, prev_scores=prev)
    assert tuple(out.shape) == (B, L, out_dim)
    assert tuple(scores.shape) == (B, N, L, M)
    p = ref.attention_params(layer)
    want_out, want_scores = ref.attention(
        x.astype(np.float64), memory.astype(np.float64), p, N, attention_mask=mask3,
        prev_scores=prev, head_scale=p["head_scale"], head_scale_position="after_projection",
    )
    ref.assert_close("attention/cross_3d_mask/out", out, want_out, ATOL)
    ref.assert_close("attention/cross_3d_mask/scores", scores, want_scores, ATOL)


@pytest.mark.parametrize("head_scale", [None, "before_projection"])
def test_multi_head_attention_style_arguments_match_reference(head_scale):
    """value_dim != key_dim, use_bias=False, output_shape and a separate key tensor, as
    keras.layers.MultiHeadAttention takes them, plus Keras query/value/key masks."""
    layer = ResidualMultiHeadAttention(
        num_heads=N, key_dim=3, value_dim=5, use_bias=False, output_shape=(10,),
        use_head_scale=head_scale is not None, head_scale_position=head_scale or
        "before_projection", seed=3,
    )
    x, memory, key = _x(20), _x(21, (B, M, 9)), _x(22, (B, M, 6))
    query_mask = ref.padding_mask(B, L, LENGTHS)
    value_mask = ref.padding_mask(B, M, MEMORY_LENGTHS)
    key_mask = np.ones((B, M), np.int32)
    key_mask[:, 0] = 0
    call = dict(key=key, query_mask=query_mask.astype(bool), value_mask=value_mask,
                key_mask=key_mask)
    layer(x, memory, **call)
    ref.randomize_weights(layer, seed=23)
    out, scores = layer(x, memory, **call)
    assert layer.query_dense.bias is None and tuple(out.shape) == (B, L, 10)
    p = ref.attention_params(layer)
    mask = query_mask[:, :, None] * (value_mask * key_mask)[:, None, :]
    # The reference projects keys and values from one memory tensor: give it both
    # projections' inputs through block-diagonal kernels.
    both = np.concatenate([memory, key], axis=-1).astype(np.float64)
    p["wk"] = np.concatenate([np.zeros((9, p["wk"].shape[1])), p["wk"]])
    p["wv"] = np.concatenate([p["wv"], np.zeros((6, p["wv"].shape[1]))])
    want_out, want_scores = ref.attention(
        x.astype(np.float64), both, p, N, attention_mask=mask, head_scale=p.get("head_scale"),
    )
    # Masked query rows attend uniformly to logits shifted by -10000, which float32
    # rounds to ~1e-3 (as in BERT); only the real rows are meaningful.
    real = query_mask.astype(bool)
    ref.assert_close("attention/mha_args/out", ref.to_numpy(out)[real], want_out[real], ATOL)
    ref.assert_close("attention/mha_args/scores", scores, want_scores, ATOL)


def test_head_scale_placements_really_differ():
    """Both placements are checked against the reference above; here we make sure the
    test inputs distinguish them (non-uniform head scales and a non-block-diagonal W^O)."""
    x = _x(12)
    outs = []
    for position in ("before_projection", "after_projection"):
        layer = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N, use_head_scale=True,
                                           head_scale_position=position)
        layer(x, x)
        ref.randomize_weights(layer, seed=13)
        outs.append(ref.to_numpy(layer(x, x)[0]))
    assert np.max(np.abs(outs[0] - outs[1])) > 1e-2


# ---------------------------------------------------------------- encoder block
@pytest.mark.parametrize(
    "layer_norm_type,residual_attention,use_running_mean",
    list(itertools.product(["post", "pre", "normformer"], [True, False], [False, True])),
)
def test_encoder_block_matches_reference(layer_norm_type, residual_attention, use_running_mean):
    kwargs = _block_kwargs(layer_norm_type, residual_attention, use_running_mean, layer_index=2)
    block = TransformerEncoderBlock(**kwargs)
    x, prev = _x(20), _prev(21)
    mask = ref.padding_mask(B, L, LENGTHS)
    block(x, attention_mask=mask, prev_scores=prev)
    ref.randomize_weights(block, seed=22)
    out, scores = block(x, attention_mask=mask, prev_scores=prev, training=False)
    want_out, want_scores = ref.encoder_block(
        x.astype(np.float64), ref.encoder_block_params(block), attention_mask=mask,
        prev_scores=prev, **_ref_cfg(kwargs),
    )
    label = f"encoder_block/{layer_norm_type}/residual={residual_attention}/mean={use_running_mean}"
    ref.assert_close(label + "/out", out, want_out, ATOL)
    ref.assert_close(label + "/scores", scores, want_scores, ATOL)
    # training=True (no dropout here): the LayerNorm affines folded into the projections
    # (layers/folding.py) give the same values.
    block_no_dropout = TransformerEncoderBlock(**kwargs, hidden_dropout=0.0, attention_dropout=0.0)
    block_no_dropout(x, attention_mask=mask, prev_scores=prev)
    block_no_dropout.set_weights(block.get_weights())
    out_t, scores_t = block_no_dropout(x, attention_mask=mask, prev_scores=prev, training=True)
    ref.assert_close(label + "/out/training", out_t, want_out, ATOL)
    ref.assert_close(label + "/scores/training", scores_t, want_scores, ATOL)
    if not residual_attention:
        # prev_scores is ignored: same output without it.
        out2, scores2 = block(x, attention_mask=mask, training=False)
        np.testing.assert_array_equal(ref.to_numpy(out2), ref.to_numpy(out))
        np.testing.assert_array_equal(ref.to_numpy(scores2), ref.to_numpy(scores))


@pytest.mark.parametrize("head_scale_position", ["before_projection", "after_projection"])
@pytest.mark.parametrize("use_residual_scale", [False, True])
@pytest.mark.parametrize("hidden", [12, 20])
def test_normformer_block_options_match_reference(head_scale_position, use_residual_scale, hidden):
    kwargs = _block_kwargs("normformer", True, False, head_scale_position=head_scale_position,
                           use_residual_scale=use_residual_scale, layer_index=1)
    block = TransformerEncoderBlock(**kwargs)
    x, prev = _x(30, (B, L, hidden)), _prev(31)
    mask = ref.padding_mask(B, L, LENGTHS)
    block(x, attention_mask=mask, prev_scores=prev)
    ref.randomize_weights(block, seed=32)
    assert block.attention.use_head_scale
    assert hasattr(block, "residual_scale") == use_residual_scale
    out, scores = block(x, attention_mask=mask, prev_scores=prev, training=False)
    p = ref.encoder_block_params(block)
    assert ("residual_scale" in p["ffn"]) == use_residual_scale
    want_out, want_scores = ref.encoder_block(
        x.astype(np.float64), p, attention_mask=mask, prev_scores=prev, **_ref_cfg(kwargs)
    )
    label = f"normformer_block/H={hidden}/{head_scale_position}/residual_scale={use_residual_scale}"
    ref.assert_close(label + "/out", out, want_out, ATOL)
    ref.assert_close(label + "/scores", scores, want_scores, ATOL)
    block_no_dropout = TransformerEncoderBlock(**kwargs, hidden_dropout=0.0, attention_dropout=0.0)
    block_no_dropout(x, attention_mask=mask, prev_scores=prev)
    block_no_dropout.set_weights(block.get_weights())
    out_t, _ = block_no_dropout(x, attention_mask=mask, prev_scores=prev, training=True)  # folded
    ref.assert_close(label + "/out/training", out_t, want_out, ATOL)


def test_folding_happens_in_training_only(monkeypatch):
    """The LayerNorm affines and head scale fold into the projections' weights in training
    and are applied to the activations at inference (layers/folding.py: at a few rows the
    folded kernel costs more than it saves)."""
    from realformer_tf.layers import folding

    calls = []
    real = folding.dense_of_scaled
    monkeypatch.setattr(folding, "dense_of_scaled", lambda *a, **k: calls.append(1) or real(*a, **k))
    block = TransformerEncoderBlock(**_block_kwargs("normformer", True, False), hidden_dropout=0.0,
                                    attention_dropout=0.0)
    x = _x(40)
    block(x, training=False)
    assert calls == []
    block(x, training=True)
    # query, key, value, head scale, feed-forward in, feed-forward out
    assert len(calls) == 6


@pytest.mark.parametrize("hidden_act", ["gelu_exact", "relu"])
def test_encoder_block_other_activations(hidden_act):
    kwargs = _block_kwargs("pre", True, False, hidden_act=hidden_act)
    block = TransformerEncoderBlock(**kwargs)
    x = _x(35)
    block(x)
    ref.randomize_weights(block, seed=36)
    out, _ = block(x, training=False)
    want, _ = ref.encoder_block(x.astype(np.float64), ref.encoder_block_params(block),
                                **_ref_cfg(kwargs))
    ref.assert_close(f"encoder_block/act={hidden_act}", out, want, ATOL)


def test_dropout_only_in_training():
    block = TransformerEncoderBlock(num_heads=N, intermediate_size=I, hidden_dropout=0.3,
                                    attention_dropout=0.3)
    x = _x(37)
    block(x)
    ref.randomize_weights(block, seed=38)
    inference = ref.to_numpy(block(x, training=False)[0])
    default = ref.to_numpy(block(x)[0])
    trained = ref.to_numpy(block(x, training=True)[0])
    np.testing.assert_array_equal(default, inference)
    want, _ = ref.encoder_block(x.astype(np.float64), ref.encoder_block_params(block),
                                num_heads=N)
    ref.assert_close("encoder_block/dropout_inference", inference, want, ATOL)
    assert np.max(np.abs(trained - inference)) > 1e-3


# ------------------------------------------------------------------ encoder stack
@pytest.mark.parametrize(
    "layer_norm_type,residual_attention,use_running_mean",
    list(itertools.product(["post", "pre", "normformer"], [True, False], [False, True])),
)
def test_encoder_stack_matches_reference(layer_norm_type, residual_attention, use_running_mean):
    num_layers = 3
    extra = {}
    if layer_norm_type == "normformer":
        extra = dict(use_residual_scale=True, head_scale_position="after_projection")
    encoder = TransformerEncoder(
        num_layers=num_layers, num_heads=N, intermediate_size=I, layer_norm_type=layer_norm_type,
        residual_attention=residual_attention, use_running_mean=use_running_mean, **extra,
    )
    x = _x(40)
    mask = ref.padding_mask(B, L, LENGTHS)
    encoder(x, attention_mask=mask)
    ref.randomize_weights(encoder, seed=41)
    got = encoder(x, attention_mask=mask, training=False)
    assert len(got["encoder_outputs"]) == num_layers
    assert len(got["attention_scores"]) == num_layers
    blocks, final = ref.stack_params(encoder)
    assert (final is None) == (layer_norm_type == "post")
    want_seq, want_outs, want_scores = ref.encoder_stack(
        x.astype(np.float64), blocks, final, attention_mask=mask,
        residual_attention=residual_attention, num_heads=N, layer_norm_type=layer_norm_type,
        use_running_mean=use_running_mean,
        head_scale_position=extra.get("head_scale_position", "before_projection"),
    )
    label = f"stack/{layer_norm_type}/residual={residual_attention}/mean={use_running_mean}"
    ref.assert_close(label + "/sequence_output", got["sequence_output"], want_seq, ATOL)
    np.testing.assert_array_equal(ref.to_numpy(got["encoder_outputs"][-1]),
                                  ref.to_numpy(got["sequence_output"]))
    for i in range(num_layers):
        ref.assert_close(f"{label}/encoder_outputs[{i}]", got["encoder_outputs"][i],
                         want_outs[i], ATOL)
        ref.assert_close(f"{label}/attention_scores[{i}]", got["attention_scores"][i],
                         want_scores[i], ATOL)

    # The contract, checked directly: each layer's own raw scores q.k^T/sqrt(d), computed
    # by the reference from that layer's actual input; the carried tensor is their
    # running sum (residual on) or the layer's own raw scores (residual off), never masked.
    raw = []
    for i, p in enumerate(blocks):
        layer_in = x if i == 0 else ref.to_numpy(got["encoder_outputs"][i - 1])
        if layer_norm_type != "post":
            layer_in = ref.layer_norm(layer_in, *p["ln_attention"])
        raw.append(ref.attention(layer_in, layer_in, p["attention"], N)[1])
    for i in range(num_layers):
        want = sum(raw[: i + 1]) if residual_attention else raw[i]
        ref.assert_close(f"{label}/contract[{i}]", got["attention_scores"][i], want, 2 * ATOL)
        assert np.min(ref.to_numpy(got["attention_scores"][i])) > -1000.0  # no mask inside


@pytest.mark.parametrize("layer_norm_type,residual_attention,output_range",
                         [("post", True, 1), ("pre", False, 3), ("normformer", True, 2)])
def test_encoder_stack_output_range_matches_reference(layer_norm_type, residual_attention, output_range):
    # The last block computes the first `output_range` positions only; they attend to
    # every (unpadded) position, so they equal the full reference's first rows.
    encoder = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I,
                                 layer_norm_type=layer_norm_type, residual_attention=residual_attention)
    x = _x(42)
    mask = ref.padding_mask(B, L, LENGTHS)
    encoder(x, attention_mask=mask)
    ref.randomize_weights(encoder, seed=43)
    got = encoder(x, attention_mask=mask, training=False, output_range=output_range)
    blocks, final = ref.stack_params(encoder)
    want_seq, want_outs, want_scores = ref.encoder_stack(
        x.astype(np.float64), blocks, final, attention_mask=mask, residual_attention=residual_attention,
        num_heads=N, layer_norm_type=layer_norm_type, use_running_mean=False,
        head_scale_position="before_projection",
    )
    label = f"stack/{layer_norm_type}/output_range={output_range}"
    assert tuple(got["sequence_output"].shape) == (B, output_range, H)
    ref.assert_close(label + "/sequence_output", got["sequence_output"], want_seq[:, :output_range], ATOL)
    ref.assert_close(label + "/encoder_outputs[0]", got["encoder_outputs"][0], want_outs[0], ATOL)
    ref.assert_close(label + "/attention_scores[1]", got["attention_scores"][1],
                     want_scores[1][:, :, :output_range], ATOL)


def test_encoder_block_output_range_with_a_3d_mask_and_keras_mask():
    # A [batch, query, key] attention mask and a Keras mask are cut to the first queries.
    block = TransformerEncoderBlock(**_block_kwargs("pre", True, False, layer_index=1))
    x, prev = _x(44), _prev(45)
    mask3 = np.random.default_rng(46).integers(0, 2, size=(B, L, L)).astype(np.int32)
    mask3[:, :, 0] = 1  # every query attends somewhere
    keras_mask = ref.padding_mask(B, L, LENGTHS).astype(bool)
    block(x, attention_mask=mask3, prev_scores=prev)
    ref.randomize_weights(block, seed=47)
    full_out, full_scores = block(x, attention_mask=mask3, prev_scores=prev, mask=keras_mask)
    out, scores = block(x, attention_mask=mask3, prev_scores=prev, mask=keras_mask, output_range=4)
    ref.assert_close("block/output_range/out", out, ref.to_numpy(full_out)[:, :4], ATOL)
    ref.assert_close("block/output_range/scores", scores, ref.to_numpy(full_scores)[:, :, :4], ATOL)


def test_encoder_output_range_keeps_the_first_positions_keras_mask():
    # After Embedding(mask_zero=True) the output of the first positions carries their
    # part of the mask, not the whole input's.
    from realformer_tf.layers.masking import keras_mask_of

    ids = np.array([[5, 6, 7, 0, 0], [5, 0, 0, 0, 0]], np.int32)
    x = keras.layers.Embedding(20, H, mask_zero=True)(ids)
    out = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I)(x, output_range=2)
    for key in ("sequence_output",):
        mask = keras_mask_of(out[key])
        assert mask is not None and tuple(mask.shape) == (2, 2), key
        np.testing.assert_array_equal(ref.to_numpy(mask), [[True, True], [True, False]])
    assert tuple(keras_mask_of(out["encoder_outputs"][0]).shape) == (2, 5)


def test_encoder_output_range_in_a_functional_model():
    # Symbolic shapes follow `output_range`, and the model computes what they promise.
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(20, H)(ids)
    out = TransformerEncoder(num_layers=2, num_heads=N, intermediate_size=I)(x, output_range=1)
    assert tuple(out["sequence_output"].shape) == (None, 1, H)
    assert tuple(out["attention_scores"][-1].shape) == (None, N, 1, None)
    model = keras.Model(ids, keras.layers.Dense(3)(keras.layers.Flatten()(out["sequence_output"])))
    assert tuple(model(np.ones((2, 6), np.int32)).shape) == (2, 3)


# ----------------------------------------------------------------- decoder block
@pytest.mark.parametrize(
    "layer_norm_type,residual_attention,use_running_mean",
    [("post", True, False), ("post", True, True), ("pre", True, False),
     ("normformer", True, True), ("normformer", False, False), ("post", False, False)],
)
def test_decoder_block_matches_reference(layer_norm_type, residual_attention, use_running_mean):
    kwargs = _block_kwargs(layer_norm_type, residual_attention, use_running_mean, layer_index=1)
    if layer_norm_type == "normformer":
        kwargs["use_residual_scale"] = True
    block = TransformerDecoderBlock(**kwargs)
    x, memory = _x(50), _x(51, (B, M, H))
    self_mask = ref.padding_mask(B, L, LENGTHS)
    memory_mask = ref.padding_mask(B, M, MEMORY_LENGTHS)
    prev_self, prev_cross = _prev(52), _prev(53, (B, N, L, M))
    call = dict(self_attention_mask=self_mask, memory_mask=memory_mask,
                prev_self_scores=prev_self, prev_cross_scores=prev_cross)
    block(x, memory, **call)
    ref.randomize_weights(block, seed=54)
    out, self_scores, cross_scores = block(x, memory, training=False, **call)
    assert tuple(self_scores.shape) == (B, N, L, L)
    assert tuple(cross_scores.shape) == (B, N, L, M)
    want_out, want_self, want_cross = ref.decoder_block(
        x.astype(np.float64), memory.astype(np.float64), ref.decoder_block_params(block),
        **_ref_cfg(kwargs), **call,
    )
    label = f"decoder_block/{layer_norm_type}/residual={residual_attention}/mean={use_running_mean}"
    ref.assert_close(label + "/out", out, want_out, ATOL)
    ref.assert_close(label + "/self_scores", self_scores, want_self, ATOL)
    ref.assert_close(label + "/cross_scores", cross_scores, want_cross, ATOL)


@pytest.mark.parametrize("residual_attention,cross_residual_attention", [(True, False), (False, True)])
def test_admin_decoder_block_with_one_score_path_matches_reference(residual_attention, cross_residual_attention):
    """Admin's residual scales (randomized: every omega is used) with residual attention
    on one decoder path and not the other, as RealFormer on Admin switches them."""
    kwargs = _block_kwargs("post", residual_attention, False, layer_index=2, admin_residual_scale=True,
                           cross_residual_attention=cross_residual_attention)
    block = TransformerDecoderBlock(**kwargs)
    x, memory = _x(55), _x(56, (B, M, H))
    call = dict(self_attention_mask=ref.padding_mask(B, L, LENGTHS),
                memory_mask=ref.padding_mask(B, M, MEMORY_LENGTHS),
                prev_self_scores=_prev(57), prev_cross_scores=_prev(58, (B, N, L, M)))
    block(x, memory, **call)
    ref.randomize_weights(block, seed=59)
    out, self_scores, cross_scores = block(x, memory, training=False, **call)
    want = ref.decoder_block(x.astype(np.float64), memory.astype(np.float64), ref.decoder_block_params(block),
                             cross_residual_attention=cross_residual_attention, **_ref_cfg(kwargs), **call)
    label = f"decoder_block/admin/self={residual_attention}/cross={cross_residual_attention}"
    for name, got, expected in zip(("out", "self_scores", "cross_scores"), (out, self_scores, cross_scores), want):
        ref.assert_close(f"{label}/{name}", got, expected, ATOL)


def test_admin_profiling_sets_the_scales_numpy_computes():
    """Admin's profiling pass on a 3-block encoder: a plain NumPy loop over the sublayers
    (real tokens only) gives omega_1 = 1, omega_{i+1} = sqrt(Var[omega_i x] + Var[f_i(x)]),
    and the stack's output after profiling uses those scales."""
    from realformer_tf.layers import AdminProfile

    encoder = TransformerEncoder(num_layers=3, num_heads=N, intermediate_size=I, admin_residual_scale=True,
                                 residual_attention=True)
    x, mask = _x(67), ref.padding_mask(B, L, LENGTHS)
    encoder(x, attention_mask=mask)
    ref.randomize_weights(encoder, seed=68)
    profile = AdminProfile(mask)
    profiled = encoder(x, attention_mask=mask, admin_profile=profile)

    real = mask.astype(bool)
    h, omega, omegas, scores = x.astype(np.float64), 1.0, [], None
    for block in encoder.blocks:
        p = ref.encoder_block_params(block)
        out, scores = ref.attention(h, h, p["attention"], N, attention_mask=mask, prev_scores=scores)
        omegas.append(omega)
        h_next = ref.layer_norm(h * omega + out, *p["ln_attention"])
        omega, h = np.sqrt(np.var(h[real] * omega) + np.var(out[real])), h_next
        f = p["ffn"]
        out = ref.dense(ref.gelu_tanh(ref.dense(h, f["w1"], f["b1"])), f["w2"], f["b2"])
        omegas.append(omega)
        h_next = ref.layer_norm(h * omega + out, *f["ln_out"])
        omega, h = np.sqrt(np.var(h[real] * omega) + np.var(out[real])), h_next
    np.testing.assert_allclose([r[0] for r in profile.records], omegas, rtol=1e-4)
    assert omegas[-1] > 2.0  # the scale really grows with depth
    for block, pair in zip(encoder.blocks, np.reshape(omegas, (-1, 2))):
        np.testing.assert_allclose(ref.to_numpy(block.attention_residual_scale), pair[0], rtol=1e-4)
        np.testing.assert_allclose(ref.to_numpy(block.ffn_residual_scale), pair[1], rtol=1e-4)
    ref.assert_close("admin/profiled_output", profiled["sequence_output"], h, 1e-4)
    ref.assert_close("admin/after_profiling", encoder(x, attention_mask=mask)["sequence_output"], h, 1e-4)


def test_admin_block_with_unit_scales_is_the_post_ln_block():
    """omega = 1 everywhere (before profiling) is exactly the post-LN block."""
    admin = TransformerEncoderBlock(num_heads=N, intermediate_size=I, admin_residual_scale=True)
    plain = TransformerEncoderBlock(num_heads=N, intermediate_size=I)
    x = _x(65)
    admin(x), plain(x)
    ref.randomize_weights(plain, seed=66)
    for variable in admin.weights:
        match = [v for v in plain.weights if v.path.split("/", 1)[1] == variable.path.split("/", 1)[1]]
        variable.assign(match[0] if match else np.ones(variable.shape, "float32"))
    assert len(admin.weights) == len(plain.weights) + 2
    np.testing.assert_array_equal(ref.to_numpy(admin(x)[0]), ref.to_numpy(plain(x)[0]))


def test_decoder_score_paths_are_separate():
    """prev_self_scores feeds only the self-attention path, prev_cross_scores only the
    cross-attention path."""
    block = TransformerDecoderBlock(num_heads=N, intermediate_size=I, layer_norm_type="pre")
    x, memory = _x(60), _x(61, (B, M, H))
    block(x, memory)
    ref.randomize_weights(block, seed=62)
    base = block(x, memory)
    prev_self, prev_cross = _prev(63), _prev(64, (B, N, L, M))
    with_self = block(x, memory, prev_self_scores=prev_self)
    with_cross = block(x, memory, prev_cross_scores=prev_cross)
    # Self path: the self scores shift by exactly prev_self. (The cross scores of that
    # call change too, legitimately: the cross-attention's query input changed.)
    ref.assert_close("decoder/self_path", with_self[1], ref.to_numpy(base[1]) + prev_self, ATOL)
    # Cross path: self-attention is untouched, so the cross scores shift by exactly
    # prev_cross and the self scores are identical.
    np.testing.assert_array_equal(ref.to_numpy(with_cross[1]), ref.to_numpy(base[1]))
    ref.assert_close("decoder/cross_path", with_cross[2], ref.to_numpy(base[2]) + prev_cross, ATOL)


@pytest.mark.parametrize("layer_norm_type", ["post", "normformer"])
def test_decoder_is_causal(layer_norm_type):
    block = TransformerDecoderBlock(num_heads=N, intermediate_size=I,
                                    layer_norm_type=layer_norm_type)
    x, memory = _x(70), _x(71, (B, M, H))
    block(x, memory)
    ref.randomize_weights(block, seed=72)
    out = ref.to_numpy(block(x, memory)[0])
    for t in range(1, L):
        changed = x.copy()
        changed[:, t:] = _x(73 + t)[:, t:]
        out2 = ref.to_numpy(block(changed, memory)[0])
        # Positions before t do not see the change ...
        np.testing.assert_allclose(out2[:, :t], out[:, :t], rtol=0, atol=1e-6)
        # ... and position t itself does.
        assert np.max(np.abs(out2[:, t] - out[:, t])) > 1e-3
    # The carried self scores are pre-mask: future positions hold real (finite, small)
    # raw scores, not the mask value.
    self_scores = ref.to_numpy(block(x, memory)[1])
    assert np.min(self_scores) > -1000.0
    assert np.max(np.abs(np.triu(self_scores[0, 0], k=1))) > 1e-3


# -------------------------------------------------------------------- embeddings
def test_bert_embeddings_match_reference():
    layer = BertEmbeddings(vocab_size=31, hidden_size=H, max_position_embeddings=11,
                           type_vocab_size=3)
    rng = np.random.default_rng(80)
    ids = rng.integers(0, 31, size=(B, L)).astype(np.int32)
    seg = rng.integers(0, 3, size=(B, L)).astype(np.int32)
    layer(ids, seg)
    ref.randomize_weights(layer, seed=81)
    tables = [ref.to_numpy(w) for w in (
        layer.word_embeddings, layer.token_type_embeddings, layer.position_embeddings)]
    ln = (ref.to_numpy(layer.layer_norm.gamma),
          ref.to_numpy(layer.layer_norm.beta))
    got = layer(ids, seg, training=False)
    ref.assert_close("embeddings", got, ref.embeddings(ids, seg, *tables, ln), ATOL)
    # segment_ids default to zeros.
    want0 = ref.embeddings(ids, np.zeros_like(seg), *tables, ln)
    ref.assert_close("embeddings/no_segments", layer(ids, training=False), want0, ATOL)


# ------------------------------------------------------ gradients on every backend
def _backend_gradients(loss_fn, arrays):
    """d loss_fn(*tensors) / d tensors with the active backend's autodiff (float32)."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.grad(lambda *t: loss_fn(*t), argnums=tuple(range(len(arrays))))(*arrays)
    if backend == "torch":
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        loss_fn(*tensors).backward()
        return [t.grad for t in tensors]
    import tensorflow as tf

    tensors = [tf.constant(a) for a in arrays]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        loss = loss_fn(*tensors)
    return tape.gradient(loss, tensors)


def test_layer_norm_hand_written_gradient_matches_reference_finite_differences():
    """The LayerNorm's custom gradient (keras.ops.custom_gradient) on this backend
    against central differences of the float64 NumPy LayerNorm."""
    from realformer_tf.layers.normalization import _layer_norm

    rng = np.random.default_rng(30)
    x, gamma, beta = rng.normal(size=(2, 3, 11)), rng.uniform(0.5, 1.5, 11), rng.normal(size=11)
    r = rng.normal(size=(2, 3, 11))
    grads = _backend_gradients(
        lambda *t: keras.ops.sum(_layer_norm(*t, 1e-12) * keras.ops.convert_to_tensor(r, "float32")),
        [a.astype(np.float32) for a in (x, gamma, beta)],
    )

    def f():
        return float(np.sum(ref.layer_norm(x, gamma, beta) * r))

    for name, arr, got in zip(("x", "gamma", "beta"), (x, gamma, beta), grads):
        ref.assert_close(f"layer_norm_grad/{name}", got, ref.numeric_grad(f, arr), 2e-4)


def test_fused_gelu_standardize_matches_reference_and_finite_differences():
    """NormFormer's feed-forward standardize(gelu(x)) as one op (gelu in its sigmoid
    form, slope kept for the backward pass), on this backend: values against NumPy's tanh
    gelu then a LayerNorm without gamma and beta, gradients against central differences
    of that float64 reference."""
    from realformer_tf.layers.normalization import _gelu_standardize

    rng = np.random.default_rng(31)
    x, r = rng.normal(size=(2, 3, 13)) * 2, rng.normal(size=(2, 3, 13))
    ones, zeros = np.ones(13), np.zeros(13)

    def fused(t):
        return _gelu_standardize(t, 1e-12, "float32")

    got = fused(keras.ops.convert_to_tensor(x.astype(np.float32)))
    ref.assert_close("gelu_standardize", got, ref.layer_norm(ref.gelu_tanh(x), ones, zeros), 2e-5)
    (grad,) = _backend_gradients(
        lambda t: keras.ops.sum(fused(t) * keras.ops.convert_to_tensor(r, "float32")),
        [x.astype(np.float32)],
    )

    def f():
        return float(np.sum(ref.layer_norm(ref.gelu_tanh(x), ones, zeros) * r))

    ref.assert_close("gelu_standardize_grad/x", grad, ref.numeric_grad(f, x), 2e-4)


def test_dense_of_scaled_matches_reference_and_finite_differences():
    """`folding.dense_of_scaled(dense, x, scale, shift)` is `dense(x * scale + shift)`:
    values against NumPy, gradients of x, scale and shift against central differences,
    on this backend (the kernel's and bias's gradients: test_layers_gradients.py)."""
    from realformer_tf.layers import folding

    rng = np.random.default_rng(33)
    dense = keras.layers.Dense(5)
    dense.build((None, 7))
    w, b = rng.normal(size=(7, 5)), rng.normal(size=5)
    dense.kernel.assign(w.astype(np.float32))
    dense.bias.assign(b.astype(np.float32))
    x, scale, shift = rng.normal(size=(2, 3, 7)), rng.uniform(0.5, 1.5, 7), rng.normal(size=7)
    r = rng.normal(size=(2, 3, 5))

    def expected():
        return (x * scale + shift) @ w + b

    arrays = [a.astype(np.float32) for a in (x, scale, shift)]
    got = folding.dense_of_scaled(dense, *(keras.ops.convert_to_tensor(a) for a in arrays))
    ref.assert_close("dense_of_scaled", got, expected(), 1e-5)
    grads = _backend_gradients(
        lambda *t: keras.ops.sum(folding.dense_of_scaled(dense, *t) * keras.ops.convert_to_tensor(r, "float32")),
        arrays,
    )
    for name, arr, grad in zip(("x", "scale", "shift"), (x, scale, shift), grads):
        ref.assert_close(f"dense_of_scaled_grad/{name}", grad,
                         ref.numeric_grad(lambda: float(np.sum(expected() * r)), arr), 2e-4)


def test_folding_is_refused_where_the_dense_call_is_not_x_at_kernel_plus_bias():
    from realformer_tf.layers import folding

    plain, activated = keras.layers.Dense(3), keras.layers.Dense(3, activation="relu")

    class Custom(keras.layers.Dense):
        pass

    assert folding.can_fold_into(plain)
    assert not folding.can_fold_into(activated)
    assert not folding.can_fold_into(Custom(3))


def test_attention_input_affine_equals_applying_it_to_the_inputs():
    """`query_affine` / `value_affine` (a pre-LN LayerNorm's gamma and beta folded into the
    projections) give what applying them to the inputs gives: self-attention (the key
    takes the value's) and cross-attention (query only), and the unfolded fallback."""
    from realformer_tf.layers import folding

    rng = np.random.default_rng(35)
    layer = ResidualMultiHeadAttention(num_heads=N, key_dim=H // N)
    x, memory = _x(36), _x(37, (B, M, H))
    layer(x, memory)
    ref.randomize_weights(layer, seed=38)
    q_affine = tuple(keras.ops.convert_to_tensor(a.astype(np.float32)) for a in
                     (rng.uniform(0.5, 1.5, H), rng.normal(size=H)))
    v_affine = tuple(keras.ops.convert_to_tensor(a.astype(np.float32)) for a in
                     (rng.uniform(0.5, 1.5, H), rng.normal(size=H)))

    def applied(t, affine):
        return ref.to_numpy(affine[0]) * t + ref.to_numpy(affine[1])

    cases = {  # training=True folds (no dropout here); training=False applies to the inputs
        f"{kind}/training={training}": (
            layer(x, m, query_affine=q_affine, value_affine=m_affine, training=training),
            layer(applied(x, q_affine), applied(m, m_affine)))
        for kind, m, m_affine in (("self", x, q_affine), ("cross", memory, v_affine))
        for training in (True, False)
    }
    for label, (got, want) in cases.items():
        for g, w in zip(got, want):
            np.testing.assert_allclose(ref.to_numpy(g), ref.to_numpy(w), atol=2e-5, err_msg=label)
    layer.query_dense.__class__ = _UnfoldableDense  # folding refused: applied to the input
    assert not folding.can_fold_into(layer.query_dense)
    got = layer(x, x, query_affine=q_affine, value_affine=q_affine, training=True)[0]
    np.testing.assert_allclose(ref.to_numpy(got), ref.to_numpy(cases["self/training=True"][1][0]), atol=2e-5)


class _UnfoldableDense(keras.layers.Dense):
    """`folding.can_fold_into` refuses subclasses: the layers run one after the other."""


@pytest.mark.parametrize("hidden_act,folded,fold", [("gelu", True, True), ("relu", True, True),
                                                     ("gelu", False, True), ("gelu", True, False)])
def test_activate_normalize_and_project_equals_the_composite_in_mixed_bfloat16(hidden_act, folded, fold):
    """NormFormer's feed-forward entry point (the fused gelu op or another activation, gamma
    and beta folded into the projection; or, for a projection that refuses folding and at
    inference (fold=False), applied to the standardized activation) gives dense(LayerNorm(act(x)))'s values and input gradients
    under mixed_bfloat16, in bfloat16."""
    from realformer_tf.layers.activations import get_activation
    from realformer_tf.layers.normalization import LayerNorm

    rng = np.random.default_rng(32)
    norm = LayerNorm(epsilon=1e-12, dtype="mixed_bfloat16")
    norm.build((None, I))
    norm.gamma.assign(rng.uniform(0.5, 1.5, I).astype(np.float32))
    norm.beta.assign(rng.normal(size=I).astype(np.float32))
    dense = (keras.layers.Dense if folded else _UnfoldableDense)(H, dtype="mixed_bfloat16")
    dense.build((None, I))
    x = rng.normal(size=(B, L, I)).astype(np.float32) * 2
    r = keras.ops.convert_to_tensor(rng.normal(size=(B, L, H)), "float32")

    def fused(t):
        return norm.activate_normalize_and_project(keras.ops.cast(t, "bfloat16"), hidden_act, dense, fold)

    def composite(t):
        return dense(norm(get_activation(hidden_act)(keras.ops.cast(t, "bfloat16"))))

    got, want = fused(x), composite(x)
    assert keras.backend.standardize_dtype(got.dtype) == "bfloat16"
    np.testing.assert_allclose(ref.to_numpy(got).astype(np.float32),
                               ref.to_numpy(want).astype(np.float32), atol=0.05)
    grads = [_backend_gradients(lambda t: keras.ops.sum(keras.ops.cast(fn(t), "float32") * r), [x])[0]
             for fn in (fused, composite)]
    g_fused, g_composite = (ref.to_numpy(g).astype(np.float32) for g in grads)
    assert np.abs(g_fused - g_composite).max() <= 0.03 * np.abs(g_composite).max()
