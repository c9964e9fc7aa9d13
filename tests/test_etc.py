"""ETC global-local attention with RealFormer residual scores.

The blocked (linear-memory) implementation is checked against a DENSE float64 NumPy
reference written here from the math: full L x L long-to-long attention with the
equivalent band mask |i - j| <= local_radius, fused with l2g in one softmax, and
g2g + g2l in another; relative scores q.E[id] + bias[id] are added to q.k before the
1/sqrt(d) scale; carried scores are the pre-mask running sums, one path per side.
Run with `-s` to see the deviations (`DEV ...`).
"""

import json
import math
import zlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import numpy_reference as ref
from realformer_tf import etc_modeling
from realformer_tf.config import ConfigError
from realformer_tf.data import etc_inputs
from realformer_tf.layers import GlobalLocalAttention, GlobalLocalBlock, GlobalLocalEncoder

B, H, N, I = 2, 12, 3, 20
D = H // N
ATOL = 2e-4
PIECES = ("long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
          "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value")


# ================================================================ dense NumPy reference
def attention_params(layer):
    f = ref._np
    p = {name: (f(layer._projection(name).kernel), f(layer._projection(name).bias)) for name in PIECES}
    for side in ("long", "global"):
        out = layer._output_projection(side)
        p[f"{side}_output"] = (f(out.kernel), f(out.bias))
        if layer.use_relative:
            p[f"{side}_rel"] = (f(getattr(layer, f"{side}_relative_embeddings")),
                                f(getattr(layer, f"{side}_relative_bias")))
        if layer.use_head_scale:
            p[f"{side}_head_scale"] = f(getattr(layer, f"{side}_head_scale"))
    return p


def dense_local_to_full(local, L, r, fill):
    """ETC local layout [B, L, 2r+1] -> dense [B, L, L] (entry m of i is key i-r+m)."""
    out = np.full((local.shape[0], L, L), fill, dtype=np.asarray(local).dtype)
    for i in range(L):
        for m in range(2 * r + 1):
            j = i - r + m
            if 0 <= j < L:
                out[:, i, j] = local[:, i, m]
    return out


def clip_ids(offsets, M):
    return np.clip(offsets, -M, M) + M


def ref_attention(xl, xg, p, cfg, side, prev_long=None, prev_global=None, layer_index=0,
                  use_running_mean=False, use_head_scale=False):
    """Dense reference. Returns long_out, global_out, long_scores [B,N,L,L+G] (dense),
    global_scores [B,N,G,G+L]."""
    b, L, _ = xl.shape
    G = xg.shape[1]
    r, M = cfg["local_radius"], cfg["relative_pos_max_distance"]

    def proj(name, x):
        w, bias = p[name]
        return ref.dense(x, w, bias).reshape(x.shape[0], x.shape[1], N, D)

    # -- masks (1 = attend) -------------------------------------------------------------
    j_minus_i = np.arange(L)[None, :] - np.arange(L)[:, None]
    band = (np.abs(j_minus_i) <= r).astype(np.float64)[None]
    l2l = side.get("l2l_att_mask")
    if l2l is None:
        mask_ll = np.broadcast_to(band, (b, L, L))
    elif l2l.ndim == 2:
        mask_ll = band * l2l[:, None, :]
    else:
        mask_ll = band * dense_local_to_full(l2l, L, r, 0)
    mask_lg = side.get("l2g_att_mask", np.ones((b, L, G)))
    g2g = side.get("g2g_att_mask", np.ones((b, G, G)))
    if g2g.ndim == 2:
        g2g = np.broadcast_to(g2g[:, None, :], (b, G, G))
    mask_gl = side.get("g2l_att_mask", np.ones((b, G, L)))
    long_mask = np.concatenate([mask_ll, mask_lg], -1)
    global_mask = np.concatenate([g2g, mask_gl], -1)

    def softmax_attend(q, keys, values, ids, rel, mask, prev):
        s = np.einsum("bihd,bjhd->bhij", q, keys)
        if rel is not None:
            table, bias = rel
            # q . E[id] + bias[id] for every (i, j): [B, N, F, T]
            s = s + np.einsum("bihd,bijhd->bhij", q, table[ids]) + bias[ids].transpose(0, 3, 1, 2)
        s = s / math.sqrt(D)
        if prev is not None:
            s = s + prev
        logits = s / (layer_index + 1) if use_running_mean else s
        logits = logits + (1.0 - mask[:, None]) * ref.MASK_VALUE
        probs = ref.softmax(logits)
        return np.einsum("bhij,bjhd->bihd", probs, values), s

    def finish(ctx, side_name):
        scale = p.get(f"{side_name}_head_scale") if use_head_scale else None
        pos = cfg.get("head_scale_position", "before_projection")
        if scale is not None and pos == "before_projection":
            ctx = ctx * scale[None, None, :, None]
        out = ref.dense(ctx.reshape(ctx.shape[0], ctx.shape[1], N * D), *p[f"{side_name}_output"])
        if scale is not None and pos == "after_projection":
            w = out.shape[-1]
            out = (out.reshape(out.shape[0], out.shape[1], N, w // N) * scale[None, None, :, None]).reshape(out.shape)
        return out

    use_rel = M > 0
    # -- relative ids ---------------------------------------------------------------------
    if use_rel:
        pad_id = 2 * M + 3
        ids_ll = side.get("l2l_relative_att_ids")
        ids_ll = (np.broadcast_to(clip_ids(j_minus_i, M), (b, L, L)) if ids_ll is None
                  else dense_local_to_full(ids_ll, L, r, pad_id))
        ids_lg = side.get("l2g_relative_att_ids", np.full((b, L, G), 2 * M + 1))
        g_off = np.arange(G)[None, :] - np.arange(G)[:, None]
        ids_gg = side.get("g2g_relative_att_ids", np.broadcast_to(clip_ids(g_off, M), (b, G, G)))
        ids_gl = side.get("g2l_relative_att_ids", np.full((b, G, L), 2 * M + 1))
        long_ids = np.concatenate([ids_ll, ids_lg], -1).astype(np.int64)
        global_ids = np.concatenate([ids_gg, ids_gl], -1).astype(np.int64)
    else:
        long_ids = global_ids = None

    q = proj("long_query", xl)
    keys = np.concatenate([proj("l2l_key", xl), proj("l2g_key", xg)], 1)
    values = np.concatenate([proj("l2l_value", xl), proj("l2g_value", xg)], 1)
    ctx_l, s_l = softmax_attend(q, keys, values, long_ids, p.get("long_rel"), long_mask, prev_long)
    q = proj("global_query", xg)
    keys = np.concatenate([proj("g2g_key", xg), proj("g2l_key", xl)], 1)
    values = np.concatenate([proj("g2g_value", xg), proj("g2l_value", xl)], 1)
    ctx_g, s_g = softmax_attend(q, keys, values, global_ids, p.get("global_rel"), global_mask, prev_global)
    return finish(ctx_l, "long"), finish(ctx_g, "global"), s_l, s_g, long_mask


# ------------------------------------------------------- blocked <-> dense layout, by hand
def band_entries(L, r):
    """(i, j, c, q, k) for every in-window, in-range pair: query i = c*bl + q, key j at
    column k = j - (c-1)*bl of the blocked layout."""
    bl = r + 1
    out = []
    for i in range(L):
        c, q = divmod(i, bl)
        for j in range(max(0, i - r), min(L, i + r + 1)):
            out.append((i, j, c, q, j - (c - 1) * bl))
    return out


def blocked_long_scores_as_dense(blocked, L, G, r):
    """The in-window and global entries of blocked long scores, dense; NaN elsewhere."""
    blocked = np.asarray(blocked, np.float64)
    bl = r + 1
    out = np.full(blocked.shape[:2] + (L, L + G), np.nan)
    for i, j, c, q, k in band_entries(L, r):
        out[:, :, i, j] = blocked[:, :, c, q, k]
    for i in range(L):
        c, q = divmod(i, bl)
        out[:, :, i, L:] = blocked[:, :, c, q, 3 * bl:]
    return out


def dense_to_blocked(dense, L, G, r, rng):
    """Random blocked prev scores whose in-window / global entries come from `dense`."""
    bl = r + 1
    nb = -(-L // bl)
    blocked = rng.normal(size=dense.shape[:2] + (nb, bl, 3 * bl + G))
    for i, j, c, q, k in band_entries(L, r):
        blocked[:, :, c, q, k] = dense[:, :, i, j]
    for i in range(L):
        c, q = divmod(i, bl)
        blocked[:, :, c, q, 3 * bl:] = dense[:, :, i, L:]
    return blocked


def assert_dense_close(label, blocked_as_dense, dense, atol):
    valid = ~np.isnan(blocked_as_dense)
    ref.assert_close(label, blocked_as_dense[valid], dense[valid], atol)


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
    return {k: v.numpy() for k, v in side.items()}


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
        **{k: tf.constant(v) for k, v in side.items()})
    bl = r + 1
    nb = -(-L // bl)
    assert tuple(s_l.shape) == (B, N, nb, bl, 3 * bl + G)
    assert tuple(s_g.shape) == (B, N, G, G + L)
    for t in (out_l, out_g, s_l, s_g):
        assert np.all(np.isfinite(t.numpy()))

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
    ref.assert_close(f"{case} long_output", out_l.numpy()[live], e_l[live], ATOL)
    ref.assert_close(f"{case} global_output", out_g.numpy(), e_g, ATOL)
    ref.assert_close(f"{case} global_scores", s_g.numpy(), es_g, ATOL)
    assert_dense_close(f"{case} long_scores", blocked_long_scores_as_dense(s_l.numpy(), L, G, r), es_l, ATOL)


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


def test_fully_masked_rows_finite_with_gradients():
    L, G, r = 6, 2, 2
    layer = make_layer(r, 2)
    xl = tf.Variable(np.random.default_rng(0).normal(size=(1, L, H)).astype(np.float32))
    xg = tf.Variable(np.random.default_rng(1).normal(size=(1, G, H)).astype(np.float32))
    zeros = dict(l2l_att_mask=tf.zeros([1, L], tf.int32), l2g_att_mask=tf.zeros([1, L, G], tf.int32),
                 g2g_att_mask=tf.zeros([1, G, G], tf.int32), g2l_att_mask=tf.zeros([1, G, L], tf.int32))
    with tf.GradientTape() as tape:
        outs = layer(xl, xg, **zeros)
        loss = sum(tf.reduce_sum(o**2) for o in outs[:2])
    grads = tape.gradient(loss, [xl, xg] + layer.trainable_weights)
    for t in list(outs) + grads:
        assert np.all(np.isfinite(tf.convert_to_tensor(t).numpy()))


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
    np.testing.assert_allclose(got[2].numpy(), own[2].numpy() + prev_l, atol=1e-5)
    np.testing.assert_allclose(got[3].numpy(), own[3].numpy() + prev_g, atol=1e-5)
    # ... but different outputs (the logits were divided by 4) ...
    assert np.max(np.abs(got[0].numpy() - plain(xl, xg, prev_long_scores=prev_l,
                                                 prev_global_scores=prev_g)[0].numpy())) > 1e-3
    # ... equal to the dense reference with the running mean.
    e_l, e_g, *_ = ref_attention(
        xl.astype(np.float64), xg.astype(np.float64), attention_params(mean),
        dict(local_radius=r, relative_pos_max_distance=2), {},
        prev_long=_blocked_prev_to_dense(prev_l, L, G, r), prev_global=prev_g,
        layer_index=3, use_running_mean=True)
    ref.assert_close("running mean long", got[0].numpy(), e_l, ATOL)
    ref.assert_close("running mean global", got[1].numpy(), e_g, ATOL)


def _blocked_prev_to_dense(prev, L, G, r):
    d = blocked_long_scores_as_dense(prev, L, G, r)
    return np.nan_to_num(d, nan=0.0)  # out-of-window entries are masked anyway


# ==================================================================== input utilities
def test_relative_ids_and_masks_match_hand_built_tables():
    r, M = 2, 1
    long_mask = np.array([[1, 1, 1, 1, 1, 0]])
    sentence_ids = np.array([[0, 0, 1, 1, 2, 2]])
    global_mask = np.array([[1, 1, 1]])
    side = {k: v.numpy() for k, v in etc_inputs.make_side_inputs(
        long_mask, global_mask, sentence_ids, r, M, include_l2l_relative_ids=True).items()}
    assert "l2l_relative_att_ids" not in etc_inputs.make_side_inputs(long_mask, global_mask, sentence_ids, r, M)
    # Window offsets -2..2 clipped to [-1, 1], + 1.
    np.testing.assert_array_equal(side["l2l_relative_att_ids"][0], [[0, 0, 1, 2, 2]] * 6)
    np.testing.assert_array_equal(side["g2g_relative_att_ids"][0], [[1, 2, 2], [0, 1, 2], [0, 0, 1]])
    # 2M+1 = 3: other sentence; 2M+2 = 4: same sentence; the padding token: no sentence.
    l2g_ids = [[4, 3, 3], [4, 3, 3], [3, 4, 3], [3, 4, 3], [3, 3, 4], [3, 3, 3]]
    np.testing.assert_array_equal(side["l2g_relative_att_ids"][0], l2g_ids)
    np.testing.assert_array_equal(side["g2l_relative_att_ids"][0], np.transpose(l2g_ids))
    # Local mask in ETC's layout: entry m of token i is token i - 2 + m.
    np.testing.assert_array_equal(side["l2l_att_mask"][0], [
        [0, 0, 1, 1, 1],
        [0, 1, 1, 1, 1],
        [1, 1, 1, 1, 1],
        [1, 1, 1, 1, 0],   # token 5 is padding
        [1, 1, 1, 0, 0],   # beyond the end
        [0, 0, 1, 0, 0],   # padding sees padding (never a fully masked row)
    ])
    np.testing.assert_array_equal(side["l2g_att_mask"][0], [[1, 1, 1]] * 5 + [[0, 0, 0]])
    np.testing.assert_array_equal(side["g2g_att_mask"][0], np.ones((3, 3)))

    hard = {k: v.numpy() for k, v in etc_inputs.make_side_inputs(
        long_mask, global_mask, sentence_ids, r, M, use_hard_g2l_mask=True, use_hard_l2g_mask=True).items()}
    same = [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1], [0, 0, 0]]
    np.testing.assert_array_equal(hard["l2g_att_mask"][0], same)
    np.testing.assert_array_equal(hard["g2l_att_mask"][0], np.transpose(same))

    np.testing.assert_array_equal(etc_inputs.relative_ids_table(4, 2), [
        [2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]])
    assert "l2l_relative_att_ids" not in etc_inputs.make_side_inputs(long_mask, global_mask, sentence_ids, r, 0)


def test_global_tokens_from_breakpoints_and_sentence_ids():
    ids = np.array([[5, 6, 7, 8, 9, 10, 0, 0], [5, 6, 7, 0, 0, 0, 0, 0]])
    breakpoints = np.array([[0, 1, 0, 0, 1, 1, 0, 0], [0, 0, 1, 0, 0, 0, 0, 0]])
    f = etc_inputs.make_etc_features(ids, global_seq_len=4, local_radius=2, relative_pos_max_distance=1,
                                     breakpoints=breakpoints)
    np.testing.assert_array_equal(f["sentence_ids"].numpy()[0, :6], [0, 0, 1, 1, 1, 2])
    np.testing.assert_array_equal(f["global_token_ids"].numpy(), [[1, 1, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(f["global_input_mask"].numpy(), [[1, 1, 1, 0], [1, 0, 0, 0]])
    np.testing.assert_array_equal(f["long_input_mask"].numpy()[1], [1, 1, 1, 0, 0, 0, 0, 0])
    g = etc_inputs.make_etc_features(ids, 4, 2, 1, sentence_ids=f["sentence_ids"])
    for k in f:
        np.testing.assert_array_equal(f[k].numpy(), g[k].numpy())
    with pytest.raises(ValueError, match="exactly one"):
        etc_inputs.make_etc_features(ids, 4, 2, 1)
    # Usable inside tf.data.
    ds = tf.data.Dataset.from_tensor_slices({"ids": ids, "bp": breakpoints}).batch(2).map(
        lambda d: etc_inputs.make_etc_features(d["ids"], 4, 2, 1, breakpoints=d["bp"]))
    batch = next(iter(ds))
    np.testing.assert_array_equal(batch["l2l_att_mask"].numpy(), f["l2l_att_mask"].numpy())


# ==================================================== residual paths over a block stack
def ref_block(xl, xg, block, side, prev_l, prev_g, layer_index, cfg):
    lnt = cfg["layer_norm_type"]
    ra = cfg["residual_attention"]
    ln = {s: ref._ln(getattr(block, f"{s}_attention_layer_norm")) for s in ("long", "global")}
    hl, hg = (xl, xg) if lnt == "post" else (ref.layer_norm(xl, *ln["long"]), ref.layer_norm(xg, *ln["global"]))
    ol, og, sl, sg, _ = ref_attention(
        hl, hg, attention_params(block.attention),
        dict(local_radius=cfg["local_radius"], relative_pos_max_distance=cfg["relative_pos_max_distance"]),
        side, prev_long=prev_l if ra else None, prev_global=prev_g if ra else None,
        layer_index=layer_index, use_running_mean=ra and cfg["use_running_mean"],
        use_head_scale=lnt == "normformer")
    outs = []
    for s, x, o in (("long", xl, ol), ("global", xg, og)):
        if lnt == "normformer":
            o = ref.layer_norm(o, *ref._ln(getattr(block, f"{s}_attention_post_layer_norm")))
        x = x + o
        if lnt == "post":
            x = ref.layer_norm(x, *ln[s])
        outs.append(ref.feed_forward(x, ref.ffn_params(block.feed_forward(s)), lnt))
    return outs[0], outs[1], sl, sg


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
            v.assign(v.numpy() * 0.3)
    got = encoder(xl, xg, side_inputs={k: tf.constant(v) for k, v in side.items()})

    x_l, x_g = xl.astype(np.float64), xg.astype(np.float64)
    prev_l = prev_g = None
    for i, block in enumerate(encoder.blocks):
        x_l, x_g, prev_l, prev_g = ref_block(x_l, x_g, block, side, prev_l, prev_g, i, cfg)
        if i < layers - 1 or encoder.long_final_layer_norm is None:
            ref.assert_close(f"{case} layer {i} long", got["long_encoder_outputs"][i].numpy(), x_l, ATOL)
            ref.assert_close(f"{case} layer {i} global", got["global_encoder_outputs"][i].numpy(), x_g, ATOL)
        ref.assert_close(f"{case} layer {i} global_scores", got["global_scores"][i].numpy(), prev_g, 5e-4)
        assert_dense_close(f"{case} layer {i} long_scores",
                           blocked_long_scores_as_dense(got["long_scores"][i].numpy(), L, G, r), prev_l, 5e-4)
    if encoder.long_final_layer_norm is not None:
        x_l = ref.layer_norm(x_l, *ref._ln(encoder.long_final_layer_norm))
        x_g = ref.layer_norm(x_g, *ref._ln(encoder.global_final_layer_norm))
    ref.assert_close(f"{case} long_output", got["long_output"].numpy(), x_l, ATOL)
    ref.assert_close(f"{case} global_output", got["global_output"].numpy(), x_g, ATOL)
    if cfg["residual_attention"]:
        # The paths are separate: the layer-1 long scores differ from its own scores by
        # exactly the layer-0 long scores (same for global).
        assert not np.allclose(got["long_scores"][1].numpy(), got["long_scores"][0].numpy())


# =========================================================================== the model
def tiny_config(**overrides):
    values = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  local_radius=3, relative_pos_max_distance=2, relative_vocab_size=8)
    values.update(overrides)
    return etc_modeling.EtcConfig(**values)


def tiny_features(config, seed=0, L=21, G=4):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, config.vocab_size, size=(2, L)).astype(np.int32)
    ids[1, L - 5:] = 0
    sentence_ids = np.minimum(np.arange(L) // 6, G - 1)[None].repeat(2, 0)
    return etc_inputs.features_for_config(config, ids, G, sentence_ids=sentence_ids)


@pytest.mark.parametrize("layer_norm_type", ["post", "pre", "normformer"])
def test_etc_model_runs_for_every_layer_norm_type(layer_norm_type):
    config = tiny_config(layer_norm_type=layer_norm_type, max_absolute_position_embeddings=32,
                         use_hard_g2l_mask=True)
    model = etc_modeling.EtcModel(config)
    features = tiny_features(config)
    out = model(features)
    assert tuple(out["long_output"].shape) == (2, 21, 16)
    assert tuple(out["global_output"].shape) == (2, 4, 16)
    assert len(out["long_scores"]) == len(out["global_scores"]) == 2
    assert tuple(out["long_scores"][0].shape) == (2, 2, 6, 4, 12 + 4)  # 21 -> 6 blocks of 4
    assert tuple(out["global_scores"][0].shape) == (2, 2, 4, 4 + 21)
    for t in [out["long_output"], out["global_output"]] + out["long_scores"] + out["global_scores"]:
        assert np.all(np.isfinite(t.numpy()))
    # Defaults derived from padding (no side inputs) also work.
    bare = model({"long_token_ids": features["long_token_ids"], "global_token_ids": features["global_token_ids"]})
    assert np.all(np.isfinite(bare["long_output"].numpy()))
    with pytest.raises(ValueError, match="max_absolute_position_embeddings"):
        model({"long_token_ids": tf.ones([1, 40], tf.int32), "global_token_ids": tf.ones([1, 1], tf.int32)})


def test_etc_model_trains_with_tiny_mlm_loss():
    keras.utils.set_random_seed(0)
    config = tiny_config()
    model = etc_modeling.EtcPretrainingModel(config)
    features = tiny_features(config, seed=1)
    positions = np.array([[1, 4, 9, 15], [0, 3, 7, 12]], np.int32)
    labels = np.take_along_axis(features["long_token_ids"].numpy(), positions, axis=1)
    masked = features["long_token_ids"].numpy().copy()
    np.put_along_axis(masked, positions, 2, axis=1)  # id 2 plays [MASK]
    inputs = dict(features, long_token_ids=tf.constant(masked), masked_lm_positions=tf.constant(positions))
    optimizer = keras.optimizers.Adam(learning_rate=1e-2)
    model(inputs)
    optimizer.build(model.trainable_variables)  # slots outside tf.function: one trace

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(inputs, training=True)["masked_lm_logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses = [float(step()) for _ in range(12)]
    print("ETC MLM losses", [round(v, 3) for v in losses])
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.6 * losses[0], losses


# ==================================================================== serialization
def _same_outputs(a, b, call):
    for x, y in zip(call(a), call(b)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-6)


def test_get_config_from_config_round_trip():
    rng = np.random.default_rng(2)
    xl = rng.normal(size=(B, 9, H)).astype(np.float32)
    xg = rng.normal(size=(B, 2, H)).astype(np.float32)
    non_default = dict(local_radius=2, relative_pos_max_distance=1, relative_vocab_size=9,
                       share_qkv_projections=False, share_kv_projections=True,
                       share_att_output_projection=True)
    layers = {
        "attention": (GlobalLocalAttention(num_heads=N, key_dim=D, use_running_mean=True, layer_index=2,
                                           use_head_scale=True, head_scale_position="after_projection",
                                           dropout=0.1, name="gla", **non_default),
                      lambda l: l(xl, xg)),
        "block": (GlobalLocalBlock(num_heads=N, intermediate_size=I, layer_norm_type="normformer",
                                   use_residual_scale=True, layer_index=1, share_feed_forward_params=False,
                                   name="glb", **non_default),
                  lambda l: l(xl, xg)),
        "encoder": (GlobalLocalEncoder(num_layers=2, num_heads=N, intermediate_size=I, layer_norm_type="pre",
                                       use_running_mean=True, name="gle", **non_default),
                    lambda l: [l(xl, xg)[k] for k in ("long_output", "global_output")]),
    }
    for name, (layer, call) in layers.items():
        call(layer)
        config = layer.get_config()
        json.dumps(config)
        clone = type(layer).from_config(config)
        call(clone)
        assert clone.get_config() == config, name
        clone.set_weights(layer.get_weights())
        _same_outputs(layer, clone, call)
        # Through Keras' generic (de)serialization too.
        again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        assert type(again) is type(layer) and again.get_config() == config

    config = tiny_config(layer_norm_type="normformer", use_running_mean=True, share_qkv_projections=False)
    model = etc_modeling.EtcModel(config)
    features = tiny_features(config)
    model(features)
    clone = etc_modeling.EtcModel.from_config(model.get_config())
    clone(features)
    assert clone.config == config
    clone.set_weights(model.get_weights())
    _same_outputs(model, clone, lambda m: [m(features)["long_output"], m(features)["global_output"]])


def test_etc_model_keras_save_and_load(tmp_path):
    config = tiny_config(num_hidden_layers=1)
    model = etc_modeling.EtcClassifierModel(config, num_labels=3)
    features = tiny_features(config)
    logits = model(features)["logits"].numpy()
    path = str(tmp_path / "etc.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded(features)["logits"].numpy(), logits, atol=1e-6)


# ============================================================================ config
def test_etc_config_defaults_validation_and_json(tmp_path):
    c = etc_modeling.EtcConfig(vocab_size=100)
    assert (c.local_radius, c.relative_pos_max_distance, c.relative_vocab_size) == (84, 12, 32)
    assert (c.segment_vocab_size, c.max_absolute_position_embeddings) == (16, 0)
    assert c.share_qkv_projections and c.share_feed_forward_params and not c.share_kv_projections
    assert c.residual_attention and c.layer_norm_type == "post" and not c.use_running_mean
    assert "ETC+RealFormer" in c.describe()
    path = tmp_path / "etc_config.json"
    c.to_json_file(str(path))
    assert etc_modeling.EtcConfig.from_json_file(str(path)) == c
    assert etc_modeling.EtcConfig(vocab_size=5, use_pre_activation_order=True).layer_norm_type == "pre"

    bad = [
        (dict(relative_vocab_size=20), r"relative_vocab_size \(20\) must be at least 2\*relative_pos_max_distance\+4 = 28"),
        (dict(relative_pos_max_distance=2, relative_vocab_size=7), "at least .* = 8"),
        (dict(hidden_size=100, num_attention_heads=12), "not a multiple of num_attention_heads"),
        (dict(local_radius=0), "local_radius must be a positive integer"),
        (dict(layer_norm_type="sandwich"), "layer_norm_type 'sandwich'"),
        (dict(use_pre_activation_order=True, layer_norm_type="post"), "use_pre_activation_order"),
        (dict(normformer_residual_scale=True), "normformer_residual_scale needs"),
        (dict(share_qkv_projections="yes"), "share_qkv_projections must be true or false"),
        (dict(hidden_act="swoosh"), "hidden_act 'swoosh'"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ConfigError, match=message):
            etc_modeling.EtcConfig(vocab_size=10, **kwargs)
    # Relative positions off: any relative_vocab_size is fine.
    etc_modeling.EtcConfig(vocab_size=10, relative_pos_max_distance=0, relative_vocab_size=0)
    with pytest.raises(ConfigError, match="unknown field.*local_radiuss"):
        etc_modeling.EtcConfig.from_dict({"vocab_size": 10, "local_radiuss": 3})
    with pytest.raises(ValueError, match="relative_vocab_size=5 is too small"):
        GlobalLocalAttention(num_heads=2, key_dim=4, local_radius=2, relative_pos_max_distance=1,
                             relative_vocab_size=5)
    with pytest.raises(ValueError, match="local_radius must be an integer >= 1"):
        GlobalLocalBlock(num_heads=2, intermediate_size=8, local_radius=0)


# ===================================================================== tasks
def test_fixed_block_features_for_bert_records():
    ids = np.array([[5, 6, 7, 8, 9, 10, 11, 12, 13, 0], [5, 6, 7, 0, 0, 0, 0, 0, 0, 0]], np.int32)
    mask = (ids > 0).astype(np.int32)
    seg = np.array([[0, 0, 0, 0, 1, 1, 1, 1, 1, 0], [0] * 10], np.int32)
    f = etc_inputs.make_fixed_block_features(ids, mask, seg, tokens_per_global=4, local_radius=2,
                                             relative_pos_max_distance=1)
    np.testing.assert_array_equal(f["global_token_ids"].numpy(), [[1, 1, 1], [1, 0, 0]])
    np.testing.assert_array_equal(f["global_token_type_ids"].numpy(), [[0, 1, 1], [0, 0, 0]])
    np.testing.assert_array_equal(f["sentence_ids"].numpy()[0], [0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(f["long_token_type_ids"].numpy(), seg)
    assert f["l2g_att_mask"].shape == (2, 10, 3)


def test_etc_checkpoints_pretraining_to_classifier(tmp_path):
    from realformer_tf.checkpoint import CheckpointError

    config = tiny_config(num_hidden_layers=1)
    pre = etc_modeling.EtcPretrainingModel(config)
    names = pre.etc_checkpoint_variables()
    assert len(names) == len(pre.weights)
    assert {n.split("/")[0] for n in names} == {"etc", "predictions", "seq_relationship"}
    prefix = pre.save_etc_checkpoint(str(tmp_path / "etc_model.ckpt"))
    clf = etc_modeling.EtcClassifierModel(config, num_labels=2)
    clf.load_etc_checkpoint(prefix, skip_heads=True)
    encoder = {n: v for n, v in clf.etc_checkpoint_variables().items() if n.startswith("etc/")}
    assert encoder and all(np.array_equal(v.numpy(), names[n].numpy()) for n, v in encoder.items())
    other = etc_modeling.EtcClassifierModel(tiny_config(num_hidden_layers=1, share_qkv_projections=False), 2)
    with pytest.raises(CheckpointError):
        other.load_etc_checkpoint(prefix, skip_heads=True)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["none", "bfloat16", "float16"])
def test_etc_pretraining_task_runs_in_the_shared_trainer(tmp_path, precision):
    from realformer_tf import distribution

    float16 = distribution.set_mixed_precision(precision)  # float16: with loss scaling
    try:
        _train_etc_pretraining(tmp_path, float16)
    finally:
        distribution.set_mixed_precision("none")


def _train_etc_pretraining(tmp_path, float16):
    from realformer_tf import optimization
    from realformer_tf.families import get_family
    from realformer_tf.runner import RunOptions
    from realformer_tf.tasks.pretraining import PretrainingTask
    from realformer_tf.training import Trainer

    family, options = get_family("etc"), RunOptions(etc_tokens_per_global=8)

    config = tiny_config()
    rng = np.random.default_rng(0)
    n, L, P = 8, 24, 3
    ids = rng.integers(5, config.vocab_size, size=(n, L)).astype(np.int32)
    records = {
        "input_ids": ids, "input_mask": np.ones((n, L), np.int32), "segment_ids": np.zeros((n, L), np.int32),
        "masked_lm_positions": np.tile(np.array([[2, 9, 17]], np.int32), (n, 1)),
        "masked_lm_ids": ids[:, [2, 9, 17]], "masked_lm_weights": np.ones((n, P), np.float32),
        "next_sentence_labels": rng.integers(0, 2, size=(n, 1)).astype(np.int32),
    }
    base = lambda ctx=None, start_step=0: tf.data.Dataset.from_tensor_slices(records).repeat().batch(4, drop_remainder=True)  # noqa: E731
    trainer = Trainer(PretrainingTask(config, family=family), tf.distribute.get_strategy(), str(tmp_path),
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-3, 4, 1,
                                                                         float16_loss_scaling=float16),
                      steps_per_loop=2, save_checkpoints_steps=2, global_batch_size=4)
    trainer.restore_or_initialize()
    train = trainer.train(family.adapt_dataset_fn(base, config, options), 4, log_fn=lambda *_: None)
    assert np.isfinite(train["loss"]) and int(trainer.global_step.numpy()) == 4
    assert all(np.isfinite(w.numpy().astype(np.float32)).all() for w in trainer.model.weights)
    results = trainer.evaluate(family.adapt_dataset_fn(lambda ctx=None: base(ctx).take(2), config, options), -1)
    assert {"masked_lm_accuracy", "next_sentence_loss", "loss"} <= set(results)
    prefix = family.save_final_checkpoint(trainer.model, str(tmp_path), config)
    assert etc_modeling.EtcConfig.from_json_file(str(tmp_path / "etc_config.json")) == config
    etc_modeling.EtcClassifierModel(config, 2).load_etc_checkpoint(prefix, skip_heads=True)
