"""ETC global-local attention (Ainslie et al. 2020) with RealFormer residual scores.

Two inputs: a long sequence [B, L, H] and a short global sequence [B, G, H]. Four
attention pieces, fused into two softmaxes (as in ETC's `FusedGlobalLocalAttention`):

  long side    each long token attends to its local window (|i - j| <= local_radius)
               AND to all global tokens: ONE softmax over [local window (+) global]
  global side  each global token attends to all global AND all long tokens: ONE softmax

Local attention is computed in blocks so time and memory are linear in L:
`block_len = local_radius + 1`; the long sequence is padded to a multiple of block_len
(and the results sliced back); each query block attends to its previous, current and next
key blocks (3 * block_len keys) with a band mask that keeps only |i - j| <= local_radius
and real key positions.

Relative positions (ETC's relative "key" embeddings): a learned table
`[relative_vocab_size, heads, head_dim]` (+ a zero-initialized bias `[vocab, heads]`) per
side; the relative score `q . rel_emb[id] + rel_bias[id]` is added to `q . k` BEFORE the
1/sqrt(head_dim) scale. Ids (see `realformer_tf/data/etc_inputs.py`):

  0 .. 2M          clip(j - i, -M, M) + M          (l2l and g2g; M = relative_pos_max_distance)
  2M + 1           l2g / g2l, other sentence (also the default when no ids are given)
  2M + 2           l2g / g2l, same sentence
  2M + 3           padding (positions that are masked anyway)

so `relative_vocab_size >= 2M + 4`.

Residual attention (the score-threading contract of DESIGN.md, one path per attention
type): the layer takes `prev_long_scores` / `prev_global_scores` and returns
`(long_output, global_output, long_scores, global_scores)`, each scores tensor the running
sum of the scaled PRE-MASK fused logits:

  long_scores    [B, heads, num_blocks, block_len, 3 * block_len + G]
                 (blocked layout: query i = c * block_len + q sits at [.., c, q, :]; column
                 k < 3 * block_len is long key (c - 1) * block_len + k, column
                 3 * block_len + g is global key g)
  global_scores  [B, heads, G, G + L]   (columns: global keys, then long keys)

With the running-mean option the softmax sees `scores / (layer_index + 1)`, then the mask.
"""

import keras
import numpy as np
import tensorflow as tf

from realformer_tf.layers import masking
from realformer_tf.layers.attention import HEAD_SCALE_POSITIONS
from realformer_tf.layers.transformer import _BlockBase, check_layer_norm_type

LONG_SCORE_LAYOUT = "[batch, heads, num_blocks, block_len, 3 * block_len + global_len]"
GLOBAL_SCORE_LAYOUT = "[batch, heads, global_len, global_len + long_len]"


# --------------------------------------------------------------------------- relative ids
def relative_vocab_size_needed(relative_pos_max_distance):
    """2M+1 position ids + 3 extra (l2g/g2l other / same sentence, padding)."""
    return 2 * int(relative_pos_max_distance) + 4


def l2g_other_id(max_distance):
    return 2 * max_distance + 1


def l2g_same_sentence_id(max_distance):
    return 2 * max_distance + 2


def padding_relative_id(max_distance):
    return 2 * max_distance + 3


def relative_position_ids(offsets, max_distance):
    """Direction-aware clipped relative ids: clip(j - i, -M, M) + M."""
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


# ----------------------------------------------------------------------------- blocking
def num_blocks_for(seq_len, block_len):
    return (seq_len + block_len - 1) // block_len


def split_into_blocks(x, block_len, pad_value=0):
    """[B, L, ...] -> [B, num_blocks, block_len, ...], padding L up to a multiple."""
    shape = tf.shape(x)
    seq_len = shape[1]
    num_blocks = (seq_len + block_len - 1) // block_len
    pad = num_blocks * block_len - seq_len
    paddings = tf.concat([[[0, 0], [0, pad]], tf.zeros([tf.rank(x) - 2, 2], tf.int32)], axis=0)
    x = tf.pad(x, paddings, constant_values=tf.cast(pad_value, x.dtype))
    new_shape = tf.concat([[shape[0], num_blocks, block_len], shape[2:]], axis=0)
    out = tf.reshape(x, new_shape)
    static = x.shape.as_list() if hasattr(x.shape, "as_list") else list(x.shape)
    out.set_shape([static[0], None, block_len] + static[2:])
    return out


def concat_3_blocks(blocked, pad_value=0):
    """[B, nb, bl, ...] -> [B, nb, 3*bl, ...]: previous, current and next block (a
    `pad_value` block before the first and after the last).

    Written as ONE gather of whole blocks: its gradient is a segment sum of contiguous
    rows, where slicing / concatenating on an inner axis has gradients that are many
    times slower than the forward pass on CPU.
    """
    shape = tf.shape(blocked)
    rank = len(blocked.shape)
    padded = tf.pad(blocked, [[0, 0], [1, 1]] + [[0, 0]] * (rank - 2),
                    constant_values=tf.cast(pad_value, blocked.dtype))
    index = tf.range(shape[1])[:, None] + tf.range(3)[None, :]            # [nb, 3]
    out = tf.gather(padded, index, axis=1)                                # [B, nb, 3, bl, ...]
    return tf.reshape(out, tf.concat([shape[:2], [3 * shape[2]], shape[3:]], axis=0))


def blocked_keys_with_globals(long_keys, global_keys, block_len):
    """Per query block, the keys it attends to, in the fused layout:
    [B, L, ...] long + [B, G, ...] global -> [B, nb, 3*bl + G, ...]
    (previous, current, next long block, then every global key; zero rows where the long
    sequence is padded). One gather from [zero block | long (padded) | zero block | global].
    """
    shape = tf.shape(long_keys)
    seq_len = shape[1]
    num_blocks = (seq_len + block_len - 1) // block_len
    rank = len(long_keys.shape)
    trailing = [[0, 0]] * (rank - 2)
    end_pad = num_blocks * block_len - seq_len + block_len
    source = tf.concat([
        tf.pad(long_keys, [[0, 0], [block_len, end_pad]] + trailing),
        tf.cast(global_keys, long_keys.dtype),
    ], axis=1)                                                            # [B, (nb+2)*bl + G, ...]
    local = tf.range(num_blocks)[:, None] * block_len + tf.range(3 * block_len)[None, :]
    glob = (num_blocks + 2) * block_len + tf.range(tf.shape(global_keys)[1])
    index = tf.concat([local, tf.broadcast_to(glob[None, :], [num_blocks, tf.shape(glob)[0]])], axis=1)
    return tf.gather(source, index, axis=1)


def skew_local_to_blocks(local, block_len, pad_value=0):
    """ETC local layout [B, L, 2r+1] (entry m of query i is key i - r + m) -> blocked
    layout [B, nb, bl, 3*bl] (entry k of query q in block c is key (c-1)*bl + k), with
    r = block_len - 1. Entries outside the window get `pad_value`."""
    radius = block_len - 1
    window = 2 * radius + 1
    blocked = split_into_blocks(local, block_len, pad_value)  # [B, nb, bl, 2r+1]
    width = 3 * block_len + 1
    # Row q: [pad] + window + pads, then reading rows of width `width - 1` shifts row q
    # right by q: out[q, k] = padded[k - q], i.e. local[q, k - q - 1].
    padded = tf.pad(
        blocked, [[0, 0], [0, 0], [0, 0], [1, width - window - 1]],
        constant_values=tf.cast(pad_value, blocked.dtype),
    )
    shape = tf.shape(padded)
    flat = tf.reshape(padded, [shape[0], shape[1], block_len * width])
    flat = flat[:, :, : block_len * (width - 1)]
    return tf.reshape(flat, [shape[0], shape[1], block_len, 3 * block_len])


def local_offsets(block_len):
    """Static [bl, 3*bl] offsets j - i of the blocked layout (same for every block)."""
    q = np.arange(block_len)[:, None]
    k = np.arange(3 * block_len)[None, :]
    return k - block_len - q


def band_mask(block_len):
    """Static [bl, 3*bl] 0/1: |j - i| <= local_radius (= block_len - 1)."""
    return (np.abs(local_offsets(block_len)) <= block_len - 1).astype(np.int32)


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


# ---------------------------------------------------------------------------- the layer
@keras.saving.register_keras_serializable(package="realformer_tf")
class GlobalLocalAttention(keras.layers.Layer):
    """ETC fused global-local attention that threads RealFormer scores per side.

    Call:
      layer(long_input [B, L, H], global_input [B, G, H],
            l2l_att_mask=None,   # [B, L] key padding (1 = real) or ETC [B, L, 2r+1]
            g2g_att_mask=None,   # [B, G, G]  (or [B, G] key padding)
            l2g_att_mask=None,   # [B, L, G]
            g2l_att_mask=None,   # [B, G, L]
            l2l_relative_att_ids=None,  # ETC [B, L, 2r+1]; default: clipped positions
            g2g_relative_att_ids=None,  # [B, G, G];          default: clipped positions
            l2g_relative_att_ids=None,  # [B, L, G];          default: 2M+1
            g2l_relative_att_ids=None,  # [B, G, L];          default: 2M+1
            prev_long_scores=None, prev_global_scores=None, training=None)
      -> (long_output [B, L, H], global_output [B, G, H], long_scores, global_scores)

    Masks are 0/1 (1 = attend); a missing mask allows everything except what the
    geometry rules out (out-of-window and padded positions are always masked).

    Args:
      num_heads, key_dim: heads and size per head (hidden = num_heads * key_dim usually).
      local_radius: tokens to the left/right a long token attends to (>= 1).
      relative_pos_max_distance: M; 0 turns relative attention off.
      relative_vocab_size: rows of the relative tables; default 2M + 4 (the minimum).
      share_qkv_projections: one query/key/value projection for all four pieces (ETC's
        default); else long and global sides have their own.
      share_kv_projections: (without share_qkv) the long side's key/value projection is
        shared between l2l and l2g, the global side's between g2g and g2l.
      share_att_output_projection: one output projection for both sides.
      dropout: on the attention probabilities.
      use_running_mean, layer_index: RealFormer's running mean (divide by layer_index+1).
      use_head_scale, head_scale_position: NormFormer's per-head scale (one per side).
      relative_initializer_range: stddev of the relative table (ETC uses 0.5).
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        local_radius,
        output_dim=None,
        relative_pos_max_distance=0,
        relative_vocab_size=None,
        share_qkv_projections=True,
        share_kv_projections=False,
        share_att_output_projection=False,
        dropout=0.0,
        use_running_mean=False,
        layer_index=0,
        use_head_scale=False,
        head_scale_position="before_projection",
        relative_initializer_range=0.5,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        validate_etc_options(local_radius, relative_pos_max_distance, relative_vocab_size)
        if head_scale_position not in HEAD_SCALE_POSITIONS:
            raise ValueError(
                f"head_scale_position={head_scale_position!r}; use one of {HEAD_SCALE_POSITIONS}"
            )
        self.num_heads = int(num_heads)
        self.key_dim = int(key_dim)
        self.local_radius = int(local_radius)
        self.block_len = self.local_radius + 1
        self.output_dim = output_dim
        self.relative_pos_max_distance = int(relative_pos_max_distance)
        if relative_vocab_size is None:
            relative_vocab_size = relative_vocab_size_needed(self.relative_pos_max_distance)
        self.relative_vocab_size = int(relative_vocab_size) if self.relative_pos_max_distance else 0
        self.use_relative = self.relative_pos_max_distance > 0
        self.share_qkv_projections = bool(share_qkv_projections)
        self.share_kv_projections = bool(share_kv_projections)
        self.share_att_output_projection = bool(share_att_output_projection)
        self.dropout = float(dropout)
        self.use_running_mean = bool(use_running_mean)
        self.layer_index = int(layer_index)
        self.use_head_scale = bool(use_head_scale)
        self.head_scale_position = head_scale_position
        self.relative_initializer_range = float(relative_initializer_range)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.probability_dropout = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)

        width = self.num_heads * self.key_dim

        def dense(name, units=width):
            return keras.layers.Dense(
                units, name=name, kernel_initializer=self.kernel_initializer,
                bias_initializer=self.bias_initializer, dtype=self.dtype_policy,
            )

        # Only distinct projections become attributes; `_projection(piece)` routes.
        self.long_query = dense("long_query")
        self.l2l_key = dense("l2l_key")
        self.l2l_value = dense("l2l_value")
        if not (self.share_qkv_projections or self.share_kv_projections):
            self.l2g_key = dense("l2g_key")
            self.l2g_value = dense("l2g_value")
        if not self.share_qkv_projections:
            self.global_query = dense("global_query")
            self.g2g_key = dense("g2g_key")
            self.g2g_value = dense("g2g_value")
            if not self.share_kv_projections:
                self.g2l_key = dense("g2l_key")
                self.g2l_value = dense("g2l_value")
        self._dense_factory = dense

    # -- projections --------------------------------------------------------------------
    def _projection(self, piece):
        """piece in long_query, l2l_key, l2l_value, l2g_key, l2g_value, global_query,
        g2g_key, g2g_value, g2l_key, g2l_value -> the (possibly shared) Dense layer."""
        if self.share_qkv_projections:
            kind = piece.split("_")[1]
            return {"query": self.long_query, "key": self.l2l_key, "value": self.l2l_value}[kind]
        if self.share_kv_projections:
            piece = {"l2g_key": "l2l_key", "l2g_value": "l2l_value",
                     "g2l_key": "g2g_key", "g2l_value": "g2g_value"}.get(piece, piece)
        return getattr(self, piece)

    def _distinct_projections(self):
        names = ["long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
                 "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value"]
        seen, out = set(), []
        for n in names:
            layer = self._projection(n)
            if id(layer) not in seen:
                seen.add(id(layer))
                out.append((n, layer))
        return out

    def _output_projection(self, side):
        if self.share_att_output_projection:
            return self.long_output
        return self.long_output if side == "long" else self.global_output

    def build(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        long_hidden, global_hidden = long_input_shape[-1], global_input_shape[-1]
        shared = self.share_qkv_projections or self.share_att_output_projection or self.share_kv_projections
        if shared and long_hidden != global_hidden:
            raise ValueError(
                f"long hidden size {long_hidden} != global hidden size {global_hidden}; sharing "
                "projections between the sides needs equal sizes"
            )
        for name, layer in self._distinct_projections():
            # Queries: own side. l2l/g2l read the long input, l2g/g2g the global one.
            reads_long = name in ("long_query", "l2l_key", "l2l_value", "g2l_key", "g2l_value")
            layer.build(long_input_shape if reads_long else global_input_shape)
        width = self.num_heads * self.key_dim
        self.long_output = self._dense_factory("long_output", self.output_dim or long_hidden)
        self.long_output.build((None, None, width))
        if not self.share_att_output_projection:
            self.global_output = self._dense_factory("global_output", self.output_dim or global_hidden)
            self.global_output.build((None, None, width))
        if self.use_relative:
            init = keras.initializers.TruncatedNormal(stddev=self.relative_initializer_range)
            for side in ("long", "global"):
                setattr(self, f"{side}_relative_embeddings", self.add_weight(
                    name=f"{side}_relative_embeddings",
                    shape=(self.relative_vocab_size, self.num_heads, self.key_dim),
                    initializer=init,
                ))
                setattr(self, f"{side}_relative_bias", self.add_weight(
                    name=f"{side}_relative_bias",
                    shape=(self.relative_vocab_size, self.num_heads), initializer="zeros",
                ))
        if self.use_head_scale:
            out_dim = self.output_dim or long_hidden
            if self.head_scale_position == "after_projection" and out_dim % self.num_heads:
                raise ValueError(
                    f"head_scale_position='after_projection' splits the output ({out_dim}) into "
                    f"{self.num_heads} equal chunks; it must divide evenly"
                )
            self.long_head_scale = self.add_weight(name="long_head_scale", shape=(self.num_heads,),
                                                   initializer="ones")
            self.global_head_scale = self.add_weight(name="global_head_scale", shape=(self.num_heads,),
                                                     initializer="ones")
        super().build(long_input_shape)

    # -- helpers --------------------------------------------------------------------------
    def _split_heads(self, x):
        shape = tf.shape(x)
        return tf.reshape(x, [shape[0], shape[1], self.num_heads, self.key_dim])

    def _scale_heads(self, x, scale, chunk):
        shape = tf.shape(x)
        heads = tf.reshape(x, [shape[0], shape[1], self.num_heads, chunk])
        heads = heads * tf.cast(scale, x.dtype)[:, None]
        return tf.reshape(heads, [shape[0], shape[1], self.num_heads * chunk])

    def _finish(self, context, side):
        """[B, T, N, D] context -> output projection (+ NormFormer head scale)."""
        shape = tf.shape(context)
        context = tf.reshape(context, [shape[0], shape[1], self.num_heads * self.key_dim])
        scale = getattr(self, f"{side}_head_scale", None)
        if self.use_head_scale and self.head_scale_position == "before_projection":
            context = self._scale_heads(context, scale, self.key_dim)
        output = self._output_projection(side)(context)
        if self.use_head_scale and self.head_scale_position == "after_projection":
            output = self._scale_heads(output, scale, output.shape[-1] // self.num_heads)
        return output

    def attention_logits(self, scores):
        if self.use_running_mean:
            return scores / tf.cast(self.layer_index + 1, scores.dtype)
        return scores

    def _probabilities(self, scores, mask, training):
        logits = self.attention_logits(scores) + masking.mask_bias(mask, scores.dtype)
        probs = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        return self.probability_dropout(tf.cast(probs, scores.dtype), training=training)

    def _relative_table_scores(self, queries, side):
        """queries [..., N, D] -> [..., N, R]: q . rel_emb[r] + rel_bias[r] for every id r
        (R is small), to be picked per key by id."""
        table = tf.cast(getattr(self, f"{side}_relative_embeddings"), queries.dtype)
        bias = tf.cast(getattr(self, f"{side}_relative_bias"), queries.dtype)
        shape = tf.shape(queries)
        flat = tf.reshape(queries, [-1, self.num_heads, self.key_dim])
        scores = tf.einsum("phd,rhd->phr", flat, table) + tf.transpose(bias)
        return tf.reshape(scores, tf.concat([shape[:-1], [self.relative_vocab_size]], axis=0))

    @staticmethod
    def _pick(all_scores, ids, batch_dims):
        """all_scores [<batch_dims>, N, R], ids [<batch_dims>, K] -> [<batch_dims>, N, K]."""
        return tf.gather(all_scores, ids, axis=batch_dims + 1, batch_dims=batch_dims)

    def _local_relative_onehot(self, dtype):
        """Static [bl, 3*bl, R] one-hot of the default (positional) l2l ids of the blocked
        layout: picking ids becomes one small matmul instead of a gather."""
        ids = relative_position_ids(local_offsets(self.block_len), self.relative_pos_max_distance)
        return tf.constant(np.eye(self.relative_vocab_size)[ids], dtype=dtype)

    def _long_relative_scores(self, q_blocks, l2l_ids, l2g_ids, global_len):
        """Relative scores [B, N, nb, bl, 3bl+G] of the fused long-side layout.

        Default (positional) l2l ids go through a static one-hot matmul; l2g ids, when
        given, are picked by id (a gather), else they are all 2M+1 (one column).
        """
        bl, M, R = self.block_len, self.relative_pos_max_distance, self.relative_vocab_size
        rel_all = self._relative_table_scores(q_blocks, "long")               # [B, nb, bl, N, R]
        dtype = rel_all.dtype
        pad_id = padding_relative_id(M)
        if l2l_ids is not None:
            ids = skew_local_to_blocks(tf.cast(l2l_ids, tf.int32), bl, pad_id)
            if l2g_ids is None:
                shape = tf.shape(ids)
                side_ids = tf.fill([shape[0], shape[1], bl, global_len], l2g_other_id(M))
            else:
                side_ids = split_into_blocks(tf.cast(l2g_ids, tf.int32), bl, pad_id)
            picked = self._pick(rel_all, tf.concat([ids, side_ids], axis=-1), 3)
            return tf.transpose(picked, [0, 3, 1, 2, 4])
        local = self._local_relative_onehot(dtype)                            # [bl, 3bl, R]
        if l2g_ids is None:
            other = tf.one_hot(l2g_other_id(M), R, dtype=dtype)
            onehot = tf.concat([local, tf.broadcast_to(other[None, None], [bl, global_len, R])], axis=1)
            return tf.einsum("bcqhr,qkr->bhcqk", rel_all, onehot)
        rel_local = tf.einsum("bcqhr,qkr->bhcqk", rel_all, local)             # [B, N, nb, bl, 3bl]
        side_ids = split_into_blocks(tf.cast(l2g_ids, tf.int32), bl, pad_id)
        rel_side = tf.transpose(self._pick(rel_all, side_ids, 3), [0, 3, 1, 2, 4])
        no_pad = [[0, 0]] * 4
        return (tf.pad(rel_local, no_pad + [[0, global_len]])
                + tf.pad(rel_side, no_pad + [[3 * bl, 0]]))

    # -- call -----------------------------------------------------------------------------
    def call(
        self,
        long_input,
        global_input,
        l2l_att_mask=None,
        g2g_att_mask=None,
        l2g_att_mask=None,
        g2l_att_mask=None,
        l2l_relative_att_ids=None,
        g2g_relative_att_ids=None,
        l2g_relative_att_ids=None,
        g2l_relative_att_ids=None,
        prev_long_scores=None,
        prev_global_scores=None,
        training=None,
    ):
        bl = self.block_len
        batch = tf.shape(long_input)[0]
        long_len = tf.shape(long_input)[1]
        global_len = tf.shape(global_input)[1]
        M = self.relative_pos_max_distance

        cache = {}

        def project(piece, x):
            layer = self._projection(piece)
            key = (id(layer), id(x))
            if key not in cache:
                cache[key] = self._split_heads(layer(x))
            return cache[key]

        q_long = project("long_query", long_input)            # [B, L, N, D]
        k_l2l = project("l2l_key", long_input)
        v_l2l = project("l2l_value", long_input)
        k_l2g = project("l2g_key", global_input)              # [B, G, N, D]
        v_l2g = project("l2g_value", global_input)
        q_global = project("global_query", global_input)
        k_g2g = project("g2g_key", global_input)
        v_g2g = project("g2g_value", global_input)
        k_g2l = project("g2l_key", long_input)
        v_g2l = project("g2l_value", long_input)
        inv_sqrt_d = tf.cast(self.key_dim**-0.5, q_long.dtype)

        # ---------------------------------------------------------------- long side
        # One score tensor per query block over [prev | cur | next block | globals]: no
        # concatenation of float tensors on inner axes (slow gradients on CPU).
        q_blocks = split_into_blocks(q_long, bl)                           # [B, nb, bl, N, D]
        keys = blocked_keys_with_globals(k_l2l, k_l2g, bl)                 # [B, nb, 3bl+G, N, D]
        values = blocked_keys_with_globals(v_l2l, v_l2g, bl)
        long_scores = tf.einsum("bcqhd,bckhd->bhcqk", q_blocks, keys)      # [B, N, nb, bl, 3bl+G]
        num_blocks = tf.shape(q_blocks)[1]

        # Mask [B, nb, bl, 3bl + G]: band & real key positions (& the given masks).
        if l2l_att_mask is not None and len(l2l_att_mask.shape) == 3:
            local_mask = skew_local_to_blocks(tf.cast(l2l_att_mask, tf.int32), bl)
            key_valid = tf.ones([batch, long_len], tf.int32)
        else:
            local_mask = None
            key_valid = (tf.ones([batch, long_len], tf.int32) if l2l_att_mask is None
                         else tf.cast(l2l_att_mask, tf.int32))
        key_valid = concat_3_blocks(split_into_blocks(key_valid, bl))      # [B, nb, 3bl]
        l2l_mask = key_valid[:, :, None, :] * tf.constant(band_mask(bl))[None, None]
        if local_mask is not None:
            l2l_mask = l2l_mask * local_mask
        if l2g_att_mask is None:
            l2g_blocked = tf.ones([batch, num_blocks, bl, global_len], tf.int32)
        else:
            l2g_blocked = split_into_blocks(tf.cast(l2g_att_mask, tf.int32), bl)
        long_mask = tf.concat([l2l_mask, l2g_blocked], axis=-1)[:, None]  # [B, 1, nb, bl, K]

        if self.use_relative:
            long_scores = long_scores + self._long_relative_scores(
                q_blocks, l2l_relative_att_ids, l2g_relative_att_ids, global_len)
        long_scores = long_scores * inv_sqrt_d
        if prev_long_scores is not None:
            long_scores = long_scores + tf.cast(prev_long_scores, long_scores.dtype)

        probs = self._probabilities(long_scores, long_mask, training)
        context = tf.einsum("bhcqk,bckhd->bcqhd", probs, values)            # [B, nb, bl, N, D]
        context = tf.reshape(context, [batch, num_blocks * bl, self.num_heads, self.key_dim])
        # tf.split, not a slice: its gradient is a concat (fast), a slice's is not.
        context, _ = tf.split(context, [long_len, num_blocks * bl - long_len], axis=1)
        long_output = self._finish(context, "long")

        # -------------------------------------------------------------- global side
        keys = tf.concat([k_g2g, k_g2l], axis=1)                             # [B, G+L, N, D]
        values = tf.concat([v_g2g, v_g2l], axis=1)
        global_scores = tf.einsum("bqhd,bkhd->bhqk", q_global, keys)       # [B, N, G, G+L]
        if g2g_att_mask is None:
            g2g_att_mask = tf.ones([batch, global_len, global_len], tf.int32)
        elif len(g2g_att_mask.shape) == 2:
            g2g_att_mask = tf.broadcast_to(
                tf.cast(g2g_att_mask, tf.int32)[:, None, :], [batch, global_len, global_len])
        if g2l_att_mask is None:
            g2l_att_mask = tf.ones([batch, global_len, long_len], tf.int32)
        global_mask = tf.concat(
            [tf.cast(g2g_att_mask, tf.int32), tf.cast(g2l_att_mask, tf.int32)], axis=-1)[:, None]
        if self.use_relative:
            rel_all = self._relative_table_scores(q_global, "global")         # [B, G, N, R]
            if g2g_relative_att_ids is None:
                positions = tf.range(global_len)
                g2g_relative_att_ids = tf.broadcast_to(
                    tf.clip_by_value(positions[None, :] - positions[:, None], -M, M)[None] + M,
                    [batch, global_len, global_len])
            if g2l_relative_att_ids is None:
                # Padding (gradient: a slice) instead of a concat on the key axis.
                g2g = self._pick(rel_all, tf.cast(g2g_relative_att_ids, tf.int32), 2)
                g2l = tf.broadcast_to(rel_all[..., l2g_other_id(M), None],
                                      [batch, global_len, self.num_heads, long_len])
                rel = (tf.pad(g2g, [[0, 0], [0, 0], [0, 0], [0, long_len]])
                       + tf.pad(g2l, [[0, 0], [0, 0], [0, 0], [global_len, 0]]))
            else:
                ids = tf.concat([tf.cast(g2g_relative_att_ids, tf.int32),
                                 tf.cast(g2l_relative_att_ids, tf.int32)], axis=-1)
                rel = self._pick(rel_all, ids, 2)                              # [B, G, N, G+L]
            global_scores = global_scores + tf.transpose(rel, [0, 2, 1, 3])
        global_scores = global_scores * inv_sqrt_d
        if prev_global_scores is not None:
            global_scores = global_scores + tf.cast(prev_global_scores, global_scores.dtype)

        probs = self._probabilities(global_scores, global_mask, training)
        context = tf.einsum("bhqk,bkhd->bqhd", probs, values)
        global_output = self._finish(context, "global")
        return long_output, global_output, long_scores, global_scores

    def compute_output_shape(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        L, G = long_input_shape[1], global_input_shape[1]
        nb = None if L is None else num_blocks_for(L, self.block_len)
        width = None if G is None else 3 * self.block_len + G
        out_l = self.output_dim or long_input_shape[-1]
        out_g = self.output_dim or global_input_shape[-1]
        return (
            tuple(long_input_shape[:-1]) + (out_l,),
            tuple(global_input_shape[:-1]) + (out_g,),
            (long_input_shape[0], self.num_heads, nb, self.block_len, width),
            (global_input_shape[0], self.num_heads, G, None if L is None or G is None else G + L),
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            key_dim=self.key_dim,
            local_radius=self.local_radius,
            output_dim=self.output_dim,
            relative_pos_max_distance=self.relative_pos_max_distance,
            relative_vocab_size=self.relative_vocab_size if self.use_relative else None,
            share_qkv_projections=self.share_qkv_projections,
            share_kv_projections=self.share_kv_projections,
            share_att_output_projection=self.share_att_output_projection,
            dropout=self.dropout,
            use_running_mean=self.use_running_mean,
            layer_index=self.layer_index,
            use_head_scale=self.use_head_scale,
            head_scale_position=self.head_scale_position,
            relative_initializer_range=self.relative_initializer_range,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
        )
        return config


# ---------------------------------------------------------------------------- the blocks
SIDE_INPUT_NAMES = (
    "l2l_att_mask", "g2g_att_mask", "l2g_att_mask", "g2l_att_mask",
    "l2l_relative_att_ids", "g2g_relative_att_ids", "l2g_relative_att_ids", "g2l_relative_att_ids",
)


def _check_side_inputs(side_inputs):
    side_inputs = dict(side_inputs or {})
    unknown = sorted(set(side_inputs) - set(SIDE_INPUT_NAMES))
    if unknown:
        raise ValueError(f"unknown side input(s) {unknown}; known: {', '.join(SIDE_INPUT_NAMES)}")
    return side_inputs


@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcFeedForward(_BlockBase):
    """The feed-forward sublayer of `_BlockBase` (with its LayerNorm arrangement) as a
    layer of its own, so the long and global sides can have one each or share one."""

    def build(self, input_shape):
        self._build_feed_forward(input_shape)
        super().build(input_shape)

    def call(self, x, training=None):
        return self._feed_forward_sublayer(x, training)


_ETC_OPTIONS = dict(
    local_radius=84,
    relative_pos_max_distance=12,
    relative_vocab_size=32,
    share_feed_forward_params=True,
    share_kv_projections=False,
    share_qkv_projections=True,
    share_att_output_projection=False,
    relative_initializer_range=0.5,
)


@keras.saving.register_keras_serializable(package="realformer_tf")
class GlobalLocalBlock(_BlockBase):
    """ETC layer: fused global-local attention sublayer + feed-forward on both sides, in
    any `layer_norm_type` (post / pre / normformer), with or without residual attention.

    Call: `block(long_input, global_input, side_inputs=None, prev_long_scores=None,
    prev_global_scores=None, training=None)` -> `(long_output, global_output,
    long_scores, global_scores)`; `side_inputs` is a dict with any of SIDE_INPUT_NAMES.
    Each side has its own attention LayerNorm(s); the feed-forward sublayer (with its
    LayerNorms) is shared when `share_feed_forward_params` (ETC's default).
    """

    def __init__(self, num_heads, intermediate_size, local_radius=84, relative_pos_max_distance=12,
                 relative_vocab_size=32, share_feed_forward_params=True, share_kv_projections=False,
                 share_qkv_projections=True, share_att_output_projection=False,
                 relative_initializer_range=0.5, **kwargs):
        super().__init__(num_heads, intermediate_size, **kwargs)
        self.etc_options = dict(
            local_radius=int(local_radius),
            relative_pos_max_distance=int(relative_pos_max_distance),
            relative_vocab_size=None if relative_vocab_size is None else int(relative_vocab_size),
            share_feed_forward_params=bool(share_feed_forward_params),
            share_kv_projections=bool(share_kv_projections),
            share_qkv_projections=bool(share_qkv_projections),
            share_att_output_projection=bool(share_att_output_projection),
            relative_initializer_range=float(relative_initializer_range),
        )
        # Fail at construction, not at the first call.
        validate_etc_options(local_radius, relative_pos_max_distance, relative_vocab_size)

    def _attention_kwargs(self, hidden_size):
        o = self.etc_options
        return dict(
            num_heads=self.num_heads,
            key_dim=hidden_size // self.num_heads,
            local_radius=o["local_radius"],
            relative_pos_max_distance=o["relative_pos_max_distance"],
            relative_vocab_size=o["relative_vocab_size"] if o["relative_pos_max_distance"] else None,
            share_qkv_projections=o["share_qkv_projections"],
            share_kv_projections=o["share_kv_projections"],
            share_att_output_projection=o["share_att_output_projection"],
            dropout=self.attention_dropout,
            use_running_mean=self.residual_attention and self.use_running_mean,
            layer_index=self.layer_index,
            use_head_scale=self.normformer,
            head_scale_position=self.head_scale_position,
            relative_initializer_range=o["relative_initializer_range"],
            kernel_initializer=self._initializer(),
            dtype=self.dtype_policy,
        )

    def _ffn(self, name):
        return EtcFeedForward(
            num_heads=self.num_heads, intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act, hidden_dropout=self.hidden_dropout,
            attention_dropout=self.attention_dropout, layer_norm_type=self.layer_norm_type,
            residual_attention=self.residual_attention, use_residual_scale=self.use_residual_scale,
            initializer_range=self.initializer_range, layer_norm_epsilon=self.layer_norm_epsilon,
            name=name, dtype=self.dtype_policy,
        )

    def build(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        hidden_size = long_input_shape[-1]
        self._check_hidden_size(hidden_size)
        if global_input_shape[-1] != hidden_size:
            raise ValueError(
                f"long hidden size {hidden_size} != global hidden size {global_input_shape[-1]}")
        self.attention = GlobalLocalAttention(name="attention", **self._attention_kwargs(hidden_size))
        self.attention.build(long_input_shape, global_input_shape)
        self.attention_dropout_layer = self._dropout("attention_output_dropout")
        for side, shape in (("long", long_input_shape), ("global", global_input_shape)):
            norm = self._layer_norm(f"{side}_attention_layer_norm")
            norm.build(shape)
            setattr(self, f"{side}_attention_layer_norm", norm)
            if self.normformer:
                post = self._layer_norm(f"{side}_attention_post_layer_norm")
                post.build(shape)
                setattr(self, f"{side}_attention_post_layer_norm", post)
        self.long_feed_forward = self._ffn("long_feed_forward")
        self.long_feed_forward.build(long_input_shape)
        if not self.etc_options["share_feed_forward_params"]:
            self.global_feed_forward = self._ffn("global_feed_forward")
            self.global_feed_forward.build(global_input_shape)
        super().build(long_input_shape)

    def feed_forward(self, side):
        if self.etc_options["share_feed_forward_params"]:
            return self.long_feed_forward
        return getattr(self, f"{side}_feed_forward")

    def call(self, long_input, global_input, side_inputs=None, prev_long_scores=None,
             prev_global_scores=None, training=None):
        side_inputs = _check_side_inputs(side_inputs)
        post = self.layer_norm_type == "post"
        h_long = long_input if post else self.long_attention_layer_norm(long_input)
        h_global = global_input if post else self.global_attention_layer_norm(global_input)
        out_long, out_global, long_scores, global_scores = self.attention(
            h_long, h_global,
            prev_long_scores=self._prev(prev_long_scores),
            prev_global_scores=self._prev(prev_global_scores),
            training=training,
            **side_inputs,
        )
        results = []
        for side, x, out in (("long", long_input, out_long), ("global", global_input, out_global)):
            if self.normformer:
                out = getattr(self, f"{side}_attention_post_layer_norm")(out)
            x = x + self.attention_dropout_layer(out, training=training)
            if post:
                x = getattr(self, f"{side}_attention_layer_norm")(x)
            results.append(self.feed_forward(side)(x, training=training))
        return results[0], results[1], long_scores, global_scores

    def get_config(self):
        config = super().get_config()
        config.update(self.etc_options)
        return config


@keras.saving.register_keras_serializable(package="realformer_tf")
class GlobalLocalEncoder(keras.layers.Layer):
    """A stack of `GlobalLocalBlock`s threading BOTH score paths (long and global) from
    layer to layer; pre/normformer stacks end with a final LayerNorm per side.

    Call: `encoder(long_input, global_input, side_inputs=None)` -> dict with
      long_output, global_output                 [B, L, H], [B, G, H]
      long_encoder_outputs, global_encoder_outputs  lists, one per layer
      long_scores    list per layer of LONG_SCORE_LAYOUT carried scores
      global_scores  list per layer of GLOBAL_SCORE_LAYOUT carried scores
    """

    def __init__(self, num_layers, num_heads, intermediate_size, hidden_act="gelu",
                 hidden_dropout=0.1, attention_dropout=0.1, layer_norm_type="post",
                 residual_attention=True, use_running_mean=False,
                 head_scale_position="before_projection", use_residual_scale=False,
                 initializer_range=0.02, layer_norm_epsilon=1e-12, **kwargs):
        etc = {k: kwargs.pop(k, v) for k, v in _ETC_OPTIONS.items()}
        super().__init__(**kwargs)
        check_layer_norm_type(layer_norm_type)
        self.num_layers = int(num_layers)
        self.block_config = dict(
            num_heads=num_heads, intermediate_size=intermediate_size, hidden_act=hidden_act,
            hidden_dropout=hidden_dropout, attention_dropout=attention_dropout,
            layer_norm_type=layer_norm_type, residual_attention=residual_attention,
            use_running_mean=use_running_mean, head_scale_position=head_scale_position,
            use_residual_scale=use_residual_scale, initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon, **etc,
        )
        self.blocks = [
            GlobalLocalBlock(layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy, **self.block_config)
            for i in range(self.num_layers)
        ]
        self.long_final_layer_norm = self.global_final_layer_norm = None
        if layer_norm_type != "post":
            for side in ("long", "global"):
                setattr(self, f"{side}_final_layer_norm", keras.layers.LayerNormalization(
                    epsilon=layer_norm_epsilon, name=f"{side}_final_layer_norm", dtype=self.dtype_policy))

    def build(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        for block in self.blocks:
            block.build(long_input_shape, global_input_shape)
        if self.long_final_layer_norm is not None:
            self.long_final_layer_norm.build(long_input_shape)
            self.global_final_layer_norm.build(global_input_shape)
        super().build(long_input_shape)

    def call(self, long_input, global_input, side_inputs=None, training=None):
        side_inputs = _check_side_inputs(side_inputs)
        x_long, x_global = long_input, global_input
        long_outputs, global_outputs, long_scores, global_scores = [], [], [], []
        s_long = s_global = None
        for block in self.blocks:
            # A block with residual attention off ignores the previous scores.
            x_long, x_global, s_long, s_global = block(
                x_long, x_global, side_inputs=side_inputs, prev_long_scores=s_long,
                prev_global_scores=s_global, training=training)
            long_outputs.append(x_long)
            global_outputs.append(x_global)
            long_scores.append(s_long)
            global_scores.append(s_global)
        if self.long_final_layer_norm is not None:
            x_long = self.long_final_layer_norm(x_long)
            x_global = self.global_final_layer_norm(x_global)
            long_outputs[-1], global_outputs[-1] = x_long, x_global
        return {
            "long_output": x_long,
            "global_output": x_global,
            "long_encoder_outputs": long_outputs,
            "global_encoder_outputs": global_outputs,
            "long_scores": long_scores,
            "global_scores": global_scores,
        }

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.block_config)
        return config
