"""ETC fused global-local attention (Ainslie et al. 2020) with RealFormer residual scores.

Two inputs: a long sequence [B, L, H] and a short global sequence [B, G, H]. Four
attention pieces, fused into two softmaxes (as in ETC's `FusedGlobalLocalAttention`):

  long side    each long token attends to its local window (|i - j| <= local_radius)
               AND to all global tokens: ONE softmax over [local window (+) global]
  global side  each global token attends to all global AND all long tokens: ONE softmax

The long side is computed in the blocked layout of `blocked` (linear in L), the global
side densely (G is small). Relative position scores (`relative`) are added to q.k
before the 1/sqrt(head_dim) scale.

Residual attention (RealFormer's score-threading, one path per side): the layer takes
`prev_long_scores` / `prev_global_scores` and returns `(long_output, global_output,
long_scores, global_scores)`, each scores tensor the running sum of the scaled PRE-MASK
fused logits, in `blocked.LONG_SCORE_LAYOUT` / `blocked.GLOBAL_SCORE_LAYOUT`. With the
running-mean option the softmax sees `scores / (layer_index + 1)`, then the mask.
"""

import keras
from keras import ops

from realformer_tf.layers import scores as score_math
from realformer_tf.layers.attention import HEAD_SCALE_POSITIONS
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.etc import blocked, relative
from realformer_tf.layers.weights import WeightOptions

# The ten projection "pieces": the query of each side, and key/value of each of the four
# attention types. Sharing options map several pieces onto one Dense layer.
PIECES = ("long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
          "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value")
# Pieces computed from the long input (the rest read the global input).
_READS_LONG = ("long_query", "l2l_key", "l2l_value", "g2l_key", "g2l_value")
_KV_SHARED = {"l2g_key": "l2l_key", "l2g_value": "l2l_value",
              "g2l_key": "g2g_key", "g2l_value": "g2g_value"}


@keras.saving.register_keras_serializable(package="realformer_tf")
class GlobalLocalAttention(keras.layers.Layer):
    """ETC fused global-local attention that threads RealFormer scores per side.

    The long side (each long token over its local window and all global tokens) and
    the global side (each global token over all global and all long tokens) each take
    ONE softmax; the long side is computed block by block (`blocked`), so time and
    memory grow linearly with the long length. Masks are 0/1 (1 = attend); a missing
    mask allows everything except what the geometry rules out (out-of-window and
    padded positions are always masked). Mask bias and softmax run in float32 under
    mixed precision (`realformer_tf.layers.scores`).

    The layer returns its carried scores next to its outputs (a RealFormer
    `(output, scores)` layer): the next layer's `prev_long_scores` /
    `prev_global_scores`.

    Args:
      num_heads: number of attention heads.
      key_dim: size of each head (queries, keys and values); usually hidden / heads.
      local_radius: tokens to the left/right a long token attends to (>= 1); the block
        length is `local_radius + 1`.
      output_dim: size of the output projections; defaults to each input's last dim.
      relative_pos_max_distance: M of the relative ids (`relative`); 0 turns relative
        attention off.
      relative_vocab_size: rows of the relative tables; default 2M + 4 (the minimum).
      share_qkv_projections: one query/key/value projection for all four pieces (ETC's
        default); else long and global sides have their own.
      share_kv_projections: (without share_qkv) the long side's key/value projection is
        shared between l2l and l2g, the global side's between g2g and g2l.
      share_att_output_projection: one output projection for both sides.
      dropout: dropout rate on the attention probabilities.
      use_running_mean, layer_index: RealFormer's running mean: the softmax sees the
        carried sum divided by `layer_index + 1`.
      use_head_scale, head_scale_position: NormFormer's learned per-head scale (one per
        side), "before_projection" or "after_projection".
      relative_initializer_range: stddev of the relative tables (ETC uses 0.5).
      kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: for every projection (as in
        `keras.layers.Dense`).

    Call args:
      long_input: [batch, long_len, hidden].
      global_input: [batch, global_len, hidden].
      l2l_att_mask: [batch, long_len] key padding, or ETC's local layout
        [batch, long_len, 2 * local_radius + 1] (entry m of token i is token
        i - local_radius + m), or None.
      g2g_att_mask: [batch, global_len, global_len] or [batch, global_len] key padding.
      l2g_att_mask: [batch, long_len, global_len].
      g2l_att_mask: [batch, global_len, long_len].
      l2l_relative_att_ids: local layout [batch, long_len, 2 * local_radius + 1];
        default: clipped positions.
      g2g_relative_att_ids: [batch, global_len, global_len]; default: clipped positions.
      l2g_relative_att_ids: [batch, long_len, global_len]; default: 2M + 1.
      g2l_relative_att_ids: [batch, global_len, long_len]; default: 2M + 1.
      prev_long_scores: carried long scores in `LONG_SCORE_LAYOUT`, or None.
      prev_global_scores: carried global scores in `GLOBAL_SCORE_LAYOUT`, or None.
      training: dropout on or off.

    Returns:
      `(long_output [batch, long_len, output_dim], global_output [batch, global_len,
      output_dim], long_scores [batch, heads, num_blocks, block_len, 3 * block_len +
      global_len], global_scores [batch, heads, global_len, global_len + long_len])`.

    Example:
    >>> import numpy as np
    >>> layer = GlobalLocalAttention(num_heads=2, key_dim=8, local_radius=3,
    ...                              relative_pos_max_distance=2)
    >>> long_mask = np.array([[1] * 10, [1] * 6 + [0] * 4], "int32")   # padding
    >>> long_out, global_out, long_scores, global_scores = layer(
    ...     np.ones((2, 10, 16), "float32"), np.ones((2, 3, 16), "float32"),
    ...     l2l_att_mask=long_mask)
    >>> tuple(long_out.shape), tuple(global_out.shape)
    ((2, 10, 16), (2, 3, 16))
    >>> tuple(long_scores.shape), tuple(global_scores.shape)   # 10 tokens: 3 blocks of 4
    ((2, 2, 3, 4, 15), (2, 2, 3, 13))
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
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        relative.validate_etc_options(local_radius, relative_pos_max_distance, relative_vocab_size)
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
        self.use_relative = self.relative_pos_max_distance > 0
        if relative_vocab_size is None:
            relative_vocab_size = relative.relative_vocab_size_needed(self.relative_pos_max_distance)
        self.relative_vocab_size = int(relative_vocab_size) if self.use_relative else 0
        self.share_qkv_projections = bool(share_qkv_projections)
        self.share_kv_projections = bool(share_kv_projections)
        self.share_att_output_projection = bool(share_att_output_projection)
        self.dropout = float(dropout)
        self.use_running_mean = bool(use_running_mean)
        self.layer_index = int(layer_index)
        self.use_head_scale = bool(use_head_scale)
        self.head_scale_position = head_scale_position
        self.relative_initializer_range = float(relative_initializer_range)
        self.weight_options = WeightOptions(
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint,
        )
        self.probability_dropout = Dropout(self.dropout, dtype=self.dtype_policy)
        self._create_projections()

    # -- projections --------------------------------------------------------------------
    def _dense(self, name, units=None):
        # Fresh initializer objects per projection: a seeded initializer shared by two
        # layers would give them the same kernel.
        return keras.layers.Dense(
            units or self.num_heads * self.key_dim, name=name, dtype=self.dtype_policy,
            **self.weight_options.layer_kwargs(),
        )

    def _create_projections(self):
        """Only distinct projections become attributes (their names are the checkpoint
        names); `_projection(piece)` routes each piece to its layer."""
        self.long_query = self._dense("long_query")
        self.l2l_key = self._dense("l2l_key")
        self.l2l_value = self._dense("l2l_value")
        if not (self.share_qkv_projections or self.share_kv_projections):
            self.l2g_key = self._dense("l2g_key")
            self.l2g_value = self._dense("l2g_value")
        if not self.share_qkv_projections:
            self.global_query = self._dense("global_query")
            self.g2g_key = self._dense("g2g_key")
            self.g2g_value = self._dense("g2g_value")
            if not self.share_kv_projections:
                self.g2l_key = self._dense("g2l_key")
                self.g2l_value = self._dense("g2l_value")

    def _projection(self, piece):
        """piece (one of PIECES) -> the (possibly shared) Dense layer."""
        if self.share_qkv_projections:
            kind = piece.split("_")[1]
            return {"query": self.long_query, "key": self.l2l_key, "value": self.l2l_value}[kind]
        if self.share_kv_projections:
            piece = _KV_SHARED.get(piece, piece)
        return getattr(self, piece)

    def _distinct_projections(self):
        seen, out = set(), []
        for piece in PIECES:
            layer = self._projection(piece)
            if id(layer) not in seen:
                seen.add(id(layer))
                out.append((piece, layer))
        return out

    def _output_projection(self, side):
        if self.share_att_output_projection:
            return self.long_output
        return self.long_output if side == "long" else self.global_output

    # -- build --------------------------------------------------------------------------
    def build(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        long_hidden, global_hidden = long_input_shape[-1], global_input_shape[-1]
        shared = self.share_qkv_projections or self.share_att_output_projection or self.share_kv_projections
        if shared and long_hidden != global_hidden:
            raise ValueError(
                f"long hidden size {long_hidden} != global hidden size {global_hidden}; sharing "
                "projections between the sides needs equal sizes"
            )
        for piece, layer in self._distinct_projections():
            layer.build(long_input_shape if piece in _READS_LONG else global_input_shape)
        width = self.num_heads * self.key_dim
        self.long_output = self._dense("long_output", self.output_dim or long_hidden)
        self.long_output.build((None, None, width))
        if not self.share_att_output_projection:
            self.global_output = self._dense("global_output", self.output_dim or global_hidden)
            self.global_output.build((None, None, width))
        if self.use_relative:
            self._build_relative_tables()
        if self.use_head_scale:
            self._build_head_scales(self.output_dim or long_hidden)
        super().build(long_input_shape)

    def _build_relative_tables(self):
        init = keras.initializers.TruncatedNormal(stddev=self.relative_initializer_range)
        for side in ("long", "global"):
            setattr(self, f"{side}_relative_embeddings", self.add_weight(
                name=f"{side}_relative_embeddings",
                shape=(self.relative_vocab_size, self.num_heads, self.key_dim), initializer=init,
            ))
            setattr(self, f"{side}_relative_bias", self.add_weight(
                name=f"{side}_relative_bias",
                shape=(self.relative_vocab_size, self.num_heads), initializer="zeros",
            ))

    def _build_head_scales(self, out_dim):
        if self.head_scale_position == "after_projection" and out_dim % self.num_heads:
            raise ValueError(
                f"head_scale_position='after_projection' splits the output ({out_dim}) into "
                f"{self.num_heads} equal chunks; it must divide evenly"
            )
        for side in ("long", "global"):
            setattr(self, f"{side}_head_scale", self.add_weight(
                name=f"{side}_head_scale", shape=(self.num_heads,), initializer="ones"))

    # -- call steps -----------------------------------------------------------------------
    def _project(self, long_input, global_input):
        """All ten pieces as [B, T, N, D]; a shared layer applied to the same input is
        computed once."""
        cache, heads = {}, {}
        for piece in PIECES:
            layer = self._projection(piece)
            x = long_input if piece in _READS_LONG else global_input
            key = (id(layer), id(x))
            if key not in cache:
                cache[key] = score_math.split_heads(layer(x), self.num_heads, self.key_dim)
            heads[piece] = cache[key]
        return heads

    def _scale(self, scores, prev_scores):
        """1/sqrt(head_dim) after the relative scores (ETC's order), then the carried sum."""
        scores = scores * ops.cast(self.key_dim**-0.5, scores.dtype)
        if prev_scores is not None:
            scores = scores + ops.cast(prev_scores, scores.dtype)
        return scores

    def _long_side_scores(self, heads, l2l_ids, l2g_ids, prev_scores):
        """[B, N, nb, bl, 3bl+G] carried long-side scores. One score tensor per query
        block over [prev | cur | next block | globals]: no concatenation of float tensors
        on inner axes (slow gradients on CPU)."""
        q_blocks = blocked.split_into_blocks(heads["long_query"], self.block_len)  # [B, nb, bl, N, D]
        keys = blocked.blocked_keys_with_globals(heads["l2l_key"], heads["l2g_key"], self.block_len)
        scores = ops.einsum("bcqhd,bckhd->bhcqk", q_blocks, keys)
        if self.use_relative:
            rel_all = relative.relative_table_scores(
                q_blocks, self.long_relative_embeddings, self.long_relative_bias)
            scores = scores + relative.long_relative_scores(
                rel_all, l2l_ids, l2g_ids, self.block_len, self.relative_pos_max_distance,
                ops.shape(heads["l2g_key"])[1])
        return self._scale(scores, prev_scores)

    def _global_side_scores(self, heads, g2g_ids, g2l_ids, prev_scores):
        """[B, N, G, G+L] carried global-side scores (keys: global, then long)."""
        keys = ops.concatenate([heads["g2g_key"], heads["g2l_key"]], axis=1)       # [B, G+L, N, D]
        scores = ops.einsum("bqhd,bkhd->bhqk", heads["global_query"], keys)
        if self.use_relative:
            rel_all = relative.relative_table_scores(
                heads["global_query"], self.global_relative_embeddings, self.global_relative_bias)
            scores = scores + relative.global_relative_scores(
                rel_all, g2g_ids, g2l_ids, self.relative_pos_max_distance,
                ops.shape(heads["g2l_key"])[1])
        return self._scale(scores, prev_scores)

    def _probabilities(self, scores, mask, training):
        """Carried scores -> dropped-out probabilities in the values' dtype. The shared
        score math adds the mask bias and takes the softmax in float32 under mixed
        precision (a -10000 bias in bfloat16 would swamp the logits)."""
        probs = score_math.attention_probabilities(
            scores, mask, layer_index=self.layer_index, use_running_mean=self.use_running_mean)
        return self.probability_dropout(ops.cast(probs, scores.dtype), training=training)

    def _long_context(self, probs, heads):
        """[B, N, nb, bl, 3bl+G] probabilities -> [B, L, N, D] context."""
        values = blocked.blocked_keys_with_globals(heads["l2l_value"], heads["l2g_value"], self.block_len)
        context = ops.einsum("bhcqk,bckhd->bcqhd", probs, values)             # [B, nb, bl, N, D]
        return blocked.merge_blocks(context, ops.shape(heads["l2l_value"])[1])

    def _global_context(self, probs, heads):
        """[B, N, G, G+L] probabilities -> [B, G, N, D] context."""
        values = ops.concatenate([heads["g2g_value"], heads["g2l_value"]], axis=1)
        return score_math.context(probs, values)

    def _output(self, context, side, training):
        """[B, T, N, D] context -> output projection (+ NormFormer head scale, folded
        into the projection only in training: layers/folding.py)."""
        context = score_math.merge_heads(context)
        scale = getattr(self, f"{side}_head_scale", None) if self.use_head_scale else None
        return score_math.project_heads(self._output_projection(side), context, scale,
                                        self.head_scale_position, fold=bool(training))

    def _global_side_mask(self, g2g_att_mask, g2l_att_mask, batch, global_len, long_len):
        """0/1 mask [B, 1, G, G+L] of the fused global-side scores."""
        if g2g_att_mask is None:
            g2g_att_mask = ops.ones((batch, global_len, global_len), "int32")
        elif len(g2g_att_mask.shape) == 2:  # [B, G] key padding
            g2g_att_mask = ops.broadcast_to(
                ops.cast(g2g_att_mask, "int32")[:, None, :], (batch, global_len, global_len))
        if g2l_att_mask is None:
            g2l_att_mask = ops.ones((batch, global_len, long_len), "int32")
        return ops.concatenate([ops.cast(g2g_att_mask, "int32"), ops.cast(g2l_att_mask, "int32")],
                               axis=-1)[:, None]

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
        batch, long_len = ops.shape(long_input)[:2]
        global_len = ops.shape(global_input)[1]
        heads = self._project(long_input, global_input)

        long_scores = self._long_side_scores(
            heads, l2l_relative_att_ids, l2g_relative_att_ids, prev_long_scores)
        long_mask = blocked.blocked_long_mask(
            l2l_att_mask, l2g_att_mask, batch, long_len, global_len, self.block_len)
        long_probs = self._probabilities(long_scores, long_mask, training)
        long_output = self._output(self._long_context(long_probs, heads), "long", training)

        global_scores = self._global_side_scores(
            heads, g2g_relative_att_ids, g2l_relative_att_ids, prev_global_scores)
        global_mask = self._global_side_mask(g2g_att_mask, g2l_att_mask, batch, global_len, long_len)
        global_probs = self._probabilities(global_scores, global_mask, training)
        global_output = self._output(self._global_context(global_probs, heads), "global", training)
        return long_output, global_output, long_scores, global_scores

    def compute_output_shape(self, long_input_shape, global_input_shape=None):
        global_input_shape = long_input_shape if global_input_shape is None else global_input_shape
        L, G = long_input_shape[1], global_input_shape[1]
        nb = None if L is None else blocked.num_blocks_for(L, self.block_len)
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
            **self.weight_options.get_config(),
        )
        return config
