"""Attention masks as additive logit biases.

The original BERT adds `(1 - mask) * -10000` to the logits; the attention layer does
so in float32 (or float64) even under mixed precision. Unlike the dtype's minimum,
-10000 cannot overflow to -inf when added to a logit, so a fully masked row gets a
finite softmax (all its logits shift alike) instead of NaN.
"""

import tensorflow as tf

MASK_VALUE = -10000.0


def to_attention_mask_4d(attention_mask):
    """[B, T] or [B, F, T] mask (1 = attend) -> [B, 1, F|1, T] for [B, N, F, T] logits."""
    rank = attention_mask.shape.rank
    if rank == 2:
        return attention_mask[:, None, None, :]
    if rank == 3:
        return attention_mask[:, None, :, :]
    if rank == 4:
        return attention_mask
    raise ValueError(
        f"attention_mask must have rank 2 [batch, key_len] or 3 [batch, query_len, key_len];"
        f" got shape {attention_mask.shape}"
    )


def causal_mask(query_len, key_len, dtype=tf.int32):
    """[1, 1, F, T] lower-triangular mask; queries are aligned to the end of the keys."""
    rows = tf.range(query_len)[:, None] + (key_len - query_len)
    cols = tf.range(key_len)[None, :]
    return tf.cast(cols <= rows, dtype)[None, None, :, :]


def mask_bias(mask_4d, dtype):
    """Additive bias: 0 where attending, MASK_VALUE where masked."""
    return (1.0 - tf.cast(mask_4d, dtype)) * tf.cast(MASK_VALUE, dtype)


def combine_masks(attention_mask, query_len, key_len, use_causal_mask):
    """Returns a [B|1, 1, F|1, T] 0/1 mask or None when nothing is masked."""
    mask = None
    if attention_mask is not None:
        mask = to_attention_mask_4d(tf.cast(attention_mask, tf.int32))
    if use_causal_mask:
        causal = causal_mask(query_len, key_len)
        mask = causal if mask is None else mask * causal
    return mask
