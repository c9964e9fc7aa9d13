"""Attention masks: 0/1 masks of any accepted rank -> [B, 1, F|1, T], in `keras.ops`.

The additive bias itself lives in `realformer_tf.layers.scores` (`mask_bias`).
"""

from keras import ops

from realformer_tf.layers.scores import MASK_VALUE, mask_bias  # noqa: F401  (re-exported)


def to_attention_mask_4d(attention_mask, name="attention_mask"):
    """[B, T] or [B, F, T] mask (1 = attend) -> [B, 1, F|1, T] for [B, N, F, T] logits."""
    rank = len(attention_mask.shape)
    if rank == 2:
        return attention_mask[:, None, None, :]
    if rank == 3:
        return attention_mask[:, None, :, :]
    if rank == 4:
        return attention_mask
    raise ValueError(
        f"{name} must have rank 2 [batch, key_len], 3 [batch, query_len, key_len] or 4"
        f" [batch, 1|heads, query_len, key_len]; got shape {tuple(attention_mask.shape)}"
    )


def causal_mask(query_len, key_len, dtype="int32"):
    """[1, 1, F, T] lower-triangular mask; queries are aligned to the end of the keys."""
    rows = ops.arange(query_len)[:, None] + (key_len - query_len)
    cols = ops.arange(key_len)[None, :]
    return ops.cast(cols <= rows, dtype)[None, None, :, :]


def combine_masks(attention_mask, query_len, key_len, use_causal_mask):
    """Returns a [B|1, 1, F|1, T] 0/1 mask or None when nothing is masked."""
    mask = None
    if attention_mask is not None:
        mask = to_attention_mask_4d(ops.cast(attention_mask, "int32"))
    if use_causal_mask:
        causal = causal_mask(query_len, key_len)
        mask = causal if mask is None else mask * causal
    return mask
