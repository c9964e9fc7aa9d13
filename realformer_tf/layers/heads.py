"""BERT's output heads as Keras layers. Logits are returned in float32 so losses stay
exact under mixed precision."""

import keras
from keras import ops

from realformer_tf.layers.normalization import LayerNorm

from realformer_tf.layers.activations import get_activation


def _truncated_normal(stddev):
    return keras.initializers.TruncatedNormal(stddev=stddev)


@keras.saving.register_keras_serializable(package="realformer_tf")
class MaskedLMHead(keras.layers.Layer):
    """Transform (dense + act + LayerNorm), then logits against the (tied) word
    embeddings plus `output_bias`. Call: `head(sequence_output, positions, embedding_table)`
    -> [B, P, vocab] logits at the gathered positions."""

    def __init__(self, vocab_size, hidden_act="gelu", initializer_range=0.02,
                 layer_norm_epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.hidden_act = hidden_act
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.transform_layer_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, name="transform_layer_norm", dtype=self.dtype_policy
        )

    def build(self, sequence_output_shape, positions_shape=None, embedding_table_shape=None):
        hidden = sequence_output_shape[-1]
        self.transform_dense = keras.layers.Dense(
            hidden, activation=get_activation(self.hidden_act),
            kernel_initializer=_truncated_normal(self.initializer_range),
            name="transform_dense", dtype=self.dtype_policy,
        )
        self.transform_dense.build((None, hidden))
        self.transform_layer_norm.build((None, hidden))
        # autocast=False: the bias is added to the float32 logits in float32.
        self.output_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,), initializer="zeros",
                                           autocast=False)
        super().build(sequence_output_shape)

    def call(self, sequence_output, positions, embedding_table):
        positions = ops.cast(positions, "int32")[:, :, None]
        x = ops.take_along_axis(sequence_output, positions, axis=1)  # [B, P, H]
        x = self.transform_layer_norm(self.transform_dense(x))
        logits = ops.einsum("bph,vh->bpv", x, ops.cast(embedding_table, x.dtype))
        return ops.cast(logits, "float32") + self.output_bias

    def get_config(self):
        config = super().get_config()
        config.update(vocab_size=self.vocab_size, hidden_act=self.hidden_act,
                      initializer_range=self.initializer_range,
                      layer_norm_epsilon=self.layer_norm_epsilon)
        return config


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertLogits(keras.layers.Layer):
    """`x @ output_weights^T + output_bias` with BERT's [num_outputs, hidden] weight
    layout (seq_relationship, classifier and SQuAD heads all use it)."""

    def __init__(self, num_outputs, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = int(num_outputs)
        self.initializer_range = float(initializer_range)

    def build(self, input_shape):
        self.output_weights = self.add_weight(
            name="output_weights", shape=(self.num_outputs, input_shape[-1]),
            initializer=_truncated_normal(self.initializer_range),
        )
        self.output_bias = self.add_weight(name="output_bias", shape=(self.num_outputs,), initializer="zeros",
                                           autocast=False)  # added in float32
        super().build(input_shape)

    def call(self, x):
        logits = ops.matmul(x, ops.transpose(ops.cast(self.output_weights, x.dtype)))
        return ops.cast(logits, "float32") + self.output_bias

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.num_outputs,)

    def get_config(self):
        config = super().get_config()
        config.update(num_outputs=self.num_outputs, initializer_range=self.initializer_range)
        return config


@keras.saving.register_keras_serializable(package="realformer_tf")
class SpanLogits(BertLogits):
    """The SQuAD span head: `BertLogits` with two outputs on every token, returned as
    `{"start_logits": [B, L], "end_logits": [B, L]}` (float32).

    Example:
    >>> import numpy as np
    >>> head = SpanLogits(initializer_range=0.02)
    >>> out = head(np.zeros((2, 5, 8), "float32"))
    >>> tuple(out["start_logits"].shape), tuple(out["end_logits"].shape)
    ((2, 5), (2, 5))
    """

    def __init__(self, initializer_range=0.02, **kwargs):
        kwargs.pop("num_outputs", None)  # always 2 (present in get_config)
        super().__init__(2, initializer_range=initializer_range, **kwargs)

    def call(self, x):
        logits = super().call(x)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def compute_output_shape(self, input_shape):
        return {"start_logits": tuple(input_shape[:-1]), "end_logits": tuple(input_shape[:-1])}
