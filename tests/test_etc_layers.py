"""ETC layers (GlobalLocalAttention, GlobalLocalBlock, GlobalLocalEncoder) against the
dense float64 NumPy reference of `etc_numpy_reference`.

The blocked (linear-memory) implementation must give the dense answer for sequence
lengths that are and are not multiples of the block, radii beyond the length, fully
masked rows, every projection-sharing option, carried scores, the running mean and
NormFormer head scales. The tests use only `keras.ops` on the layer side, so they run
on every Keras backend: `KERAS_BACKEND=jax pytest tests/test_etc_layers.py` (or torch).
Run with `-s` to see the deviations (`DEV ...`).
"""

import doctest
import json
import zlib

import keras
import numpy as np
import pytest

import numpy_reference as ref
from etc_numpy_reference import (
    PIECES,
    assert_dense_close,
    attention_params,
    blocked_long_scores_as_dense,
    dense_to_blocked,
    ref_attention,
    ref_block,
)
from realformer_tf.models.etc import inputs as etc_inputs
from realformer_tf.layers import GlobalLocalAttention, GlobalLocalBlock, GlobalLocalEncoder
from realformer_tf.layers.etc import attention as etc_attention
from realformer_tf.layers.etc import encoder as etc_encoder

B, H, N, I = 2, 12, 3, 20
D = H // N
ATOL = 2e-4
to_np = keras.ops.convert_to_numpy


def as_tensors(side):
    return {k: keras.ops.convert_to_tensor(v) for k, v in side.items()}


def side_inputs_np(kind, L, G, r, M, rng, hard=False):
    """Side inputs: 'none', 'padding' ([B, L] key masks + dense masks, one fully masked
    row), 'etc' (etc_inputs: ETC local-layout masks, g2g/l2g/g2l relative ids; the layer
    makes the positional l2l ids) or 'etc_l2l_ids' (also l2l ids as inputs, skewed into
    the blocked layout by the layer)."""
    if kind == "none":
        return {}
    lengths = [L, max(1, L - 3)]
    long_mask = ref.padding_mask(B, L, lengths)
    if kind == "padding":
        l2g = (rng.uniform(size=(B, L, G)) < 0.7).astype(np.int32)
        l2l = long_mask.copy()
        # Query 0 of example 1 sees nothing: no global token, and its window is padding.
        l2l[1, : r + 1] = 0
        l2g[1, 0] = 0
        return {
            "l2l_att_mask": l2l,
            "g2g_att_mask": (rng.uniform(size=(B, G, G)) < 0.8).astype(np.int32),
            "l2g_att_mask": l2g,
            "g2l_att_mask": (rng.uniform(size=(B, G, L)) < 0.7).astype(np.int32),
        }
    sentence_ids = np.minimum(np.arange(L) // 3, G - 1)[None].repeat(B, 0)
    global_mask = ref.padding_mask(B, G, [G, max(1, G - 1)])
    side = etc_inputs.make_side_inputs(long_mask, global_mask, sentence_ids, r, M,
                                       use_hard_g2l_mask=hard, use_hard_l2g_mask=hard,
                                       include_l2l_relative_ids=kind == "etc_l2l_ids")
    return {k: to_np(v) for k, v in side.items()}


def fully_masked_long_rows(long_mask):
    return long_mask.sum(-1) == 0  # [B, L]


def make_layer(r, M, **kwargs):
    layer = GlobalLocalAttention(num_heads=N, key_dim=D, local_radius=r,
                                 relative_pos_max_distance=M, **kwargs)
    return layer


# ===================================================================== attention tests
ATTENTION_CASES = {
    # name: (L, G, r, M, side kind, layer kwargs, with prev scores)
    "L7_r2_etc_inputs_rel_l2l_ids_given": (7, 3, 2, 2, "etc_l2l_ids", {}, False),
    "L13_r3_etc_inputs_rel": (13, 3, 3, 2, "etc", {}, False),
    "L9_r3_not_multiple_padding_fully_masked_row": (9, 2, 3, 2, "padding", {}, False),
    "L8_r3_multiple_no_masks_no_rel": (8, 3, 3, 0, "none", {}, False),
    "L5_r6_radius_beyond_length": (5, 2, 6, 3, "etc", {}, False),
    "unshared_qkv_kv_shared_prev_scores": (10, 3, 2, 2, "etc_l2l_ids",
                                           dict(share_qkv_projections=False, share_kv_projections=True), True),
    "nothing_shared_running_mean_head_scale": (
        11, 4, 3, 2, "padding",
        dict(share_qkv_projections=False, use_running_mean=True, layer_index=2, use_head_scale=True), True),
    "shared_output_head_scale_after_hard_masks": (
        9, 3, 2, 1, "etc_hard",
        dict(share_att_output_projection=True, use_head_scale=True, head_scale_position="after_projection"),
        True),
}


@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_blocked_attention_equals_dense_reference(case):
    L, G, r, M, kind, kwargs, with_prev = ATTENTION_CASES[case]
    rng = np.random.default_rng(zlib.crc32(case.encode()))
    hard = kind == "etc_hard"
    side = side_inputs_np("etc" if hard else kind, L, G, r, M, rng, hard=hard)
    xl = rng.normal(size=(B, L, H)).astype(np.float32)
    xg = rng.normal(size=(B, G, H)).astype(np.float32)
    layer = make_layer(r, M, **kwargs)
    layer.build((None, None, H), (None, None, H))
    ref.randomize_weights(layer, seed=len(case))

    prev_l_dense = prev_g = prev_l_blocked = None
    if with_prev:
        prev_l_dense = rng.normal(scale=2.0, size=(B, N, L, L + G))
        prev_g = rng.normal(scale=2.0, size=(B, N, G, G + L))
        prev_l_blocked = dense_to_blocked(prev_l_dense, L, G, r, rng).astype(np.float32)

    out_l, out_g, s_l, s_g = layer(
        xl, xg, prev_long_scores=prev_l_blocked,
        prev_global_scores=None if prev_g is None else prev_g.astype(np.float32),
        **as_tensors(side))
    bl = r + 1
    nb = -(-L // bl)
    assert tuple(s_l.shape) == (B, N, nb, bl, 3 * bl + G)
    assert tuple(s_g.shape) == (B, N, G, G + L)
    for t in (out_l, out_g, s_l, s_g):
        assert np.all(np.isfinite(to_np(t)))

    e_l, e_g, es_l, es_g, long_mask = ref_attention(
        xl.astype(np.float64), xg.astype(np.float64), attention_params(layer),
        dict(local_radius=r, relative_pos_max_distance=M,
             head_scale_position=kwargs.get("head_scale_position", "before_projection")),
        {k: np.asarray(v) for k, v in side.items()},
        prev_long=prev_l_dense, prev_global=prev_g,
        layer_index=kwargs.get("layer_index", 0), use_running_mean=kwargs.get("use_running_mean", False),
        use_head_scale=kwargs.get("use_head_scale", False))

    dead = fully_masked_long_rows(long_mask)
    assert dead.any() == (kind == "padding"), "the padding cases include a fully masked row"
    live = ~dead
    ref.assert_close(f"{case} long_output", to_np(out_l)[live], e_l[live], ATOL)
    ref.assert_close(f"{case} global_output", to_np(out_g), e_g, ATOL)
    ref.assert_close(f"{case} global_scores", to_np(s_g), es_g, ATOL)
    assert_dense_close(f"{case} long_scores", blocked_long_scores_as_dense(to_np(s_l), L, G, r), es_l, ATOL)


def test_sharing_options_route_projections():
    def distinct(layer):
        return len({id(layer._projection(p)) for p in PIECES})

    def built(**kw):
        layer = make_layer(2, 0, **kw)
        layer.build((None, None, H), (None, None, H))
        return layer

    shared = built()
    assert distinct(shared) == 3  # ETC default: one q, one k, one v for all four pieces
    assert shared._projection("g2l_key") is shared._projection("l2l_key")
    kv = built(share_qkv_projections=False, share_kv_projections=True)
    assert distinct(kv) == 6
    assert kv._projection("l2g_key") is kv._projection("l2l_key")
    assert kv._projection("g2l_value") is kv._projection("g2g_value")
    assert kv._projection("g2g_key") is not kv._projection("l2l_key")
    assert distinct(built(share_qkv_projections=False)) == 10
    out = built(share_att_output_projection=True)
    assert out._output_projection("global") is out._output_projection("long")
    # No duplicated variables when layers are shared.
    assert len({id(v) for v in shared.weights}) == len(shared.weights)


def _squared_outputs(outs):
    return sum(keras.ops.sum(keras.ops.square(o)) for o in outs[:2])


def outputs_and_gradients(layer, xl, xg, side):
    """The layer's outputs and d(sum of squared outputs) / d(inputs, trainable weights),
    with the active backend's own differentiation."""
    backend = keras.backend.backend()
    layer(xl, xg, **side)  # build
    if backend == "tensorflow":
        import tensorflow as tf

        xl, xg = tf.Variable(xl), tf.Variable(xg)
        with tf.GradientTape() as tape:
            outs = layer(xl, xg, **side)
            loss = _squared_outputs(outs)
        return outs, tape.gradient(loss, [xl, xg] + layer.trainable_weights)
    if backend == "jax":
        import jax

        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss_fn(xl, xg, trainable):
            outs, _ = layer.stateless_call(trainable, non_trainable, xl, xg, **side)
            return _squared_outputs(outs), outs

        trainable = [v.value for v in layer.trainable_variables]
        (_, outs), grads = jax.value_and_grad(loss_fn, argnums=(0, 1, 2), has_aux=True)(xl, xg, trainable)
        return outs, [grads[0], grads[1]] + list(grads[2])
    assert backend == "torch", backend
    import torch

    xl, xg = torch.tensor(xl, requires_grad=True), torch.tensor(xg, requires_grad=True)
    outs = layer(xl, xg, **side)
    _squared_outputs(outs).backward()
    return outs, [xl.grad, xg.grad] + [v.value.grad for v in layer.trainable_weights]


def test_fully_masked_rows_finite_with_gradients():
    L, G, r = 6, 2, 2
    layer = make_layer(r, 2)
    xl = np.random.default_rng(0).normal(size=(1, L, H)).astype(np.float32)
    xg = np.random.default_rng(1).normal(size=(1, G, H)).astype(np.float32)
    zeros = as_tensors(dict(l2l_att_mask=np.zeros([1, L], np.int32), l2g_att_mask=np.zeros([1, L, G], np.int32),
                            g2g_att_mask=np.zeros([1, G, G], np.int32), g2l_att_mask=np.zeros([1, G, L], np.int32)))
    outs, grads = outputs_and_gradients(layer, xl, xg, zeros)
    assert len(grads) == 2 + len(layer.trainable_weights)
    for t in list(outs) + grads:
        assert t is not None and np.all(np.isfinite(to_np(t)))


def test_running_mean_divides_carried_scores_before_mask():
    """With the running mean the softmax sees (prev + s) / (layer_index + 1); the carried
    tensor stays the undivided sum. Checked against two layers differing only there."""
    L, G, r = 7, 2, 2
    rng = np.random.default_rng(5)
    xl = rng.normal(size=(B, L, H)).astype(np.float32)
    xg = rng.normal(size=(B, G, H)).astype(np.float32)
    prev_l = rng.normal(size=(B, N, 3, 3, 9 + G)).astype(np.float32)
    prev_g = rng.normal(size=(B, N, G, G + L)).astype(np.float32)
    mean = make_layer(r, 2, use_running_mean=True, layer_index=3)
    plain = make_layer(r, 2)
    for layer in (mean, plain):
        layer.build((None, None, H), (None, None, H))
        ref.randomize_weights(layer, seed=9)
    got = mean(xl, xg, prev_long_scores=prev_l, prev_global_scores=prev_g)
    # Same carried sums ...
    own = plain(xl, xg)
    np.testing.assert_allclose(to_np(got[2]), to_np(own[2]) + prev_l, atol=1e-5)
    np.testing.assert_allclose(to_np(got[3]), to_np(own[3]) + prev_g, atol=1e-5)
    # ... but different outputs (the logits were divided by 4) ...
    assert np.max(np.abs(to_np(got[0]) - to_np(plain(xl, xg, prev_long_scores=prev_l,
                                                 prev_global_scores=prev_g)[0]))) > 1e-3
    # ... equal to the dense reference with the running mean.
    e_l, e_g, *_ = ref_attention(
        xl.astype(np.float64), xg.astype(np.float64), attention_params(mean),
        dict(local_radius=r, relative_pos_max_distance=2), {},
        prev_long=_blocked_prev_to_dense(prev_l, L, G, r), prev_global=prev_g,
        layer_index=3, use_running_mean=True)
    ref.assert_close("running mean long", to_np(got[0]), e_l, ATOL)
    ref.assert_close("running mean global", to_np(got[1]), e_g, ATOL)


def _blocked_prev_to_dense(prev, L, G, r):
    d = blocked_long_scores_as_dense(prev, L, G, r)
    return np.nan_to_num(d, nan=0.0)  # out-of-window entries are masked anyway


STACK_CASES = {
    "post_residual": dict(layer_norm_type="post"),
    "pre_residual_running_mean": dict(layer_norm_type="pre", use_running_mean=True),
    "normformer_residual_unshared_ffn": dict(layer_norm_type="normformer", share_feed_forward_params=False,
                                             use_residual_scale=True),
    "post_vanilla_etc": dict(layer_norm_type="post", residual_attention=False),
}


@pytest.mark.parametrize("case", list(STACK_CASES))
def test_residual_score_paths_per_side_over_three_layers(case):
    L, G, r, M, layers = 10, 3, 2, 2, 3
    cfg = dict(layer_norm_type="post", residual_attention=True, use_running_mean=False,
               local_radius=r, relative_pos_max_distance=M)
    cfg.update({k: v for k, v in STACK_CASES[case].items() if k in cfg})
    kwargs = dict(STACK_CASES[case])
    encoder = GlobalLocalEncoder(num_layers=layers, num_heads=N, intermediate_size=I,
                                 hidden_dropout=0.0, attention_dropout=0.0, local_radius=r,
                                 relative_pos_max_distance=M, relative_vocab_size=2 * M + 4, **kwargs)
    rng = np.random.default_rng(11)
    side = side_inputs_np("etc", L, G, r, M, rng)
    xl = rng.normal(size=(B, L, H)).astype(np.float32)
    xg = rng.normal(size=(B, G, H)).astype(np.float32)
    encoder.build((None, None, H), (None, None, H))
    ref.randomize_weights(encoder, seed=3)
    for block in encoder.blocks:  # keep the relative tables at a moderate scale
        for s in ("long", "global"):
            v = getattr(block.attention, f"{s}_relative_embeddings")
            v.assign(to_np(v) * 0.3)
    got = encoder(xl, xg, side_inputs=as_tensors(side))

    x_l, x_g = xl.astype(np.float64), xg.astype(np.float64)
    prev_l = prev_g = None
    for i, block in enumerate(encoder.blocks):
        x_l, x_g, prev_l, prev_g = ref_block(x_l, x_g, block, side, prev_l, prev_g, i, cfg)
        if i < layers - 1 or encoder.long_final_layer_norm is None:
            ref.assert_close(f"{case} layer {i} long", to_np(got["long_encoder_outputs"][i]), x_l, ATOL)
            ref.assert_close(f"{case} layer {i} global", to_np(got["global_encoder_outputs"][i]), x_g, ATOL)
        ref.assert_close(f"{case} layer {i} global_scores", to_np(got["global_scores"][i]), prev_g, 5e-4)
        assert_dense_close(f"{case} layer {i} long_scores",
                           blocked_long_scores_as_dense(to_np(got["long_scores"][i]), L, G, r), prev_l, 5e-4)
    if encoder.long_final_layer_norm is not None:
        x_l = ref.layer_norm(x_l, *ref._ln(encoder.long_final_layer_norm))
        x_g = ref.layer_norm(x_g, *ref._ln(encoder.global_final_layer_norm))
    ref.assert_close(f"{case} long_output", to_np(got["long_output"]), x_l, ATOL)
    ref.assert_close(f"{case} global_output", to_np(got["global_output"]), x_g, ATOL)
    if cfg["residual_attention"]:
        # The paths are separate: the layer-1 long scores differ from its own scores by
        # exactly the layer-0 long scores (same for global).
        assert not np.allclose(to_np(got["long_scores"][1]), to_np(got["long_scores"][0]))


# ==================================================================== serialization
def _same_outputs(a, b, call):
    for x, y in zip(call(a), call(b)):
        np.testing.assert_allclose(to_np(x), to_np(y), atol=1e-6)


NON_DEFAULT = dict(local_radius=2, relative_pos_max_distance=1, relative_vocab_size=9,
                   share_qkv_projections=False, share_kv_projections=True,
                   share_att_output_projection=True, kernel_regularizer="l2",
                   bias_constraint="non_neg")


def serialization_cases():
    """name -> (layer with non-default options, call(layer, xl, xg, side) -> outputs)."""
    def outputs(out):
        return [out[k] for k in ("long_output", "global_output")] if isinstance(out, dict) else out[:2]

    return {
        "attention": (GlobalLocalAttention(num_heads=N, key_dim=D, use_running_mean=True, layer_index=2,
                                           use_head_scale=True, head_scale_position="after_projection",
                                           dropout=0.1, name="gla", **NON_DEFAULT),
                      lambda l, xl, xg, side: outputs(l(xl, xg, **side))),
        "block": (GlobalLocalBlock(num_heads=N, intermediate_size=I, layer_norm_type="normformer",
                                   use_residual_scale=True, layer_index=1, share_feed_forward_params=False,
                                   name="glb", **NON_DEFAULT),
                  lambda l, xl, xg, side: outputs(l(xl, xg, side_inputs=side))),
        "encoder": (GlobalLocalEncoder(num_layers=2, num_heads=N, intermediate_size=I, layer_norm_type="pre",
                                       use_running_mean=True, name="gle", **NON_DEFAULT),
                    lambda l, xl, xg, side: outputs(l(xl, xg, side_inputs=side))),
    }


def serialization_inputs(L=9, G=2):
    rng = np.random.default_rng(2)
    xl = rng.normal(size=(B, L, H)).astype(np.float32)
    xg = rng.normal(size=(B, G, H)).astype(np.float32)
    side = padded_side_inputs(L, G, [L, L - 3], [G, G - 1])
    return xl, xg, {k: side[k] for k in ("l2l_att_mask", "l2g_att_mask")}


def test_layers_get_config_from_config_round_trip():
    xl, xg, side = serialization_inputs()
    side = as_tensors(side)
    for name, (layer, call) in serialization_cases().items():
        call(layer, xl, xg, side)
        config = layer.get_config()
        json.dumps(config)
        assert config["kernel_regularizer"] is not None and config["local_radius"] == 2, name
        clone = type(layer).from_config(config)
        call(clone, xl, xg, side)
        assert clone.get_config() == config, name
        clone.set_weights(layer.get_weights())
        _same_outputs(layer, clone, lambda l: call(l, xl, xg, side))
        # Through Keras' generic (de)serialization too.
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(again) is type(layer) and again.get_config() == config


def _without_shared_ids(config):
    """Drops Keras' `shared_object_id` bookkeeping: `.keras` saving tags serialized
    objects by `id()`, and the fresh initializer / regularizer objects the weight options
    make can reuse an id, so loading may leave the tag in a nested config."""
    if isinstance(config, dict):
        return {k: _without_shared_ids(v) for k, v in config.items() if k != "shared_object_id"}
    return config


@pytest.mark.parametrize("name", ["attention", "block", "encoder"])
def test_layers_keras_file_round_trip(tmp_path, name):
    """A Functional model around the layer (masks as model inputs) saved to .keras loads
    in safe mode with the same outputs."""
    layer, call = serialization_cases()[name]
    inputs = {"long": keras.Input((None, H), name="long"), "global": keras.Input((None, H), name="global"),
              "l2l_att_mask": keras.Input((None,), dtype="int32", name="l2l_att_mask"),
              "l2g_att_mask": keras.Input((None, None), dtype="int32", name="l2g_att_mask")}
    side = {k: inputs[k] for k in ("l2l_att_mask", "l2g_att_mask")}
    model = keras.Model(inputs, call(layer, inputs["long"], inputs["global"], side))
    xl, xg, side_np = serialization_inputs()
    data = {"long": xl, "global": xg, **side_np}
    expected = model(data)
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    loaded = keras.models.load_model(path, safe_mode=True)
    assert type(loaded.get_layer(layer.name)) is type(layer)
    assert _without_shared_ids(loaded.get_layer(layer.name).get_config()) == layer.get_config()
    for got, want in zip(loaded(data), expected):
        np.testing.assert_allclose(to_np(got), to_np(want), atol=1e-6)


@pytest.mark.parametrize("module", [etc_attention, etc_encoder], ids=lambda m: m.__name__)
def test_docstring_examples_run(module):
    result = doctest.testmod(module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 3 and result.failed == 0, result


def test_invalid_options_name_the_argument():
    with pytest.raises(ValueError, match="relative_vocab_size=5 is too small"):
        GlobalLocalAttention(num_heads=2, key_dim=4, local_radius=2, relative_pos_max_distance=1,
                             relative_vocab_size=5)
    with pytest.raises(ValueError, match="local_radius must be an integer >= 1"):
        GlobalLocalBlock(num_heads=2, intermediate_size=8, local_radius=0)


# =================================================================== mixed precision
def padded_side_inputs(L, G, long_lengths, global_lengths):
    """Key-padding masks as a user would build them from padding alone: padding attends
    to nothing, so the padded rows deep in the tail (and a padded global token) are
    FULLY masked."""
    long_mask = ref.padding_mask(B, L, long_lengths)
    global_mask = ref.padding_mask(B, G, global_lengths)
    return {
        "l2l_att_mask": long_mask,
        "l2g_att_mask": long_mask[:, :, None] * global_mask[:, None, :],
        "g2g_att_mask": global_mask[:, :, None] * global_mask[:, None, :],
        "g2l_att_mask": global_mask[:, :, None] * long_mask[:, None, :],
    }


def _run_in_policy(make, policy, weights, xl, xg, call):
    layer = make(dtype=policy)
    layer.build((None, None, H), (None, None, H))
    if weights is not None:
        layer.set_weights(weights)
    outs = call(layer, xl, xg)
    return layer, [to_np(keras.ops.cast(o, "float32")) for o in outs]


@pytest.mark.parametrize("which", ["attention", "encoder"])
def test_mixed_bfloat16_matches_float32_with_padding(which):
    """Under mixed_bfloat16 the mask bias and softmax run in float32: a -10000 bias added
    in bfloat16 (spacing 64 near 1e4) would wipe out the logits of fully masked rows."""
    L, G, r, M = 13, 3, 2, 2
    rng = np.random.default_rng(21)
    side = as_tensors(padded_side_inputs(L, G, [L, L - 6], [G, G - 1]))
    xl = rng.normal(size=(B, L, H)).astype(np.float32)
    xg = rng.normal(size=(B, G, H)).astype(np.float32)
    if which == "attention":
        make = lambda dtype: make_layer(r, M, dtype=dtype)  # noqa: E731
        call = lambda layer, xl, xg: layer(xl, xg, **side)[:2]  # noqa: E731
    else:
        make = lambda dtype: GlobalLocalEncoder(  # noqa: E731
            num_layers=2, num_heads=N, intermediate_size=I, hidden_dropout=0.0, attention_dropout=0.0,
            local_radius=r, relative_pos_max_distance=M, relative_vocab_size=2 * M + 4, dtype=dtype)
        call = lambda layer, xl, xg: [layer(xl, xg, side_inputs=side)[k]  # noqa: E731
                                      for k in ("long_output", "global_output")]
    full, expected = _run_in_policy(make, "float32", None, xl, xg, call)
    ref.randomize_weights(full, seed=4)
    expected = [to_np(o) for o in call(full, xl, xg)]
    _, got = _run_in_policy(make, "mixed_bfloat16", full.get_weights(), xl, xg, call)
    dead = padded_side_inputs(L, G, [L, L - 6], [G, G - 1])["l2g_att_mask"].sum(-1) == 0
    assert dead[1, -3:].all(), "the tail of example 1 is fully masked"
    for label, g, e in zip(("long", "global"), got, expected):
        assert np.all(np.isfinite(g)), label
        # bfloat16 keeps 8 significant bits: 2^-8 relative per op, a few ops deep.
        ref.assert_close(f"bf16 {which} {label}", g, e, 0.03 * max(1.0, np.abs(e).max()))
