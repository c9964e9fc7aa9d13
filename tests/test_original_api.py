"""google-research/bert's modeling.py API (realformer_tf.models.bert.original_api, re-exported from
realformer_tf.modeling) used as the original scripts use it, in TF2 eager and inside
tf.function, against the independent NumPy BERT (tests/bert_numpy.py) and the package's
Keras API.

Checkpoints are written from NumPy values under the original names by a graph-mode
`tf.compat.v1.train.Saver`, as the original BERT / RealFormer code writes them.
"""

import math
import os

import numpy as np
import pytest
import tensorflow as tf

import bert_numpy
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.models import variants
from realformer_tf.models.bert import original_api as bert_compat

TOL = 1e-5
CONFIG = dict(vocab_size=37, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
              intermediate_size=20, max_position_embeddings=16, type_vocab_size=2,
              residual_attention=True)
B, L = 3, 7


@pytest.fixture(autouse=True)
def fresh_variables():
    modeling.reset_variables()
    yield
    modeling.reset_variables()


def write_tf1_checkpoint(prefix, weights):
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix, write_meta_graph=False)
    return prefix


def make_inputs(rng):
    ids = rng.integers(1, CONFIG["vocab_size"], size=(B, L)).astype(np.int32)
    mask = np.ones((B, L), np.int32)
    mask[1, 5:] = 0
    mask[2, 2:] = 0
    types = np.zeros((B, L), np.int32)
    types[:, 3:] = 1
    return ids, mask, types


def close(got, want, tol=TOL):
    got = np.asarray(got, np.float64)
    assert got.shape == want.shape
    dev = float(np.max(np.abs(got - want)))
    assert dev <= tol, f"max deviation {dev:.3g}"
    return dev


@pytest.fixture
def checkpoint(tmp_path):
    rng = np.random.default_rng(27)
    weights = bert_numpy.random_weights(CONFIG, rng)
    return write_tf1_checkpoint(str(tmp_path / "bert_model.ckpt"), weights), weights, rng


# ------------------------------------------------------------ the usage pattern
def test_original_usage_pattern_gives_the_checkpoints_numbers(checkpoint):
    init_checkpoint, weights, rng = checkpoint
    ids, mask, types = make_inputs(rng)
    config = modeling.BertConfig(**CONFIG)
    model = modeling.BertModel(config=config, is_training=False, input_ids=tf.constant(ids),
                               input_mask=tf.constant(mask), token_type_ids=tf.constant(types),
                               use_one_hot_embeddings=False, scope=None)
    tvars = model.trainable_variables
    assignment_map, initialized = modeling.get_assignment_map_from_checkpoint(
        tvars, init_checkpoint)
    assert set(assignment_map) == set(weights)
    assert all(name in initialized and name + ":0" in initialized for name in weights)
    tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)

    want = bert_numpy.bert_forward(weights, CONFIG, ids, mask, types)
    close(model.get_pooled_output(), want["pooled_output"])
    close(model.get_sequence_output(), want["sequence_output"])
    layers = model.get_all_encoder_layers()
    assert len(layers) == CONFIG["num_hidden_layers"]
    for got, ref in zip(layers, want["encoder_outputs"]):
        close(got, ref)
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    embedded = (w["bert/embeddings/word_embeddings"][ids]
                + w["bert/embeddings/token_type_embeddings"][types]
                + w["bert/embeddings/position_embeddings"][:L][None])
    close(model.get_embedding_output(),
          bert_numpy.layer_norm(embedded, w, "bert/embeddings/LayerNorm"))
    close(model.get_embedding_table(), w["bert/embeddings/word_embeddings"], 0)

    # The Keras API on the same checkpoint gives the same numbers.
    keras_model = modeling.BertModel(config)
    bert_checkpoint.load_bert_checkpoint(keras_model, init_checkpoint)
    out = keras_model({"input_ids": ids, "input_mask": mask, "segment_ids": types},
                      training=False)
    np.testing.assert_allclose(model.get_pooled_output(), out["pooled_output"], atol=1e-6)

    # Inside tf.function: the same numbers, and the getters read the current weights.
    pooled = tf.function(model.get_pooled_output)
    close(pooled(), want["pooled_output"])
    model.pooler.bias.assign(model.pooler.bias + 1.0)
    moved = np.tanh(np.arctanh(np.clip(want["pooled_output"], -0.999999, 0.999999)) + 1.0)
    close(pooled(), moved, 1e-3)


def test_is_training_scope_and_keras_style_getters():
    config = modeling.BertConfig(**CONFIG)
    ids = tf.constant(np.ones((2, 5), np.int32))
    train = modeling.BertModel(config=config, is_training=True, input_ids=ids)
    assert train.config.hidden_dropout_prob == 0.1
    assert not np.allclose(train.get_sequence_output(), train.get_sequence_output())
    evaluation = modeling.BertModel(config=config, is_training=False, input_ids=ids)
    assert evaluation.config.hidden_dropout_prob == 0.0
    assert evaluation.config.attention_probs_dropout_prob == 0.0
    assert config.hidden_dropout_prob == 0.1  # the caller's config is not changed
    unstated = modeling.BertConfig.from_dict({k: v for k, v in CONFIG.items()
                                              if k != "residual_attention"})
    copied = modeling.BertModel(config=unstated, is_training=False, input_ids=ids).config
    assert getattr(copied, "residual_attention_stated", None) == getattr(
        unstated, "residual_attention_stated", None)
    with pytest.raises(bert_compat.OriginalApiError, match="scope='mine'"):
        modeling.BertModel(config=config, is_training=False, input_ids=ids, scope="mine")
    with pytest.raises(bert_compat.OriginalApiError, match="Keras-style"):
        modeling.BertModel(config).get_pooled_output()
    # Keras-style construction and serialization stay as they were.
    restored = modeling.BertModel.from_config(modeling.BertModel(config).get_config())
    assert restored.config.hidden_dropout_prob == 0.1


# ------------------------------------------------------------- module functions
def test_gelu_activation_and_shape_helpers():
    x = np.linspace(-4, 4, 41).astype(np.float32)
    close(modeling.gelu(tf.constant(x)), bert_numpy.gelu(x.astype(np.float64)))
    for name in (None, "", "linear", "LINEAR"):
        assert modeling.get_activation(name) is None
    for name, ref in (("relu", lambda v: np.maximum(v, 0)), ("gelu", bert_numpy.gelu),
                      ("tanh", np.tanh)):
        close(modeling.get_activation(name)(tf.constant(x)), ref(x.astype(np.float64)))
    assert modeling.get_activation(np.tanh) is np.tanh
    with pytest.raises(ValueError, match="Unsupported activation: swish"):
        modeling.get_activation("swish")

    t = tf.zeros((2, 3, 4))
    assert modeling.get_shape_list(t, expected_rank=3) == [2, 3, 4]
    with pytest.raises(ValueError, match="actual rank `3`"):
        modeling.get_shape_list(t, expected_rank=2)

    @tf.function(input_signature=[tf.TensorSpec([None, 3, 4])])
    def dynamic(v):
        shape = modeling.get_shape_list(v)
        assert shape[1:] == [3, 4] and isinstance(shape[0], tf.Tensor)
        return shape[0]

    assert int(dynamic(t)) == 2
    m = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    matrix = modeling.reshape_to_matrix(tf.constant(m))
    close(matrix, m.reshape(6, 4).astype(np.float64), 0)
    close(modeling.reshape_from_matrix(matrix, [2, 3, 4]), m.astype(np.float64), 0)
    to_mask = np.array([[1, 1, 0], [1, 0, 0]], np.int32)
    mask = modeling.create_attention_mask_from_input_mask(tf.zeros((2, 4), tf.int32), to_mask)
    assert mask.dtype == tf.float32
    close(mask, np.broadcast_to(to_mask[:, None, :], (2, 4, 3)).astype(np.float64), 0)


def _assign(weights, folder):
    """Sets the function-style variables (created by a first call) to NumPy values by
    their original names: a TF1 checkpoint, the assignment map, init_from_checkpoint."""
    prefix = write_tf1_checkpoint(str(folder / "part.ckpt"),
                                  {k: np.asarray(v, np.float32) for k, v in weights.items()})
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(
        modeling.function_variables(), prefix)
    assert set(assignment_map) == set(weights)
    tf.compat.v1.train.init_from_checkpoint(prefix, assignment_map)


def test_layer_norm_against_numpy(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6)).astype(np.float32)
    with tf.compat.v1.variable_scope("ln"):
        modeling.layer_norm(tf.constant(x))
        w = {"ln/LayerNorm/gamma": rng.uniform(0.5, 1.5, 6), "ln/LayerNorm/beta": rng.standard_normal(6)}
        _assign(w, tmp_path)
        close(modeling.layer_norm(tf.constant(x)), bert_numpy.layer_norm(x, w, "ln/LayerNorm"))
    assert len(modeling.function_variables()) == 2


def _numpy_attention(x, w, heads, head_dim, mask, prev):
    def split(t):
        return t.reshape(x.shape[0], x.shape[1], heads, head_dim).transpose(0, 2, 1, 3)

    q, k, v = (split(bert_numpy.dense(x, w, f"att/{n}")) for n in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim)
    if prev is not None:
        scores = scores + prev
    probs = bert_numpy.softmax(scores + (1.0 - mask[:, None]) * -10000.0)
    context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[1], -1)
    return context, scores


@pytest.mark.parametrize("with_prev", [False, True])
def test_attention_layer_against_numpy(with_prev, tmp_path):
    rng = np.random.default_rng(2)
    heads, head_dim, width = 3, 4, 10
    x = rng.standard_normal((B, L, width)).astype(np.float32)
    to_mask = np.ones((B, L), np.int32)
    to_mask[1, 4:] = 0
    mask = np.asarray(modeling.create_attention_mask_from_input_mask(x, to_mask))
    prev = rng.standard_normal((B, heads, L, L)).astype(np.float32) if with_prev else None

    @tf.function
    def attend(x):
        with tf.compat.v1.variable_scope("att"):
            return modeling.attention_layer(
                x, x, attention_mask=mask, num_attention_heads=heads, size_per_head=head_dim,
                prev_attention_scores=prev, return_attention_scores=True)

    attend(tf.constant(x))
    w = {}
    for name in ("query", "key", "value"):
        w[f"att/{name}/kernel"] = rng.standard_normal((width, heads * head_dim)) / 3
        w[f"att/{name}/bias"] = 0.2 * rng.standard_normal(heads * head_dim)
    _assign(w, tmp_path)
    context, scores = attend(tf.constant(x))  # a second call reuses the variables
    assert len(modeling.function_variables()) == 6
    want_context, want_scores = _numpy_attention(x, w, heads, head_dim, mask, prev)
    close(context, want_context)
    close(scores, want_scores)
    if not with_prev:  # the original's return value: the context alone
        with tf.compat.v1.variable_scope("att"):
            alone = modeling.attention_layer(x, x, attention_mask=mask, num_attention_heads=heads,
                                             size_per_head=head_dim)
        close(alone, want_context)


def test_realformer_transformer_model_against_numpy(checkpoint):
    init_checkpoint, weights, rng = checkpoint
    x = rng.standard_normal((B, L, CONFIG["hidden_size"])).astype(np.float32)
    _, input_mask, _ = make_inputs(rng)
    mask = modeling.create_attention_mask_from_input_mask(x, input_mask)

    @tf.function
    def encode(x):
        with tf.compat.v1.variable_scope("bert"), tf.compat.v1.variable_scope("encoder"):
            return modeling.transformer_model(
                x, attention_mask=mask, hidden_size=12, num_hidden_layers=2,
                num_attention_heads=3, intermediate_size=20, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0, do_return_all_layers=True,
                residual_attention=True, return_attention_scores=True)

    encode(tf.constant(x))
    tvars = modeling.function_variables()
    assignment_map, _ = modeling.get_assignment_map_from_checkpoint(tvars, init_checkpoint)
    assert len(assignment_map) == len(tvars) == 2 * 16
    tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)
    layers, scores = encode(tf.constant(x))
    assert len(modeling.function_variables()) == len(tvars)

    adder = (1.0 - np.asarray(mask, np.float64)[:, None]) * -10000.0
    h, prev = x.astype(np.float64), None
    cfg = bert_numpy._cfg(CONFIG)
    for i in range(2):
        h, prev = bert_numpy.transformer_layer(h, weights, i, cfg, adder, prev)
        close(layers[i], h)
        close(scores[i], prev)


@pytest.mark.parametrize("variant", list(variants.VARIANTS))
def test_original_names_follow_from_the_variables_alone(variant):
    """get_assignment_map_from_checkpoint names each variable it is given from the
    variable's own Keras path, as the original names TF1 variables: the same names
    `bert_variables` gives, for every kind and variant, whatever the model's name, and
    with no record of the models alive in the process."""
    config = modeling.BertConfig(**dict(CONFIG, **variants.get_variant(variant).settings))
    for model in (modeling.BertModel(config, name="my_encoder"), modeling.BertPretrainingModel(config),
                  modeling.BertClassifierModel(config, num_labels=3, name="clf_7"), modeling.BertSquadModel(config)):
        names = bert_checkpoint.bert_variables(model)
        assert {bert_checkpoint.original_name(v.path): n for n, v in names.items()} == {n: n for n in names}
        assert len({id(v) for v in model.weights}) == len(names)  # every weight has its name
    assert bert_checkpoint.original_name("dense/kernel") is None
