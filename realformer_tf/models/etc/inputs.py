"""ETC input utilities: global tokens, attention masks and relative position ids.

From long token ids plus sentence ids (or sentence breakpoints) these build what
`EtcModel` takes (all TF ops, usable inside a `tf.data` pipeline):

  global_token_ids      [B, G]  one global token per sentence (ETC used token id 1), 0 = pad
  l2l_att_mask          [B, L, 2r+1]  ETC's local layout: entry m of token i is token i-r+m
  g2g_att_mask          [B, G, G]
  l2g_att_mask          [B, L, G]     (hard l2g: token i sees only its sentence's global token)
  g2l_att_mask          [B, G, L]     (hard g2l: global token s sees only sentence s's tokens)
  l2l_relative_att_ids  [B, L, 2r+1]  clip(j - i, -M, M) + M  (only on request: the layer
                                      computes these positional ids itself, faster)
  g2g_relative_att_ids  [B, G, G]     clip(j - i, -M, M) + M
  l2g_relative_att_ids  [B, L, G]     2M+1 (other sentence) or 2M+2 (same sentence)
  g2l_relative_att_ids  [B, G, L]     the transpose

Masks follow ETC's "example ids" rule: two tokens may attend to each other when they
belong to the same (packed) example; by default the example id is the input mask, so real
tokens see real tokens and padding sees padding (padded rows are never all-masked, and
their outputs are ignored). The relative id 2M+3 is reserved for padding
(`realformer_tf.layers.etc.relative`), so `relative_vocab_size >= 2M + 4`.
"""

import numpy as np
import tensorflow as tf

from realformer_tf.layers.etc.relative import (
    l2g_other_id,
    l2g_same_sentence_id,
    relative_position_ids,
)

GLOBAL_TOKEN_ID = 1  # the id ETC's pretraining used for every (sentence) global token


# ------------------------------------------------------------------- relative id tables
def relative_ids_table(seq_len, max_distance):
    """[seq_len, seq_len] numpy table: id[i, j] = clip(j - i, -M, M) + M."""
    offsets = np.arange(seq_len)[None, :] - np.arange(seq_len)[:, None]
    return relative_position_ids(offsets, max_distance).astype(np.int32)


def local_relative_ids_table(local_radius, max_distance):
    """[2r+1] numpy row (the same for every query): window entry m is offset m - r."""
    return relative_position_ids(np.arange(2 * local_radius + 1) - local_radius,
                                 max_distance).astype(np.int32)


# -------------------------------------------------------------------- sentence ids
def sentence_ids_from_breakpoints(breakpoints):
    """[B, L] breakpoints (1 at the LAST token of each sentence) -> [B, L] 0-based
    sentence ids (tokens after the last breakpoint get the next id)."""
    bp = tf.cast(breakpoints, tf.int32)
    return tf.cumsum(bp, axis=-1, exclusive=True)


def make_global_tokens(sentence_ids, long_input_mask, global_seq_len,
                       global_token_id=GLOBAL_TOKEN_ID):
    """One global token per sentence present among the real long tokens.

    Returns (global_token_ids [B, G], global_input_mask [B, G]). Sentences with id >=
    global_seq_len have no global token (their l2g/g2l "same sentence" links vanish).
    """
    sentence_ids = tf.cast(sentence_ids, tf.int32)
    real = tf.cast(long_input_mask, tf.int32)
    g = tf.range(global_seq_len, dtype=tf.int32)
    present = tf.reduce_max(
        tf.cast(tf.equal(sentence_ids[:, :, None], g[None, None, :]), tf.int32) * real[:, :, None],
        axis=1,
    )  # [B, G]
    return present * global_token_id, present


# ---------------------------------------------------------------------- side inputs
def make_local_att_mask(long_example_ids, local_radius):
    """[B, L] example ids -> [B, L, 2r+1]: j = i - r + m in range and same example."""
    ids = tf.cast(long_example_ids, tf.int32)
    seq_len = tf.shape(ids)[1]
    r = int(local_radius)
    # Pad with -1 (an id no token has) so out-of-range keys are masked.
    padded = tf.pad(ids, [[0, 0], [r, r]], constant_values=-1)
    windows = tf.stack([padded[:, m: m + seq_len] for m in range(2 * r + 1)], axis=-1)
    valid = tf.not_equal(windows, -1)
    return tf.cast(tf.logical_and(tf.equal(windows, ids[:, :, None]), valid), tf.int32)


def make_side_inputs(
    long_input_mask,
    global_input_mask,
    sentence_ids,
    local_radius,
    relative_pos_max_distance,
    use_hard_g2l_mask=False,
    use_hard_l2g_mask=False,
    long_example_ids=None,
    global_example_ids=None,
    include_l2l_relative_ids=False,
):
    """The ETC side inputs (masks and relative ids) as a dict.

    Args:
      long_input_mask: [B, L] 1 = real long token.
      global_input_mask: [B, G] 1 = real global token.
      sentence_ids: [B, L] which sentence (= global token) each long token belongs to.
      local_radius, relative_pos_max_distance: as in EtcConfig (M = 0: no relative ids).
      use_hard_g2l_mask / use_hard_l2g_mask: restrict g2l / l2g to the same sentence.
      long_example_ids / global_example_ids: for packed examples (each example its own
        id, padding another); default: the input masks.
      include_l2l_relative_ids: also return `l2l_relative_att_ids`. They are purely
        positional, and without them `GlobalLocalAttention` uses the same ids through a
        static one-hot matmul (several times faster than gathering ids on CPU), so they
        are left out by default.
    """
    long_mask = tf.cast(long_input_mask, tf.int32)
    global_mask = tf.cast(global_input_mask, tf.int32)
    long_ex = long_mask if long_example_ids is None else tf.cast(long_example_ids, tf.int32)
    global_ex = global_mask if global_example_ids is None else tf.cast(global_example_ids, tf.int32)
    # Padding tokens belong to no sentence.
    sentence_ids = tf.where(long_mask > 0, tf.cast(sentence_ids, tf.int32), -1)
    batch = tf.shape(long_mask)[0]
    long_len = tf.shape(long_mask)[1]
    global_len = tf.shape(global_mask)[1]
    g = tf.range(global_len, dtype=tf.int32)
    same_sentence = tf.cast(tf.equal(sentence_ids[:, :, None], g[None, None, :]), tf.int32)  # [B, L, G]

    l2g = tf.cast(tf.equal(long_ex[:, :, None], global_ex[:, None, :]), tf.int32)
    g2l = tf.transpose(l2g, [0, 2, 1])
    if use_hard_l2g_mask:
        l2g = l2g * same_sentence
    if use_hard_g2l_mask:
        g2l = g2l * tf.transpose(same_sentence, [0, 2, 1])
    out = {
        "l2l_att_mask": make_local_att_mask(long_ex, local_radius),
        "g2g_att_mask": tf.cast(tf.equal(global_ex[:, :, None], global_ex[:, None, :]), tf.int32),
        "l2g_att_mask": l2g,
        "g2l_att_mask": g2l,
    }
    out.update(_relative_ids(same_sentence, global_len, local_radius, int(relative_pos_max_distance),
                             include_l2l_relative_ids, batch, long_len))
    return out


def _relative_ids(same_sentence, global_len, local_radius, M, include_l2l, batch, long_len):
    """The relative-position id inputs (none when M = 0)."""
    if M <= 0:
        return {}
    out = {}
    if include_l2l:
        local_row = tf.constant(local_relative_ids_table(local_radius, M))
        out["l2l_relative_att_ids"] = tf.broadcast_to(local_row[None, None, :], [batch, long_len, 2 * local_radius + 1])
    g = tf.range(global_len, dtype=tf.int32)
    offsets = g[None, :] - g[:, None]
    out["g2g_relative_att_ids"] = tf.broadcast_to((tf.clip_by_value(offsets, -M, M) + M)[None],
                                                  [batch, global_len, global_len])
    l2g_ids = l2g_other_id(M) + same_sentence  # other: 2M+1, same: 2M+2
    assert l2g_same_sentence_id(M) == l2g_other_id(M) + 1
    out["l2g_relative_att_ids"] = l2g_ids
    out["g2l_relative_att_ids"] = tf.transpose(l2g_ids, [0, 2, 1])
    return out


def make_etc_features(
    long_token_ids,
    global_seq_len,
    local_radius,
    relative_pos_max_distance,
    sentence_ids=None,
    breakpoints=None,
    long_input_mask=None,
    long_token_type_ids=None,
    use_hard_g2l_mask=False,
    use_hard_l2g_mask=False,
    global_token_id=GLOBAL_TOKEN_ID,
):
    """Everything `EtcModel` takes, from long token ids and sentence ids or breakpoints.

    `long_input_mask` defaults to `long_token_ids != 0`. Exactly one of `sentence_ids`
    and `breakpoints` is required. Returns a dict with long_token_ids, long_token_type_ids,
    global_token_ids, global_token_type_ids, long_input_mask, global_input_mask,
    sentence_ids and the side inputs of `make_side_inputs`.
    """
    if (sentence_ids is None) == (breakpoints is None):
        raise ValueError("give exactly one of sentence_ids and breakpoints")
    long_token_ids = tf.cast(long_token_ids, tf.int32)
    if long_input_mask is None:
        long_input_mask = tf.cast(tf.not_equal(long_token_ids, 0), tf.int32)
    long_input_mask = tf.cast(long_input_mask, tf.int32)
    if sentence_ids is None:
        sentence_ids = sentence_ids_from_breakpoints(breakpoints)
    sentence_ids = tf.cast(sentence_ids, tf.int32)
    global_token_ids, global_input_mask = make_global_tokens(
        sentence_ids, long_input_mask, global_seq_len, global_token_id)
    features = {
        "long_token_ids": long_token_ids,
        "long_token_type_ids": (tf.zeros_like(long_token_ids) if long_token_type_ids is None
                                else tf.cast(long_token_type_ids, tf.int32)),
        "global_token_ids": global_token_ids,
        "global_token_type_ids": tf.zeros_like(global_token_ids),
        "long_input_mask": long_input_mask,
        "global_input_mask": global_input_mask,
        "sentence_ids": sentence_ids,
    }
    features.update(make_side_inputs(
        long_input_mask, global_input_mask, sentence_ids, local_radius,
        relative_pos_max_distance, use_hard_g2l_mask, use_hard_l2g_mask))
    return features


def features_for_config(config, long_token_ids, global_seq_len, **kwargs):
    """`make_etc_features` with the radius, relative distance and hard masks of an
    `EtcConfig`."""
    return make_etc_features(
        long_token_ids, global_seq_len, config.local_radius, config.relative_pos_max_distance,
        use_hard_g2l_mask=config.use_hard_g2l_mask, use_hard_l2g_mask=config.use_hard_l2g_mask,
        **kwargs,
    )


def make_fixed_block_features(
    input_ids,
    input_mask,
    segment_ids,
    tokens_per_global,
    local_radius,
    relative_pos_max_distance,
    use_hard_g2l_mask=False,
    use_hard_l2g_mask=False,
    global_token_id=GLOBAL_TOKEN_ID,
):
    """ETC features from BERT-style features without sentence structure (ETC's "fixed
    blocks" pattern): one global token per `tokens_per_global` long tokens (ETC suggests
    16 or 32 for BERT pretraining data). Global token g covers long tokens
    [g*tokens_per_global, (g+1)*tokens_per_global) and takes the segment id of its first
    token. The long length must be static; G = ceil(L / tokens_per_global).
    """
    if int(tokens_per_global) <= 0:
        raise ValueError(f"tokens_per_global must be positive, got {tokens_per_global}")
    input_ids = tf.convert_to_tensor(input_ids)
    long_len = input_ids.shape[-1]
    if long_len is None:
        raise ValueError("make_fixed_block_features needs a static long length")
    global_len = -(-long_len // int(tokens_per_global))
    sentence_ids = tf.broadcast_to(
        tf.range(long_len, dtype=tf.int32)[None, :] // int(tokens_per_global), tf.shape(input_ids))
    features = make_etc_features(
        input_ids, global_len, local_radius, relative_pos_max_distance,
        sentence_ids=sentence_ids, long_input_mask=input_mask, long_token_type_ids=segment_ids,
        use_hard_g2l_mask=use_hard_g2l_mask, use_hard_l2g_mask=use_hard_l2g_mask,
        global_token_id=global_token_id)
    first = tf.range(global_len, dtype=tf.int32) * int(tokens_per_global)
    features["global_token_type_ids"] = (
        tf.gather(features["long_token_type_ids"], first, axis=1) * features["global_input_mask"])
    return features
