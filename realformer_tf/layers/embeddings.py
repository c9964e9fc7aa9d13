"""BERT's input embeddings: word + token type + position, then LayerNorm and dropout."""

import keras
from keras import ops
from keras.src.backend.common.symbolic_scope import in_symbolic_scope  # no public getter

from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.normalization import LayerNorm


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertEmbeddings(keras.layers.Layer):
    """BERT's input embeddings: word + token type + position, LayerNorm, dropout.

    Weight names are the original BERT ones (`word_embeddings`,
    `token_type_embeddings`, `position_embeddings`, `layer_norm`).

    Args:
      vocab_size: rows of the word embedding table.
      hidden_size: embedding width.
      max_position_embeddings: rows of the position table: the longest sequence.
      type_vocab_size: number of segment (token type) ids.
      hidden_dropout: dropout on the output.
      initializer_range: stddev of the TruncatedNormal table initializer.
      layer_norm_epsilon: LayerNorm epsilon (1e-12 as BERT).

    Call args:
      input_ids: [batch, seq_len] int token ids, seq_len <= max_position_embeddings.
      segment_ids: [batch, seq_len] int segment ids; default all zeros.
      training: dropout on or off.

    Returns:
      [batch, seq_len, hidden_size].

    Example:
    >>> import numpy as np
    >>> emb = BertEmbeddings(vocab_size=30, hidden_size=8, max_position_embeddings=16)
    >>> tuple(emb(np.array([[5, 7, 9]])).shape)
    (1, 3, 8)
    """

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
        self.dropout = Dropout(self.hidden_dropout, dtype=self.dtype_policy)

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

    def _check_length(self, input_ids):
        """Raises ValueError naming `max_position_embeddings` for input longer than the
        position table, wherever the length is known.

        While Keras infers a Functional model's output shapes (its symbolic scope), the
        length is only a placeholder: None on TensorFlow, a symbolic dimension on JAX
        (which cannot be compared with a number in Python) and a stand-in 83 or 89 on
        PyTorch. Nothing is checked then; the check runs when the model runs on data
        (eagerly or traced by jit/tf.function, where the length is an int), and in a
        TensorFlow graph whose length is unknown it is an assert op.
        """
        if in_symbolic_scope():
            return
        limit = self.max_position_embeddings
        length = input_ids.shape[1]
        if isinstance(length, int) and length > limit:
            raise ValueError(
                f"input_ids has sequence length {length}, longer than the position table"
                f" (max_position_embeddings={limit}); truncate the input or use a model"
                " with more positions"
            )
        if length is None and keras.backend.backend() == "tensorflow":
            import tensorflow as tf  # only TF graphs have unknown lengths at run time

            tf.debugging.assert_less_equal(
                tf.shape(input_ids)[1], limit,
                message=f"input_ids is longer than max_position_embeddings={limit}",
            )

    def _position_rows(self, seq_len):
        """The first `seq_len` rows of the position table, [seq_len, hidden]."""
        if in_symbolic_scope():
            # Shape inference only: the placeholder length (PyTorch's 83, JAX's symbolic
            # dimension) may exceed the table; clipped row indices give the [L, H] shape
            # a real call of that length would have (the values are never used).
            rows = ops.minimum(ops.arange(seq_len), self.max_position_embeddings - 1)
            return ops.take(self.position_embeddings, rows, axis=0)
        return self.position_embeddings[:seq_len]

    def call(self, input_ids, segment_ids=None, training=None):
        self._check_length(input_ids)
        input_ids = ops.cast(input_ids, "int32")
        if segment_ids is None:
            segment_ids = ops.zeros_like(input_ids)
        seq_len = ops.shape(input_ids)[1]
        x = ops.take(self.word_embeddings, input_ids, axis=0)
        x += ops.take(self.token_type_embeddings, ops.cast(segment_ids, "int32"), axis=0)
        x += self._position_rows(seq_len)[None]
        x = self.layer_norm(x)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_ids_shape, segment_ids_shape=None):
        return tuple(input_ids_shape) + (self.hidden_size,)

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
