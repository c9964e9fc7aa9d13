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


def _keras_mask(mask, name):
    """A [batch, length] Keras mask (bool or 0/1) as int32, its rank checked."""
    if len(mask.shape) != 2:
        raise ValueError(
            f"{name} must have rank 2 [batch, length] (a Keras mask); got shape"
            f" {tuple(mask.shape)}"
        )
    return ops.cast(mask, "int32")


def combine_masks(attention_mask, query_len, key_len, use_causal_mask, query_mask=None,
                  key_masks=()):
    """Returns a [B|1, 1, F|1, T] 0/1 mask, or None when nothing is masked.

    Combines (logical AND) the explicit `attention_mask`, the causal mask, the query's
    Keras mask ([B, F]: a masked query row attends nowhere, so its softmax is uniform)
    and the keys' Keras masks ([B, T] each), as `keras.layers.MultiHeadAttention` does.
    """
    masks = []
    if attention_mask is not None:
        masks.append(to_attention_mask_4d(ops.cast(attention_mask, "int32")))
    if use_causal_mask:
        masks.append(causal_mask(query_len, key_len))
    if query_mask is not None:
        masks.append(_keras_mask(query_mask, "query_mask")[:, None, :, None])
    for name, key_mask in zip(("value_mask", "key_mask"), key_masks):
        if key_mask is not None:
            masks.append(_keras_mask(key_mask, name)[:, None, None, :])
    if not masks:
        return None
    mask = masks[0]
    for other in masks[1:]:
        mask = mask * other
    return mask


def keras_mask_of(x):
    """The Keras mask attached to `x` (e.g. by `Embedding(mask_zero=True)`), or None.

    Keras fills in a layer's `mask` argument only when `x` is its only tensor argument;
    a block also given `prev_scores` or an `attention_mask` tensor reads the mask here.
    Keras keeps masks in a private attribute (a side table on JAX), hence the private
    getter; tests/test_keras_user.py fails if it stops finding the mask.
    """
    from keras.src.backend import get_keras_mask  # no public getter in Keras 3.15

    return get_keras_mask(x)


def set_keras_mask(x, mask):
    """Attaches the Keras `mask` to `x` (as `keras_mask_of` reads it): for an output
    whose positions differ from the input's (e.g. `output_range`), so that Keras does not
    give it the input's mask."""
    from keras.src.backend import set_keras_mask as _set  # no public setter in Keras 3.15

    _set(x, mask)
    return x
