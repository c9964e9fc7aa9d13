"""A stack of encoder blocks that threads RealFormer scores from layer to layer."""

import keras

from realformer_tf.layers.normalization import LayerNorm

from realformer_tf.layers.masking import keras_mask_of
from realformer_tf.layers.transformer import TransformerEncoderBlock, first_rows_spec, pop_block_options


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerEncoder(keras.layers.Layer):
    """A stack of `TransformerEncoderBlock`s that threads RealFormer scores.

    Block `l` gets `layer_index=l` and the carried scores of block `l - 1`; pre-LN and
    NormFormer stacks end with a final LayerNorm (`final_layer_norm`).

    Args:
      num_layers: number of blocks.
      num_heads, intermediate_size and the `BLOCK_OPTIONS` (hidden_act, hidden_dropout,
        attention_dropout, layer_norm_type, residual_attention, use_running_mean,
        head_scale_position, use_residual_scale, initializer_range,
        layer_norm_epsilon) and weight options (kernel_initializer, ...): as in
        `TransformerEncoderBlock`, for every block; block `l` gets `layer_index=l`.

    Call args:
      x: [batch, seq_len, hidden] float input.
      attention_mask: [batch, seq_len] or [batch, seq_len, seq_len], 1 = attend.
      mask: [batch, seq_len] Keras mask; filled in by Keras from `x` (e.g. after
        `keras.layers.Embedding(mask_zero=True)`) and combined with `attention_mask`.
      training: dropout on or off.
      output_range: the last block computes the first `output_range` positions only
        (they attend to every position): a classifier needs [CLS] alone, and skipping the
        other rows of the last block saves ~1/num_layers of the work. None: all.
      use_causal_mask: each position attends to itself and the earlier ones only (a
        decoder-only language model).
      cache: for decoding, one `{"key", "value"}` per block of the earlier positions
        (`ResidualMultiHeadAttention`); `x` is the new positions. With residual
        attention each block's score rows for the new positions go to the next block,
        so a step needs no scores of the earlier positions.
      admin_profile: an `admin.AdminProfile` (eager): Admin blocks set their residual
        scales from it, in order.

    Returns:
      A dict: `sequence_output` [batch, seq_len, hidden] (after the final LayerNorm, if
      any), `encoder_outputs` (one [batch, seq_len, hidden] per block; the last equals
      `sequence_output`) and `attention_scores` (one carried
      [batch, num_heads, seq_len, seq_len] per block). The outputs keep `x`'s Keras mask.
      With `output_range` r, the last block's entries have r positions (queries). With
      `cache`, also `cache`: the blocks' new caches.

    Example:
    >>> import keras
    >>> ids = keras.Input(shape=(None,), dtype="int32")
    >>> x = keras.layers.Embedding(100, 16, mask_zero=True)(ids)
    >>> out = TransformerEncoder(num_layers=2, num_heads=2, intermediate_size=32)(x)
    >>> model = keras.Model(ids, out["sequence_output"])
    >>> tuple(model(keras.ops.ones((2, 5), "int32")).shape)
    (2, 5, 16)
    """

    def __init__(self, num_layers, num_heads, intermediate_size, **kwargs):
        # `kwargs`: the blocks' BLOCK_OPTIONS and weights.NAMES options, then Layer's own.
        options, weight_options = pop_block_options(kwargs)
        super().__init__(**kwargs)
        self.supports_masking = True
        self.num_layers = int(num_layers)
        self.block_config = dict(num_heads=num_heads, intermediate_size=intermediate_size, **options,
                                 **weight_options.get_config())
        self.blocks = [
            TransformerEncoderBlock(
                layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy, **self.block_config
            )
            for i in range(self.num_layers)
        ]
        self.final_layer_norm = None
        if options["layer_norm_type"] != "post":
            self.final_layer_norm = LayerNorm(
                epsilon=options["layer_norm_epsilon"], name="final_layer_norm", dtype=self.dtype_policy
            )

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(input_shape)
        super().build(input_shape)

    def call(self, x, attention_mask=None, training=None, mask=None, output_range=None, use_causal_mask=False,
             cache=None, admin_profile=None):
        mask = keras_mask_of(x) if mask is None else mask
        encoder_outputs, attention_scores, new_cache = [], [], []
        scores = None
        for i, block in enumerate(self.blocks):
            # A block with residual attention off ignores `prev_scores`.
            out = block(
                x, attention_mask=attention_mask, prev_scores=scores, training=training,
                mask=mask, output_range=output_range if i == self.num_layers - 1 else None,
                use_causal_mask=use_causal_mask, cache=None if cache is None else cache[i],
                admin_profile=admin_profile,
            )
            x, scores = out[:2]
            new_cache.extend(out[2:])
            encoder_outputs.append(x)
            attention_scores.append(scores)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
            encoder_outputs[-1] = x
        outputs = {
            "sequence_output": x,
            "encoder_outputs": encoder_outputs,
            "attention_scores": attention_scores,
        }
        return outputs if cache is None else dict(outputs, cache=new_cache)

    def compute_output_spec(self, x, *args, output_range=None, **kwargs):
        spec = super().compute_output_spec(x, *args, **kwargs)
        if output_range is None:
            return spec
        last = first_rows_spec(spec["sequence_output"], 1, output_range)
        scores = spec["attention_scores"]
        return dict(spec, sequence_output=last, encoder_outputs=spec["encoder_outputs"][:-1] + [last],
                    attention_scores=scores[:-1] + [first_rows_spec(scores[-1], 2, output_range)])

    def compute_mask(self, x, previous_mask=None):
        """Outputs keep the input's Keras mask; the scores carry none."""
        return {
            "sequence_output": previous_mask,
            "encoder_outputs": [previous_mask] * self.num_layers,
            "attention_scores": [None] * self.num_layers,
        }

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.block_config)
        return config
