"""The blocked layout of ETC's local (long-to-long) attention.

A long token i attends to the keys j with |j - i| <= local_radius. Computing that band
from a dense [L, L] score matrix would cost O(L^2); instead the long sequence is cut
into blocks of `block_len = local_radius + 1` tokens (padded up to a multiple of
block_len) and each query block attends to its previous, current and next key block:
3 * block_len keys, which contain its whole window. Time and memory are linear in L.

The fused long-side score tensor (long keys and global keys in one softmax) is

    long_scores  [B, heads, num_blocks, block_len, 3 * block_len + G]

query i = c * block_len + q sits at [.., c, q, :]; column k < 3 * block_len is long key
(c - 1) * block_len + k (offset j - i = k - block_len - q, see `local_offsets`), and
column 3 * block_len + g is global key g. Columns outside the window, before the first
or after the last token are masked by `band_mask` and the key-padding mask.

ETC's own inputs describe local attention in the "local layout" [B, L, 2r+1] (entry m of
query i is key i - r + m); `skew_local_to_blocks` converts such masks and ids.
"""

import numpy as np
from keras import ops

LONG_SCORE_LAYOUT = "[batch, heads, num_blocks, block_len, 3 * block_len + global_len]"
GLOBAL_SCORE_LAYOUT = "[batch, heads, global_len, global_len + long_len]"


def num_blocks_for(seq_len, block_len):
    """Blocks of `block_len` covering `seq_len` tokens (a Python int or a scalar tensor)."""
    return (seq_len + block_len - 1) // block_len


def _pad_axis_1(x, before, after, pad_value=0):
    """Pads axis 1 of a tensor of any rank (the pad amounts may be dynamic)."""
    widths = [[0, 0], [before, after]] + [[0, 0]] * (len(x.shape) - 2)
    return ops.pad(x, widths, constant_values=pad_value)


def split_into_blocks(x, block_len, pad_value=0):
    """[B, L, ...] -> [B, num_blocks, block_len, ...], padding L up to a multiple."""
    shape = ops.shape(x)
    num_blocks = num_blocks_for(shape[1], block_len)
    x = _pad_axis_1(x, 0, num_blocks * block_len - shape[1], pad_value)
    return ops.reshape(x, (shape[0], num_blocks, block_len) + tuple(shape[2:]))


def merge_blocks(blocked, seq_len):
    """[B, nb, bl, ...] -> [B, seq_len, ...]: undoes `split_into_blocks`."""
    shape = ops.shape(blocked)
    merged = ops.reshape(blocked, (shape[0], shape[1] * shape[2]) + tuple(shape[3:]))
    return merged[:, :seq_len]


def concat_3_blocks(blocked, pad_value=0):
    """[B, nb, bl, ...] -> [B, nb, 3*bl, ...]: previous, current and next block (a
    `pad_value` block before the first and after the last).

    Written as ONE gather of whole blocks: its gradient is a segment sum of contiguous
    rows, where slicing / concatenating on an inner axis has gradients that are many
    times slower than the forward pass on CPU (TensorFlow).
    """
    shape = ops.shape(blocked)
    padded = _pad_axis_1(blocked, 1, 1, pad_value)
    index = ops.arange(shape[1])[:, None] + ops.arange(3)[None, :]        # [nb, 3]
    out = ops.take(padded, index, axis=1)                                 # [B, nb, 3, bl, ...]
    return ops.reshape(out, (shape[0], shape[1], 3 * shape[2]) + tuple(shape[3:]))


def blocked_keys_with_globals(long_keys, global_keys, block_len):
    """Per query block, the keys it attends to, in the fused layout:
    [B, L, ...] long + [B, G, ...] global -> [B, nb, 3*bl + G, ...]
    (previous, current, next long block, then every global key; zero rows where the long
    sequence is padded). One gather from [zero block | long (padded) | zero block | global].
    """
    seq_len, global_len = ops.shape(long_keys)[1], ops.shape(global_keys)[1]
    num_blocks = num_blocks_for(seq_len, block_len)
    end_pad = num_blocks * block_len - seq_len + block_len
    source = ops.concatenate([
        _pad_axis_1(long_keys, block_len, end_pad),
        ops.cast(global_keys, long_keys.dtype),
    ], axis=1)                                                            # [B, (nb+2)*bl + G, ...]
    local = ops.arange(num_blocks)[:, None] * block_len + ops.arange(3 * block_len)[None, :]
    glob = (num_blocks + 2) * block_len + ops.arange(global_len)
    index = ops.concatenate([local, ops.broadcast_to(glob[None, :], (num_blocks, global_len))], axis=1)
    return ops.take(source, index, axis=1)


def skew_local_to_blocks(local, block_len, pad_value=0):
    """ETC local layout [B, L, 2r+1] (entry m of query i is key i - r + m) -> blocked
    layout [B, nb, bl, 3*bl] (entry k of query q in block c is key (c-1)*bl + k), with
    r = block_len - 1. Entries outside the window get `pad_value`."""
    window = 2 * block_len - 1
    blocked = split_into_blocks(local, block_len, pad_value)  # [B, nb, bl, 2r+1]
    width = 3 * block_len + 1
    # Row q: [pad] + window + pads, then reading rows of width `width - 1` shifts row q
    # right by q: out[q, k] = padded[k - q], i.e. local[q, k - q - 1].
    padded = ops.pad(blocked, [[0, 0], [0, 0], [0, 0], [1, width - window - 1]],
                     constant_values=pad_value)
    shape = ops.shape(padded)
    flat = ops.reshape(padded, (shape[0], shape[1], block_len * width))
    flat = flat[:, :, : block_len * (width - 1)]
    return ops.reshape(flat, (shape[0], shape[1], block_len, 3 * block_len))


def local_offsets(block_len):
    """Static [bl, 3*bl] offsets j - i of the blocked layout (same for every block)."""
    q = np.arange(block_len)[:, None]
    k = np.arange(3 * block_len)[None, :]
    return k - block_len - q


def band_mask(block_len):
    """Static [bl, 3*bl] 0/1: |j - i| <= local_radius (= block_len - 1)."""
    return (np.abs(local_offsets(block_len)) <= block_len - 1).astype(np.int32)


def blocked_long_mask(l2l_att_mask, l2g_att_mask, batch, long_len, global_len, block_len):
    """The 0/1 mask [B, 1, nb, bl, 3bl + G] of the fused long-side scores.

    Band & real key positions & the given masks. `l2l_att_mask` is a [B, L] key padding
    mask, ETC's local layout [B, L, 2r+1], or None; `l2g_att_mask` is [B, L, G] or None.
    """
    bl = block_len
    local_mask = None
    key_valid = ops.ones((batch, long_len), "int32")
    if l2l_att_mask is not None and len(l2l_att_mask.shape) == 3:
        local_mask = skew_local_to_blocks(ops.cast(l2l_att_mask, "int32"), bl)
    elif l2l_att_mask is not None:
        key_valid = ops.cast(l2l_att_mask, "int32")
    # Keys beyond the sequence (block padding) are invalid through the zero padding.
    key_valid = concat_3_blocks(split_into_blocks(key_valid, bl))          # [B, nb, 3bl]
    l2l_mask = key_valid[:, :, None, :] * ops.convert_to_tensor(band_mask(bl))[None, None]
    if local_mask is not None:
        l2l_mask = l2l_mask * local_mask
    if l2g_att_mask is None:
        l2g_blocked = ops.ones((batch, num_blocks_for(long_len, bl), bl, global_len), "int32")
    else:
        l2g_blocked = split_into_blocks(ops.cast(l2g_att_mask, "int32"), bl)
    return ops.concatenate([l2l_mask, l2g_blocked], axis=-1)[:, None]


def blocked_to_dense_long_scores(long_scores, long_len, block_len):
    """Blocked long scores [B, N, nb, bl, 3bl+G] -> dense [B, N, L, L+G] with
    out-of-window entries NaN (for analysis and tests; quadratic, numpy)."""
    s = np.asarray(long_scores)
    batch, heads, nb, bl, width = s.shape
    glob = width - 3 * bl
    out = np.full((batch, heads, long_len, long_len + glob), np.nan, dtype=s.dtype)
    offsets = local_offsets(bl)
    for c in range(nb):
        for q in range(bl):
            i = c * bl + q
            if i >= long_len:
                continue
            for k in range(3 * bl):
                j = (c - 1) * bl + k
                if 0 <= j < long_len and abs(offsets[q, k]) <= bl - 1:
                    out[:, :, i, j] = s[:, :, c, q, k]
            out[:, :, i, long_len:] = s[:, :, c, q, 3 * bl:]
    return out
