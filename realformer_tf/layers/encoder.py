"""A stack of encoder blocks that threads RealFormer scores from layer to layer."""

import keras

from realformer_tf.layers.normalization import LayerNorm

from realformer_tf.layers.transformer import TransformerEncoderBlock, check_layer_norm_type


@keras.saving.register_keras_serializable(package="realformer_tf")
class TransformerEncoder(keras.layers.Layer):
    """N `TransformerEncoderBlock`s; pre/normformer stacks end with a final LayerNorm.

    Call: `encoder(x, attention_mask)` -> dict with
      sequence_output   [B, L, H]  the stack's output (after the final LN, if any)
      encoder_outputs   list of [B, L, H], one per block (the last equals sequence_output)
      attention_scores  list of [B, heads, L, L], each block's carried scores
    """

    def __init__(
        self,
        num_layers,
        num_heads,
        intermediate_size,
        hidden_act="gelu",
        hidden_dropout=0.1,
        attention_dropout=0.1,
        layer_norm_type="post",
        residual_attention=True,
        use_running_mean=False,
        head_scale_position="before_projection",
        use_residual_scale=False,
        initializer_range=0.02,
        layer_norm_epsilon=1e-12,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_layer_norm_type(layer_norm_type)
        self.num_layers = int(num_layers)
        self.block_config = dict(
            num_heads=num_heads,
            intermediate_size=intermediate_size,
            hidden_act=hidden_act,
            hidden_dropout=hidden_dropout,
            attention_dropout=attention_dropout,
            layer_norm_type=layer_norm_type,
            residual_attention=residual_attention,
            use_running_mean=use_running_mean,
            head_scale_position=head_scale_position,
            use_residual_scale=use_residual_scale,
            initializer_range=initializer_range,
            layer_norm_epsilon=layer_norm_epsilon,
        )
        self.blocks = [
            TransformerEncoderBlock(
                layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy, **self.block_config
            )
            for i in range(self.num_layers)
        ]
        self.final_layer_norm = None
        if layer_norm_type != "post":
            self.final_layer_norm = LayerNorm(
                epsilon=layer_norm_epsilon, name="final_layer_norm", dtype=self.dtype_policy
            )

    def build(self, input_shape):
        for block in self.blocks:
            block.build(input_shape)
        if self.final_layer_norm is not None:
            self.final_layer_norm.build(input_shape)
        super().build(input_shape)

    def call(self, x, attention_mask=None, training=None):
        encoder_outputs, attention_scores = [], []
        scores = None
        for block in self.blocks:
            # A block with residual attention off ignores `prev_scores`.
            x, scores = block(x, attention_mask=attention_mask, prev_scores=scores, training=training)
            encoder_outputs.append(x)
            attention_scores.append(scores)
        if self.final_layer_norm is not None:
            x = self.final_layer_norm(x)
            encoder_outputs[-1] = x
        return {
            "sequence_output": x,
            "encoder_outputs": encoder_outputs,
            "attention_scores": attention_scores,
        }

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.block_config)
        return config
