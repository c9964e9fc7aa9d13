"""A dense float64 NumPy reference for ETC global-local attention, written from the math.

Nothing here calls realformer_tf's computation: the only contact with our code is
reading the Keras layers' weight variables by attribute name. The reference is DENSE:
full L x L long-to-long attention with the band mask |i - j| <= local_radius (the layer
computes it in blocks), fused with l2g in one softmax, and g2g + g2l in another;
relative scores q.E[id] + bias[id] are added to q.k before the 1/sqrt(d) scale; carried
scores are the pre-mask running sums, one path per side.
"""

import math

import numpy as np

import numpy_reference as ref

PIECES = ("long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
          "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value")


def attention_params(layer):
    f = ref._np
    p = {"num_heads": layer.num_heads}
    p.update({name: (f(layer._projection(name).kernel), f(layer._projection(name).bias)) for name in PIECES})
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
    N = p["num_heads"]
    D = p["long_query"][0].shape[1] // N

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


# -------------------------------------------------------------- one block, dense
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
