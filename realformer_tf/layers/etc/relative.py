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
import tensorflow as tf

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
    table = tf.cast(table, queries.dtype)
    bias = tf.cast(bias, queries.dtype)
    shape = tf.shape(queries)
    num_heads, head_dim = table.shape[1], table.shape[2]
    flat = tf.reshape(queries, [-1, num_heads, head_dim])
    scores = tf.einsum("phd,rhd->phr", flat, table) + tf.transpose(bias)
    return tf.reshape(scores, tf.concat([shape[:-1], [table.shape[0]]], axis=0))


def pick_by_id(all_scores, ids, batch_dims):
    """all_scores [<batch_dims>, N, R], ids [<batch_dims>, K] -> [<batch_dims>, N, K]."""
    return tf.gather(all_scores, ids, axis=batch_dims + 1, batch_dims=batch_dims)


def local_relative_onehot(block_len, max_distance, vocab_size, dtype):
    """Static [bl, 3*bl, R] one-hot of the positional l2l ids of the blocked layout
    (the same for every block): picking those ids becomes one small matmul."""
    ids = relative_position_ids(blocked.local_offsets(block_len), max_distance)
    return tf.constant(np.eye(vocab_size)[ids], dtype=dtype)


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
        ids = blocked.skew_local_to_blocks(tf.cast(l2l_ids, tf.int32), bl, pad_id)
        if l2g_ids is None:
            shape = tf.shape(ids)
            side_ids = tf.fill([shape[0], shape[1], bl, global_len], l2g_other_id(M))
        else:
            side_ids = blocked.split_into_blocks(tf.cast(l2g_ids, tf.int32), bl, pad_id)
        picked = pick_by_id(rel_all, tf.concat([ids, side_ids], axis=-1), 3)
        return tf.transpose(picked, [0, 3, 1, 2, 4])
    vocab_size = rel_all.shape[-1]
    local = local_relative_onehot(bl, M, vocab_size, rel_all.dtype)        # [bl, 3bl, R]
    if l2g_ids is None:
        other = tf.one_hot(l2g_other_id(M), vocab_size, dtype=rel_all.dtype)
        onehot = tf.concat([local, tf.broadcast_to(other[None, None], [bl, global_len, vocab_size])], 1)
        return tf.einsum("bcqhr,qkr->bhcqk", rel_all, onehot)
    rel_local = tf.einsum("bcqhr,qkr->bhcqk", rel_all, local)             # [B, N, nb, bl, 3bl]
    side_ids = blocked.split_into_blocks(tf.cast(l2g_ids, tf.int32), bl, pad_id)
    rel_side = tf.transpose(pick_by_id(rel_all, side_ids, 3), [0, 3, 1, 2, 4])
    # Padding (gradient: a slice) instead of a concat on the key axis.
    no_pad = [[0, 0]] * 4
    return tf.pad(rel_local, no_pad + [[0, global_len]]) + tf.pad(rel_side, no_pad + [[3 * bl, 0]])


def global_relative_scores(rel_all, g2g_ids, g2l_ids, max_distance, long_len):
    """Relative scores [B, N, G, G+L] of the fused global-side layout.

    Args:
      rel_all: [B, G, N, R] `relative_table_scores` of the global queries.
      g2g_ids: [B, G, G] or None (clipped positional ids).
      g2l_ids: [B, G, L] or None (all 2M+1).
    """
    M = max_distance
    shape = tf.shape(rel_all)
    batch, global_len, num_heads = shape[0], shape[1], shape[2]
    if g2g_ids is None:
        positions = tf.range(global_len)
        offsets = positions[None, :] - positions[:, None]
        g2g_ids = tf.broadcast_to(tf.clip_by_value(offsets, -M, M)[None] + M,
                                  [batch, global_len, global_len])
    if g2l_ids is not None:
        ids = tf.concat([tf.cast(g2g_ids, tf.int32), tf.cast(g2l_ids, tf.int32)], axis=-1)
        return tf.transpose(pick_by_id(rel_all, ids, 2), [0, 2, 1, 3])
    g2g = pick_by_id(rel_all, tf.cast(g2g_ids, tf.int32), 2)
    g2l = tf.broadcast_to(rel_all[..., l2g_other_id(M), None], [batch, global_len, num_heads, long_len])
    # Padding (gradient: a slice) instead of a concat on the key axis.
    rel = (tf.pad(g2g, [[0, 0], [0, 0], [0, 0], [0, long_len]])
           + tf.pad(g2l, [[0, 0], [0, 0], [0, 0], [global_len, 0]]))
    return tf.transpose(rel, [0, 2, 1, 3])
