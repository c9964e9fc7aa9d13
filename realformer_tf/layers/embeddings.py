"""BERT's input embeddings: word + token type + position, then LayerNorm and dropout."""

import keras

from realformer_tf.layers.normalization import LayerNorm
import tensorflow as tf


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertEmbeddings(keras.layers.Layer):
    """Call: `embeddings(input_ids, segment_ids)` -> [B, L, hidden]."""

    def __init__(
        self,
        vocab_size,
        hidden_size,
        max_position_embeddings=512,
        type_vocab_size=2,
        hidden_dropout=0.1,
        initializer_range=0.02,
        layer_norm_epsilon=1e-12,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.max_position_embeddings = int(max_position_embeddings)
        self.type_vocab_size = int(type_vocab_size)
        self.hidden_dropout = float(hidden_dropout)
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.layer_norm = LayerNorm(
            epsilon=self.layer_norm_epsilon, name="layer_norm", dtype=self.dtype_policy
        )
        self.dropout = keras.layers.Dropout(self.hidden_dropout, dtype=self.dtype_policy)

    def build(self, input_shape=None):
        init = lambda: keras.initializers.TruncatedNormal(stddev=self.initializer_range)  # noqa: E731
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.hidden_size), initializer=init()
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings",
            shape=(self.type_vocab_size, self.hidden_size),
            initializer=init(),
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_position_embeddings, self.hidden_size),
            initializer=init(),
        )
        self.layer_norm.build((None, None, self.hidden_size))
        super().build(input_shape)

    def call(self, input_ids, segment_ids=None, training=None):
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        seq_len = tf.shape(input_ids)[1]
        x = tf.gather(self.word_embeddings, input_ids)
        x += tf.gather(self.token_type_embeddings, segment_ids)
        x += self.position_embeddings[None, :seq_len, :]
        x = self.layer_norm(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape, segment_ids_shape=None):
        return tuple(input_shape) + (self.hidden_size,)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            hidden_size=self.hidden_size,
            max_position_embeddings=self.max_position_embeddings,
            type_vocab_size=self.type_vocab_size,
            hidden_dropout=self.hidden_dropout,
            initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config
