"""ETC relative positions: the relative-id scheme and the relative scores it selects.

ETC replaces absolute positions inside attention by learned relative "key" embeddings
(Shaw et al. 2018). Every (query, key) pair of the four attention pieces carries an
integer id; each side (long, global) owns a table `rel_emb [R, heads, head_dim]` and a
zero-initialized bias `rel_bias [R, heads]`, and the pair's score gains

    q . rel_emb[id] + rel_bias[id]

BEFORE the 1/sqrt(head_dim) scale (ETC's order). The ids, with M =
`relative_pos_max_distance` (what `realformer_tf/data/etc_inputs.py` builds):

  0 .. 2M    clip(j - i, -M, M) + M   direction-aware clipped offset (l2l and g2g)
  2M + 1     l2g / g2l, other sentence (also the default when no ids are given)
  2M + 2     l2g / g2l, same sentence
  2M + 3     padding (pairs that are masked anyway)

so `relative_vocab_size >= 2M + 4`. R is small (tens), so the layer computes
`q . rel_emb[r] + rel_bias[r]` once for every r ([..., heads, R]) and then picks one
column per key by its id, instead of gathering a [head_dim] vector per (query, key).
"""

import numpy as np
from keras import ops

from realformer_tf.layers.etc import blocked


# --------------------------------------------------------------------------- the ids
def relative_vocab_size_needed(relative_pos_max_distance):
    """2M+1 position ids + 3 extra (l2g/g2l other / same sentence, padding)."""
    return 2 * int(relative_pos_max_distance) + 4


def l2g_other_id(max_distance):
    """Id of a long-global pair whose token is not in the global token's sentence."""
    return 2 * max_distance + 1


def l2g_same_sentence_id(max_distance):
    """Id of a long-global pair whose token is in the global token's sentence."""
    return 2 * max_distance + 2


def padding_relative_id(max_distance):
    """Id given to positions that only exist because of padding (masked anyway)."""
    return 2 * max_distance + 3


def relative_position_ids(offsets, max_distance):
    """Direction-aware clipped relative ids (numpy): clip(j - i, -M, M) + M."""
    return np.clip(offsets, -max_distance, max_distance) + max_distance


def validate_etc_options(local_radius, relative_pos_max_distance, relative_vocab_size=None):
    """Raises ValueError naming the offending option."""
    for name, value, low in (("local_radius", local_radius, 1),
                             ("relative_pos_max_distance", relative_pos_max_distance, 0)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if relative_pos_max_distance and relative_vocab_size is not None:
        needed = relative_vocab_size_needed(relative_pos_max_distance)
        if relative_vocab_size < needed:
            raise ValueError(
                f"relative_vocab_size={relative_vocab_size} is too small for "
                f"relative_pos_max_distance={relative_pos_max_distance}: it needs "
                f"2*{relative_pos_max_distance}+1 position ids + 3 (l2g/g2l other/same "
                f"sentence, padding) = {needed}"
            )


# -------------------------------------------------------------------- relative scores
def relative_table_scores(queries, table, bias):
    """queries [..., N, D] -> [..., N, R]: q . table[r] + bias[r] for every id r."""
    table = ops.cast(table, queries.dtype)
    bias = ops.cast(bias, queries.dtype)
    # Flattened to 3-D: an einsum with "..." batch dims has a ~2x slower gradient on
    # TensorFlow (CPU) than this plain [P, N, D] x [R, N, D] contraction.
    shape = ops.shape(queries)
    flat = ops.reshape(queries, (-1, shape[-2], shape[-1]))
    scores = ops.einsum("phd,rhd->phr", flat, table) + ops.transpose(bias)
    return ops.reshape(scores, tuple(shape[:-1]) + (table.shape[0],))


def pick_by_id(all_scores, ids):
    """all_scores [..., N, R], ids [..., K] (the same leading dims) -> [..., N, K]:
    entry [..., n, k] is all_scores[..., n, ids[..., k]]."""
    ids = ops.expand_dims(ops.cast(ids, "int32"), -2)                      # [..., 1, K]
    target = tuple(ops.shape(all_scores)[:-1]) + (ops.shape(ids)[-1],)
    return ops.take_along_axis(all_scores, ops.broadcast_to(ids, target), axis=-1)


def _onehot(ids, vocab_size, dtype):
    """Static one-hot rows of numpy `ids`, as a constant tensor."""
    return ops.convert_to_tensor(np.eye(vocab_size)[ids], dtype=dtype)


def local_relative_onehot(block_len, max_distance, vocab_size, dtype):
    """Static [bl, 3*bl, R] one-hot of the positional l2l ids of the blocked layout
    (the same for every block): picking those ids becomes one small matmul."""
    ids = relative_position_ids(blocked.local_offsets(block_len), max_distance)
    return _onehot(ids, vocab_size, dtype)


def long_relative_scores(rel_all, l2l_ids, l2g_ids, block_len, max_distance, global_len):
    """Relative scores [B, N, nb, bl, 3bl+G] in the fused blocked long-side layout.

    Args:
      rel_all: [B, nb, bl, N, R] `relative_table_scores` of the blocked long queries.
      l2l_ids: ETC local layout [B, L, 2r+1] or None (positional ids, computed here).
      l2g_ids: [B, L, G] or None (all 2M+1).
    Positional l2l ids go through a static one-hot matmul (no gather); given ids are
    skewed into the blocked layout and picked by id.
    """
    bl, M = block_len, max_distance
    pad_id = padding_relative_id(M)
    if l2l_ids is not None:
        ids = blocked.skew_local_to_blocks(ops.cast(l2l_ids, "int32"), bl, pad_id)
        if l2g_ids is None:
            shape = ops.shape(ids)
            side_ids = ops.full((shape[0], shape[1], bl, global_len), l2g_other_id(M), "int32")
        else:
            side_ids = blocked.split_into_blocks(ops.cast(l2g_ids, "int32"), bl, pad_id)
        picked = pick_by_id(rel_all, ops.concatenate([ids, side_ids], axis=-1))
        return ops.transpose(picked, (0, 3, 1, 2, 4))
    vocab_size = rel_all.shape[-1]
    local = local_relative_onehot(bl, M, vocab_size, rel_all.dtype)        # [bl, 3bl, R]
    if l2g_ids is None:
        other = _onehot(l2g_other_id(M), vocab_size, rel_all.dtype)
        onehot = ops.concatenate(
            [local, ops.broadcast_to(other[None, None], (bl, global_len, vocab_size))], axis=1)
        return ops.einsum("bcqhr,qkr->bhcqk", rel_all, onehot)
    rel_local = ops.einsum("bcqhr,qkr->bhcqk", rel_all, local)             # [B, N, nb, bl, 3bl]
    side_ids = blocked.split_into_blocks(ops.cast(l2g_ids, "int32"), bl, pad_id)
    rel_side = ops.transpose(pick_by_id(rel_all, side_ids), (0, 3, 1, 2, 4))
    # Padding (gradient: a slice) instead of a concat on the key axis.
    no_pad = [[0, 0]] * 4
    return ops.pad(rel_local, no_pad + [[0, global_len]]) + ops.pad(rel_side, no_pad + [[3 * bl, 0]])


def global_relative_scores(rel_all, g2g_ids, g2l_ids, max_distance, long_len):
    """Relative scores [B, N, G, G+L] of the fused global-side layout.

    Args:
      rel_all: [B, G, N, R] `relative_table_scores` of the global queries.
      g2g_ids: [B, G, G] or None (clipped positional ids).
      g2l_ids: [B, G, L] or None (all 2M+1).
    """
    M = max_distance
    batch, global_len, num_heads = ops.shape(rel_all)[:3]
    if g2g_ids is None:
        positions = ops.arange(global_len)
        offsets = positions[None, :] - positions[:, None]
        g2g_ids = ops.broadcast_to(ops.clip(offsets, -M, M)[None] + M, (batch, global_len, global_len))
    if g2l_ids is not None:
        ids = ops.concatenate([ops.cast(g2g_ids, "int32"), ops.cast(g2l_ids, "int32")], axis=-1)
        return ops.transpose(pick_by_id(rel_all, ids), (0, 2, 1, 3))
    g2g = pick_by_id(rel_all, g2g_ids)
    g2l = ops.broadcast_to(rel_all[..., l2g_other_id(M), None], (batch, global_len, num_heads, long_len))
    # Padding (gradient: a slice) instead of a concat on the key axis.
    no_pad = [[0, 0]] * 3
    rel = ops.pad(g2g, no_pad + [[0, long_len]]) + ops.pad(g2l, no_pad + [[global_len, 0]])
    return ops.transpose(rel, (0, 2, 1, 3))
