"""ETC blocks and the encoder stack: attention sublayer + feed-forward on both sides.

A `GlobalLocalBlock` is one ETC layer: `GlobalLocalAttention` over the long and global
sequences, each side with its own residual connection and LayerNorm(s) in the chosen
`layer_norm_type` (post / pre / normformer), then a feed-forward sublayer per side
(shared between the sides by default, as in ETC). `GlobalLocalEncoder` stacks blocks
and threads BOTH RealFormer score paths (long and global) from layer to layer.
"""

import keras

from realformer_tf.layers.etc.attention import GlobalLocalAttention
from realformer_tf.layers.etc.relative import validate_etc_options
from realformer_tf.layers.transformer import _BlockBase, pop_block_options

# The options of a GlobalLocalBlock beyond the transformer block's (BLOCK_OPTIONS), with
# ETC's defaults; GlobalLocalEncoder hands them to every block.
ETC_BLOCK_OPTIONS = dict(
    local_radius=84, relative_pos_max_distance=12, relative_vocab_size=32,
    share_feed_forward_params=True, share_kv_projections=False, share_qkv_projections=True,
    share_att_output_projection=False, relative_initializer_range=0.5,
)

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
    """The feed-forward sublayer of a transformer block as a layer of its own, so the
    long and global sides of a `GlobalLocalBlock` can have one each or share one.

    It includes its residual connection and LayerNorm(s) in the block's arrangement:
    post `LN(x + FFN(x))`, pre `x + FFN(LN(x))`, normformer
    `r * x + W2 LN(act(W1 LN(x)))`.

    Args:
      num_heads: unused by the feed-forward itself; kept so the block's options can be
        passed through unchanged.
      intermediate_size: width of the inner layer.
      hidden_act, hidden_dropout, layer_norm_type, use_residual_scale,
        initializer_range, layer_norm_epsilon, kernel_initializer, bias_initializer,
        kernel_regularizer, bias_regularizer, kernel_constraint, bias_constraint: as in
        `GlobalLocalBlock`.

    Call args:
      x: [batch, length, hidden] float input.
      training: dropout on or off.

    Returns:
      [batch, length, hidden].

    Example:
    >>> import numpy as np
    >>> ffn = EtcFeedForward(num_heads=2, intermediate_size=32)
    >>> tuple(ffn(np.ones((2, 7, 16), "float32")).shape)
    (2, 7, 16)
    """

    def build(self, input_shape):
        self._build_feed_forward(input_shape)
        super().build(input_shape)

    def call(self, x, training=None):
        return self._feed_forward_sublayer(x, training)


@keras.saving.register_keras_serializable(package="realformer_tf")
class GlobalLocalBlock(_BlockBase):
    """One ETC layer: fused global-local attention + feed-forward on both sides.

    Each side (long, global) has its own residual connection and attention
    LayerNorm(s) in the chosen `layer_norm_type`; the feed-forward sublayer (with its
    LayerNorms) is shared between the sides when `share_feed_forward_params` (ETC's
    default). With `residual_attention`, the block adds `prev_long_scores` /
    `prev_global_scores` (RealFormer) to its own scores.

    Args:
      num_heads: attention heads; must divide the hidden size.
      intermediate_size: width of the feed-forward layer.
      local_radius: tokens to the left/right a long token attends to (ETC: 84).
      relative_pos_max_distance: M of the relative ids; 0 turns relative attention off.
      relative_vocab_size: rows of the relative tables (>= 2M + 4; ETC: 32).
      share_feed_forward_params: one feed-forward sublayer for both sides.
      share_kv_projections, share_qkv_projections, share_att_output_projection: see
        `GlobalLocalAttention`.
      relative_initializer_range: stddev of the relative tables' initializer.
      hidden_act: feed-forward activation by BERT config name ("gelu", "relu", ...).
      hidden_dropout: dropout on each sublayer's output.
      attention_dropout: dropout on the attention probabilities.
      layer_norm_type: "post" (BERT/ETC), "pre" or "normformer".
      residual_attention: RealFormer's residual attention (False: vanilla ETC; the
        block still returns its own scores).
      use_running_mean, layer_index: the softmax sees the carried sum divided by
        `layer_index + 1`.
      head_scale_position: NormFormer head scale "before_projection" or
        "after_projection".
      use_residual_scale: NormFormer's learned scale on the FFN residual.
      initializer_range: stddev of the default TruncatedNormal kernel initializer.
      layer_norm_epsilon: LayerNorm epsilon.
      kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: for every projection (as in
        `keras.layers.Dense`); `kernel_initializer=None` means
        TruncatedNormal(initializer_range).

    Call args:
      long_input: [batch, long_len, hidden].
      global_input: [batch, global_len, hidden].
      side_inputs: dict with any of `SIDE_INPUT_NAMES` (masks and relative ids, shapes
        as in `GlobalLocalAttention`), or None.
      prev_long_scores, prev_global_scores: carried scores of the previous block, in
        `LONG_SCORE_LAYOUT` / `GLOBAL_SCORE_LAYOUT`, or None.
      training: dropout on or off.

    Returns:
      `(long_output [batch, long_len, hidden], global_output [batch, global_len,
      hidden], long_scores, global_scores)`.

    Example:
    >>> import numpy as np
    >>> block = GlobalLocalBlock(num_heads=2, intermediate_size=32, local_radius=3,
    ...                          relative_pos_max_distance=2, relative_vocab_size=8)
    >>> long_out, global_out, long_scores, global_scores = block(
    ...     np.ones((2, 10, 16), "float32"), np.ones((2, 3, 16), "float32"))
    >>> tuple(long_out.shape), tuple(long_scores.shape), tuple(global_scores.shape)
    ((2, 10, 16), (2, 2, 3, 4, 15), (2, 2, 3, 13))
    """

    def __init__(self, num_heads, intermediate_size, **kwargs):
        # `kwargs`: ETC_BLOCK_OPTIONS, then _BlockBase's (BLOCK_OPTIONS, weights, Layer's).
        o = {name: kwargs.pop(name, default) for name, default in ETC_BLOCK_OPTIONS.items()}
        super().__init__(num_heads, intermediate_size, **kwargs)
        self.etc_options = dict(
            local_radius=int(o["local_radius"]),
            relative_pos_max_distance=int(o["relative_pos_max_distance"]),
            relative_vocab_size=None if o["relative_vocab_size"] is None else int(o["relative_vocab_size"]),
            share_feed_forward_params=bool(o["share_feed_forward_params"]),
            share_kv_projections=bool(o["share_kv_projections"]),
            share_qkv_projections=bool(o["share_qkv_projections"]),
            share_att_output_projection=bool(o["share_att_output_projection"]),
            relative_initializer_range=float(o["relative_initializer_range"]),
        )
        # Fail at construction, not at the first call.
        validate_etc_options(o["local_radius"], o["relative_pos_max_distance"], o["relative_vocab_size"])

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
            use_head_scale=self.scales_heads,
            head_scale_position=self.head_scale_position,
            relative_initializer_range=o["relative_initializer_range"],
            dtype=self.dtype_policy,
            **self.weight_options.layer_kwargs(),
        )

    def _ffn(self, name):
        return EtcFeedForward(
            num_heads=self.num_heads, intermediate_size=self.intermediate_size, **self.options,
            name=name, dtype=self.dtype_policy, **self.weight_options.get_config(),
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
            if self.post_attention_norm:
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
            if self.post_attention_norm:
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
    """A stack of `GlobalLocalBlock`s threading BOTH RealFormer score paths.

    Block `l` gets `layer_index=l` and the carried long and global scores of block
    `l - 1` (each side has its own path); pre-LN and NormFormer stacks end with a final
    LayerNorm per side (`long_final_layer_norm`, `global_final_layer_norm`).

    Args:
      num_layers: number of blocks.
      num_heads, intermediate_size, hidden_act, hidden_dropout, attention_dropout,
        layer_norm_type, residual_attention, use_running_mean, head_scale_position,
        use_residual_scale, initializer_range, layer_norm_epsilon: as in
        `GlobalLocalBlock`, for every block.
      local_radius, relative_pos_max_distance, relative_vocab_size,
        share_feed_forward_params, share_kv_projections, share_qkv_projections,
        share_att_output_projection, relative_initializer_range: the ETC options of
        every block (defaults: ETC's, local_radius 84, M 12, 32 relative ids).
      kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: for every projection (as in
        `keras.layers.Dense`); `kernel_initializer=None` means
        TruncatedNormal(initializer_range).

    Call args:
      long_input: [batch, long_len, hidden].
      global_input: [batch, global_len, hidden].
      side_inputs: dict with any of `SIDE_INPUT_NAMES` (masks and relative ids, shapes
        as in `GlobalLocalAttention`), shared by all blocks, or None.
      training: dropout on or off.

    Returns:
      A dict: `long_output` [batch, long_len, hidden] and `global_output`
      [batch, global_len, hidden] (after the final LayerNorms, if any);
      `long_encoder_outputs` / `global_encoder_outputs` (one per block); `long_scores`
      (one carried `LONG_SCORE_LAYOUT` tensor per block) and `global_scores` (one
      `GLOBAL_SCORE_LAYOUT` tensor per block).

    Example:
    >>> import numpy as np
    >>> encoder = GlobalLocalEncoder(num_layers=2, num_heads=2, intermediate_size=32,
    ...                              local_radius=3, relative_pos_max_distance=2,
    ...                              relative_vocab_size=8)
    >>> long_mask = np.array([[1] * 10, [1] * 6 + [0] * 4], "int32")   # padding
    >>> out = encoder(np.ones((2, 10, 16), "float32"), np.ones((2, 3, 16), "float32"),
    ...               side_inputs={"l2l_att_mask": long_mask})
    >>> tuple(out["long_output"].shape), len(out["long_scores"])
    ((2, 10, 16), 2)
    """

    def __init__(self, num_layers, num_heads, intermediate_size, **kwargs):
        # `kwargs`: the blocks' BLOCK_OPTIONS, ETC_BLOCK_OPTIONS and weights.NAMES
        # options, then Layer's own.
        etc_options = {name: kwargs.pop(name, default) for name, default in ETC_BLOCK_OPTIONS.items()}
        options, weight_options = pop_block_options(kwargs)
        super().__init__(**kwargs)
        self.num_layers = int(num_layers)
        self.block_config = dict(num_heads=num_heads, intermediate_size=intermediate_size, **options,
                                 **etc_options, **weight_options.get_config())
        self.blocks = [
            GlobalLocalBlock(layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy, **self.block_config)
            for i in range(self.num_layers)
        ]
        self.long_final_layer_norm = self.global_final_layer_norm = None
        if options["layer_norm_type"] != "post":
            for side in ("long", "global"):
                setattr(self, f"{side}_final_layer_norm", keras.layers.LayerNormalization(
                    epsilon=options["layer_norm_epsilon"], name=f"{side}_final_layer_norm", dtype=self.dtype_policy))

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
