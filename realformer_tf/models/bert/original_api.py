"""google-research/bert's `modeling.py` API (and the official RealFormer fork's
additions) as a thin layer over this package's Keras layers, for porting TF1 code:
the parts that name no variable (activations, shapes, masks, dropout, initializers)
and `BertModel`'s original constructor (`OriginalBertModelApi`). The function-style
helpers that create variables under the original names (`layer_norm`,
`embedding_lookup`, `transformer_model`, ...) and `get_assignment_map_from_checkpoint`
are in `realformer_tf.compat.bert_functions`; `realformer_tf.modeling` re-exports
both, so `modeling.gelu(x)` and `modeling.BertModel(config=..., is_training=...,
input_ids=...)` read as in the original (docs/original_api.md maps each name).
"""

import dataclasses

import keras
from keras import ops

from realformer_tf.layers.activations import gelu as _package_gelu
from realformer_tf.errors import OriginalApiError
from realformer_tf.models.config import DEFAULT_LAYER_NORM_EPS

_TF = keras.backend.backend() == "tensorflow"
LAYER_NORM_EPSILON = DEFAULT_LAYER_NORM_EPS  # the original modeling.py's layer_norm


# ----------------------------------------------------------------- plain functions
def gelu(x):
    """BERT's gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return _package_gelu(x)


def get_activation(activation_string):
    """The original's mapping: a non-string is returned as is; None, "" and "linear"
    give None; "relu", "gelu" (tanh form), "tanh"; anything else raises ValueError."""
    if not isinstance(activation_string, str):
        return activation_string
    if not activation_string:
        return None
    act = activation_string.lower()
    functions = {"linear": None, "relu": keras.activations.relu, "gelu": gelu,
                 "tanh": keras.activations.tanh}
    if act not in functions:
        raise ValueError(f"Unsupported activation: {act}")
    return functions[act]


def assert_rank(tensor, expected_rank, name=None):
    """Raises ValueError unless `tensor`'s rank is `expected_rank` (an int or a list)."""
    expected = [expected_rank] if isinstance(expected_rank, int) else list(expected_rank)
    rank = len(tensor.shape)
    if rank not in expected:
        raise ValueError(
            f"For the tensor `{name or 'tensor'}` in scope `{_scope()}`, the actual rank"
            f" `{rank}` (shape = {tuple(tensor.shape)}) is not equal to the expected rank"
            f" `{expected_rank}`"
        )


def get_shape_list(tensor, expected_rank=None, name=None):
    """The shape as a list: Python ints where static, scalar tensors where dynamic."""
    if expected_rank is not None:
        assert_rank(tensor, expected_rank, name)
    return list(ops.shape(tensor))


def reshape_to_matrix(input_tensor):
    """[..., width] (rank >= 2) -> [-1, width]."""
    if len(input_tensor.shape) < 2:
        raise ValueError(
            f"Input tensor must have at least rank 2. Shape = {tuple(input_tensor.shape)}")
    if len(input_tensor.shape) == 2:
        return input_tensor
    return ops.reshape(input_tensor, (-1, input_tensor.shape[-1]))


def reshape_from_matrix(output_tensor, orig_shape_list):
    """[N, width] -> orig_shape_list[:-1] + [width]."""
    if len(orig_shape_list) == 2:
        return output_tensor
    width = get_shape_list(output_tensor)[-1]
    return ops.reshape(output_tensor, tuple(orig_shape_list[:-1]) + (width,))


def create_attention_mask_from_input_mask(from_tensor, to_mask):
    """[B, F(, ...)] tensor and [B, T] 0/1 mask -> float32 [B, F, T] mask (1 = attend)."""
    from_shape = get_shape_list(from_tensor, expected_rank=[2, 3])
    get_shape_list(to_mask, expected_rank=2)
    to_mask = ops.cast(to_mask, "float32")[:, None, :]
    return ops.ones((from_shape[0], from_shape[1], 1), "float32") * to_mask


def dropout(input_tensor, dropout_prob):
    """Dropout with `dropout_prob` the probability of DROPPING; 0/None: identity."""
    if not dropout_prob:
        return input_tensor
    if _TF:
        import tensorflow as tf  # tf.nn.dropout: stateless in tf.function, like the original

        return tf.nn.dropout(input_tensor, rate=dropout_prob)
    return keras.random.dropout(input_tensor, dropout_prob)


def create_initializer(initializer_range=0.02):
    """TruncatedNormal(stddev=initializer_range), as the original."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


# ------------------------------------------------------------------ variable scopes
def _scope():
    if not _TF:
        return ""
    import tensorflow as tf

    return tf.compat.v1.get_variable_scope().name


# --------------------------------------------------- BertModel's original-style half
class OriginalBertModelApi:
    """The original `BertModel(config=, is_training=, input_ids=, ...)` constructor
    arguments and getters, mixed into `modeling.BertModel` (one Keras model).

    Each getter runs the model on the remembered inputs with the weights it has when
    called (as the original's graph tensors read the variables at session run); with
    `is_training=True` each call is a fresh forward pass with its own dropout draw.
    """

    _ORIGINAL_ARGS = ("is_training", "input_ids", "input_mask", "token_type_ids",
                      "use_one_hot_embeddings", "scope")

    @classmethod
    def _split_original_kwargs(cls, config, kwargs):
        """Pops the original's arguments; returns (config, their dict or None)."""
        original = {k: kwargs.pop(k) for k in cls._ORIGINAL_ARGS if k in kwargs}
        if not original:
            return config, None
        scope = original.get("scope")
        if scope not in (None, "bert"):
            raise OriginalApiError(
                f"BertModel(scope={scope!r}): the weights are always named bert/...;"
                " drop `scope` (the Keras model's name does not change checkpoint names)")
        if original.get("input_ids") is None:
            raise OriginalApiError("BertModel(is_training=..., ...) needs input_ids (the"
                                   " original's signature); or call BertModel(config)")
        if not original.get("is_training", False):  # the original zeroes dropout
            config = dataclasses.replace(config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return config, original

    def _init_original(self, original):
        self._original = original
        self.build()

    def _original_features(self):
        ids = self._original["input_ids"]
        features = {"input_ids": ids}
        if self._original.get("input_mask") is not None:
            features["input_mask"] = self._original["input_mask"]
        if self._original.get("token_type_ids") is not None:
            features["segment_ids"] = self._original["token_type_ids"]
        return features

    def _original_check(self):
        if getattr(self, "_original", None) is None:
            raise OriginalApiError(
                "get_pooled_output() and the other getters read the inputs given to"
                " BertModel(config=..., is_training=..., input_ids=...); this model was"
                " built Keras-style: call model(inputs) and read the output dict")
        return bool(self._original.get("is_training"))

    def _original_outputs(self):
        training = self._original_check()
        return self(self._original_features(), training=training)

    def get_pooled_output(self):
        return self._original_outputs()["pooled_output"]

    def get_sequence_output(self):
        return self._original_outputs()["sequence_output"]

    def get_all_encoder_layers(self):
        return self._original_outputs()["encoder_outputs"]

    def get_embedding_output(self):
        """The embeddings' output (after LayerNorm and dropout), layer 0's input."""
        training = self._original_check()
        features = self._original_features()
        return self.embeddings(features["input_ids"], features.get("segment_ids"),
                               training=training)
