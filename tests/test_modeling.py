"""modeling.py against an independent NumPy BERT (tests/bert_numpy.py), through
original-named TF1 checkpoints, for every RealFormer / NormFormer variant; checkpoint
I/O in both directions and its errors.

Weights are random NumPy arrays under the original BERT names; they are written as a
real TF1 checkpoint (graph-mode `tf.compat.v1.get_variable` + `Saver`, like the original
BERT / RealFormer code writes them) or with the raw `SaveV2` op, loaded with
`load_bert_checkpoint`, and every output is compared with the float64 NumPy forward.
"""

import os
import zlib

import numpy as np
import pytest
import tensorflow as tf

import bert_numpy
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint

ATOL = 1e-4

# Deliberately not powers of two: head_dim 6, intermediate 29, vocab 53, seq 11.
BASE = dict(
    vocab_size=53,
    hidden_size=18,
    num_hidden_layers=3,
    num_attention_heads=3,
    intermediate_size=29,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=13,
    type_vocab_size=2,
    initializer_range=0.02,
)
BATCH, SEQ, NUM_PREDICTIONS = 3, 11, 4

NF = dict(layer_norm_type="normformer")
AFTER = dict(normformer_head_scale_position="after_projection")
RSCALE = dict(normformer_residual_scale=True)

# name -> (config overrides, checkpoint writer: "tf1" = graph-mode Saver, "tf1+state" =
# the same plus Adam slots and global_step, "savev2" = the raw SaveV2 op)
VARIANTS = {
    "post-vanilla": (dict(residual_attention=False), "tf1"),
    "post-realformer": (dict(residual_attention=True), "tf1+state"),
    "post-realformer-running-mean": (dict(use_running_mean=True), "savev2"),
    "post-realformer-gelu-exact": (dict(hidden_act="gelu_exact"), "savev2"),
    "post-vanilla-running-mean-ignored": (
        dict(residual_attention=False, use_running_mean=True), "savev2"),
    "pre-vanilla": (dict(layer_norm_type="pre", residual_attention=False), "savev2"),
    "pre-realformer": (dict(layer_norm_type="pre"), "tf1"),
    "pre-realformer-running-mean": (dict(layer_norm_type="pre", use_running_mean=True), "savev2"),
    "normformer-vanilla": (dict(NF, residual_attention=False), "savev2"),
    "normformer-realformer": (dict(NF), "tf1"),
    "normformer-realformer-running-mean": (dict(NF, use_running_mean=True), "savev2"),
    "normformer-after-projection": (dict(NF, **AFTER), "tf1"),
    "normformer-residual-scale": (dict(NF, **RSCALE), "savev2"),
    "normformer-after-projection-residual-scale-running-mean": (
        dict(NF, use_running_mean=True, **AFTER, **RSCALE), "tf1+state"),
    "normformer-vanilla-after-projection-residual-scale": (
        dict(NF, residual_attention=False, **AFTER, **RSCALE), "savev2"),
}



# ------------------------------------------------------------------------- helpers
def make_config(**overrides):
    return dict(BASE, **overrides)


def write_tf1_checkpoint(prefix, weights, with_training_state=False):
    """A true TF1 name-based checkpoint, written as the original BERT scripts do:
    graph-mode variables named by `get_variable`, saved by `tf.compat.v1.train.Saver`.
    With `with_training_state`, also Adam slots (`<var>/adam_m`, `<var>/adam_v`) and
    `global_step`, as a run_pretraining.py checkpoint holds them."""
    tf.io.gfile.makedirs(os.path.dirname(prefix))
    with tf.Graph().as_default():
        for name, value in weights.items():
            tf.compat.v1.get_variable(name, initializer=tf.constant(value))
            if with_training_state:
                tf.compat.v1.get_variable(name + "/adam_m", initializer=tf.constant(value * 0.5))
                tf.compat.v1.get_variable(name + "/adam_v", initializer=tf.constant(value * 0.0 + 3.0))
        if with_training_state:
            tf.compat.v1.get_variable("global_step", initializer=tf.constant(1234, tf.int64))
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            saver.save(sess, prefix, write_meta_graph=False)
    return prefix


def write_savev2_checkpoint(prefix, weights):
    names = sorted(weights)
    tf.io.gfile.makedirs(os.path.dirname(prefix))
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.constant(weights[n]) for n in names],
    )
    return prefix


def write_checkpoint(prefix, weights, writer):
    if writer.startswith("tf1"):
        return write_tf1_checkpoint(prefix, weights, with_training_state=writer == "tf1+state")
    return write_savev2_checkpoint(prefix, weights)


def make_inputs(config, rng, seq=SEQ):
    ids = rng.integers(0, config["vocab_size"], size=(BATCH, seq)).astype(np.int32)
    lengths = [seq, seq - 4, seq - 7]  # padding in two of the three rows
    mask = np.zeros((BATCH, seq), np.int32)
    segments = np.zeros((BATCH, seq), np.int32)
    for b, n in enumerate(lengths):
        mask[b, :n] = 1
        segments[b, n // 2:n] = 1
    positions = np.stack([rng.choice(seq, NUM_PREDICTIONS, replace=False) for _ in range(BATCH)])
    return {
        "input_ids": ids,
        "input_mask": mask,
        "segment_ids": segments,
        "masked_lm_positions": positions.astype(np.int32),
    }


def encoder_inputs(inputs):
    return {k: inputs[k] for k in ("input_ids", "input_mask", "segment_ids")}


def numpy_forward(weights, config, inputs, **overrides):
    args = dict(
        input_mask=inputs.get("input_mask"),
        segment_ids=inputs.get("segment_ids"),
        masked_lm_positions=inputs.get("masked_lm_positions"),
    )
    args.update(overrides)
    return bert_numpy.bert_forward(weights, config, inputs["input_ids"], **args)


def compare(actual, expected, keys):
    """Asserts every listed output within ATOL; returns the max deviation."""
    worst = 0.0
    for key in keys:
        got, want = actual[key], expected[key]
        if isinstance(want, list):
            assert len(got) == len(want), key
            pairs = [(f"{key}[{i}]", g, w) for i, (g, w) in enumerate(zip(got, want))]
        else:
            pairs = [(key, got, want)]
        for label, g, w in pairs:
            g = np.asarray(g)
            assert g.shape == w.shape, f"{label}: shape {g.shape} != {w.shape}"
            assert g.dtype == np.float32, f"{label}: dtype {g.dtype}"
            dev = float(np.max(np.abs(g.astype(np.float64) - w)))
            assert dev <= ATOL, f"{label}: max deviation {dev:.3g} from the NumPy reference"
            worst = max(worst, dev)
    return worst


ENCODER_KEYS = ("sequence_output", "pooled_output", "encoder_outputs", "attention_scores")
PRETRAINING_KEYS = ENCODER_KEYS + ("masked_lm_logits", "next_sentence_logits")


def all_values(model):
    return {name: np.array(var.numpy()) for name, var in bert_checkpoint.bert_variables(model).items()}


# --------------------------------------------------------- reference self-checks
def test_numpy_reference_switches_change_the_math():
    """Guards the reference itself: each switch must change the forward pass (so a
    variant cannot pass by the reference silently ignoring it), and the layer-0 scores
    must not depend on residual attention."""
    rng = np.random.default_rng(0)
    inputs = make_inputs(BASE, rng)
    # One weight set (the superset: NormFormer with residual scale) for every variant, so
    # that each comparison differs by the switch alone; the reference reads by name.
    weights = bert_numpy.random_weights(make_config(**NF, **RSCALE), rng, head="pretraining")
    outs = {}
    for name, (overrides, _) in VARIANTS.items():
        outs[name] = numpy_forward(weights, make_config(**overrides), inputs)

    def differ(a, b):
        return np.max(np.abs(outs[a]["sequence_output"] - outs[b]["sequence_output"])) > 1e-3

    assert differ("post-realformer", "post-vanilla")
    assert differ("post-realformer-running-mean", "post-realformer")
    assert differ("pre-realformer", "pre-vanilla")
    assert differ("pre-realformer-running-mean", "pre-realformer")
    assert differ("normformer-realformer", "normformer-vanilla")
    assert differ("normformer-realformer-running-mean", "normformer-realformer")
    assert differ("normformer-after-projection", "normformer-realformer")
    assert differ("normformer-residual-scale", "normformer-realformer")
    np.testing.assert_allclose(
        outs["post-realformer"]["attention_scores"][0], outs["post-vanilla"]["attention_scores"][0]
    )
    # "gelu" is the tanh approximation: the erf form differs well beyond ATOL.
    assert np.max(np.abs(outs["post-realformer-gelu-exact"]["masked_lm_logits"]
                         - outs["post-realformer"]["masked_lm_logits"])) > 10 * ATOL
    # Residual attention off: running mean has nothing to average.
    np.testing.assert_allclose(
        outs["post-vanilla-running-mean-ignored"]["sequence_output"],
        outs["post-vanilla"]["sequence_output"],
    )


# ------------------------------------------------------- forward vs NumPy, per variant
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_forward_matches_numpy_reference(variant, tmp_path):
    overrides, writer = VARIANTS[variant]
    config = make_config(**overrides)
    rng = np.random.default_rng(zlib.crc32(variant.encode()))
    weights = bert_numpy.random_weights(config, rng, head="pretraining")
    prefix = write_checkpoint(str(tmp_path / "ckpt" / "bert_model.ckpt"), weights, writer)
    inputs = make_inputs(config, rng)
    expected = numpy_forward(weights, config, inputs)

    model = modeling.BertPretrainingModel(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, prefix)
    out = model(inputs, training=False)
    dev = compare(out, expected, PRETRAINING_KEYS)
    assert len(out["encoder_outputs"]) == config["num_hidden_layers"]
    assert out["attention_scores"][0].shape == (BATCH, 3, SEQ, SEQ)
    print(f"\n{variant}: max deviation {dev:.2e} ({writer} checkpoint)")


@pytest.mark.parametrize("variant", ["post-realformer", "normformer-after-projection-residual-scale-running-mean"])
def test_encoder_loads_pretraining_checkpoint(variant, tmp_path):
    """A run_pretraining checkpoint (cls/ heads, Adam slots, global_step) into BertModel:
    the heads and training state are ignored; the encoder matches the reference."""
    overrides, _ = VARIANTS[variant]
    config = make_config(**overrides)
    rng = np.random.default_rng(7)
    weights = bert_numpy.random_weights(config, rng, head="pretraining")
    prefix = write_tf1_checkpoint(str(tmp_path / "pretrain" / "model.ckpt-1234"), weights,
                                  with_training_state=True)
    stored = dict(tf.train.list_variables(prefix))
    assert "global_step" in stored and "bert/pooler/dense/kernel/adam_m" in stored
    assert "cls/predictions/output_bias/adam_v" in stored

    model = modeling.BertModel(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, prefix)
    inputs = make_inputs(config, rng)
    expected = numpy_forward(weights, config, inputs)
    compare(model(encoder_inputs(inputs), training=False), expected, ENCODER_KEYS)
    # The weights are exactly the checkpoint's.
    for name, value in all_values(model).items():
        assert np.array_equal(value, weights[name]), name


def test_load_from_checkpoint_directory(tmp_path):
    """A directory (as --init_checkpoint=dir) resolves to its latest checkpoint."""
    config = make_config()
    weights = bert_numpy.random_weights(config, np.random.default_rng(3))
    write_tf1_checkpoint(str(tmp_path / "model.ckpt-5"), weights)
    model = modeling.BertModel(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, str(tmp_path))
    for name, value in all_values(model).items():
        assert np.array_equal(value, weights[name]), name


def test_padding_is_masked(tmp_path):
    """Changing the ids under input_mask == 0 leaves every real position unchanged."""
    config = make_config(layer_norm_type="normformer", use_running_mean=True)
    rng = np.random.default_rng(11)
    weights = bert_numpy.random_weights(config, rng)
    model = modeling.BertModel(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, write_savev2_checkpoint(str(tmp_path / "c" / "m.ckpt"), weights))
    inputs = encoder_inputs(make_inputs(config, rng))
    changed = dict(inputs, input_ids=np.where(inputs["input_mask"] == 1, inputs["input_ids"],
                                              (inputs["input_ids"] + 5) % config["vocab_size"]))
    assert not np.array_equal(changed["input_ids"], inputs["input_ids"])
    a = model(inputs, training=False)["sequence_output"].numpy()
    b = model(changed, training=False)["sequence_output"].numpy()
    real = inputs["input_mask"].astype(bool)
    np.testing.assert_allclose(a[real], b[real], atol=1e-5)
    assert np.max(np.abs(a[~real] - b[~real])) > 1e-3


def test_optional_mask_and_segments_and_embedding_table(tmp_path):
    config = make_config(layer_norm_type="pre")
    rng = np.random.default_rng(5)
    weights = bert_numpy.random_weights(config, rng)
    model = modeling.BertModel(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, write_savev2_checkpoint(str(tmp_path / "c" / "m.ckpt"), weights))
    ids = make_inputs(config, rng)["input_ids"]

    implicit = model({"input_ids": ids}, training=False)
    explicit = model({"input_ids": ids, "input_mask": np.ones_like(ids),
                      "segment_ids": np.zeros_like(ids)}, training=False)
    for key in ("sequence_output", "pooled_output"):
        np.testing.assert_array_equal(implicit[key].numpy(), explicit[key].numpy())
    for a, b in zip(implicit["attention_scores"], explicit["attention_scores"]):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    compare(implicit, bert_numpy.bert_forward(weights, config, ids), ENCODER_KEYS)

    # int64 features, as parsed from the original TFRecords.
    as_int64 = model({"input_ids": ids.astype(np.int64), "input_mask": np.ones(ids.shape, np.int64),
                      "segment_ids": np.zeros(ids.shape, np.int64)}, training=False)
    np.testing.assert_array_equal(as_int64["sequence_output"].numpy(),
                                  implicit["sequence_output"].numpy())

    only_mask = model({"input_ids": ids, "input_mask": np.ones_like(ids)}, training=False)
    np.testing.assert_array_equal(only_mask["sequence_output"].numpy(),
                                  implicit["sequence_output"].numpy())

    table = model.get_embedding_table()
    assert tuple(table.shape) == (config["vocab_size"], config["hidden_size"])
    assert np.array_equal(np.asarray(table), weights["bert/embeddings/word_embeddings"])


def test_sequence_longer_than_max_position_embeddings():
    config = make_config()
    model = modeling.BertModel(modeling.BertConfig(**config))
    ids = np.zeros((2, config["max_position_embeddings"] + 1), np.int32)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model({"input_ids": ids}, training=False)
    # Exactly max_position_embeddings is fine.
    out = model({"input_ids": ids[:, :-1]}, training=False)
    assert out["sequence_output"].shape == (2, config["max_position_embeddings"], 18)
    # Unknown static length (a traced serving / training function): checked at run time.
    serve = tf.function(
        lambda x: model({"input_ids": x}, training=False)["pooled_output"],
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    assert serve(ids[:, :-1]).shape == (2, 18)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        serve(ids)


# ----------------------------------------------------------- save / load round trips
HEADS = {
    "BertModel": (lambda cfg: modeling.BertModel(cfg), None),
    "BertPretrainingModel": (lambda cfg: modeling.BertPretrainingModel(cfg), "pretraining"),
    "BertClassifierModel": (lambda cfg: modeling.BertClassifierModel(cfg, num_labels=3), "classifier"),
    "BertSquadModel": (lambda cfg: modeling.BertSquadModel(cfg), "squad"),
}
HEAD_OUTPUT_KEYS = {
    None: ENCODER_KEYS,
    "pretraining": PRETRAINING_KEYS,
    "classifier": ("logits", "pooled_output"),
    "squad": ("start_logits", "end_logits"),
}


@pytest.mark.parametrize(
    "kind,layer_norm_type",
    [(kind, "normformer") for kind in sorted(HEADS)] + [("BertPretrainingModel", "post")],
)
def test_save_load_round_trip(kind, layer_norm_type, tmp_path):
    build, head = HEADS[kind]
    overrides = dict(layer_norm_type=layer_norm_type)
    if layer_norm_type == "normformer":
        overrides.update(RSCALE)
    config = make_config(**overrides)
    rng = np.random.default_rng(21)
    weights = bert_numpy.random_weights(config, rng, head=head, num_labels=3)
    inputs = make_inputs(config, rng)
    if head != "pretraining":
        inputs = encoder_inputs(inputs)

    model = build(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(model, write_savev2_checkpoint(str(tmp_path / "in" / "m.ckpt"), weights))
    # Every Keras weight has an original name (nothing would be silently left unsaved).
    named = bert_checkpoint.bert_variables(model)
    assert {id(v) for v in model.trainable_weights} == {id(v) for v in named.values()}
    assert not model.non_trainable_weights
    out = model(inputs, training=False)
    compare(out, numpy_forward(weights, config, inputs), HEAD_OUTPUT_KEYS[head])

    # Saved: exactly the original names, BERT's 2-D kernel shapes, the exact values.
    prefix = bert_checkpoint.save_bert_checkpoint(model, str(tmp_path / "out" / "sub" / "bert_model.ckpt"))
    assert prefix == str(tmp_path / "out" / "sub" / "bert_model.ckpt")
    assert sorted(os.listdir(tmp_path / "out" / "sub")) == [
        "bert_model.ckpt.data-00000-of-00001", "bert_model.ckpt.index"]
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    expected_shapes = bert_numpy.checkpoint_shapes(config, head=head, num_labels=3)
    assert {k: tuple(v) for k, v in shapes.items()} == expected_shapes
    assert shapes["bert/encoder/layer_0/attention/self/query/kernel"] == [18, 18]
    assert shapes["bert/encoder/layer_2/intermediate/dense/kernel"] == [18, 29]
    assert shapes["bert/encoder/layer_1/output/dense/kernel"] == [29, 18]
    dtypes = reader.get_variable_to_dtype_map()
    for name, value in weights.items():
        assert dtypes[name] == tf.float32, name
        assert np.array_equal(reader.get_tensor(name), value), name

    # Loaded back into a fresh model: bit-exact weights and outputs.
    again = build(modeling.BertConfig(**config))
    bert_checkpoint.load_bert_checkpoint(again, prefix)
    values = all_values(again)
    assert set(values) == set(weights)
    for name, value in values.items():
        assert np.array_equal(value, weights[name]), name
    out2 = again(inputs, training=False)
    for key in HEAD_OUTPUT_KEYS[head]:
        a, b = out[key], out2[key]
        for x, y in (zip(a, b) if isinstance(a, list) else [(a, b)]):
            assert np.array_equal(np.asarray(x), np.asarray(y)), key


def test_saved_checkpoint_reads_with_tf1_saver(tmp_path):
    """Our checkpoint restores into a TF1 graph whose variables carry the original names
    (what the original BERT scripts' init_from_checkpoint / Saver do)."""
    config = make_config()
    model = modeling.BertPretrainingModel(modeling.BertConfig(**config))
    weights = bert_numpy.random_weights(config, np.random.default_rng(2), head="pretraining")
    bert_checkpoint.load_bert_checkpoint(model, write_savev2_checkpoint(str(tmp_path / "a" / "m.ckpt"), weights))
    prefix = bert_checkpoint.save_bert_checkpoint(model, str(tmp_path / "b" / "m.ckpt"))
    with tf.Graph().as_default():
        graph_vars = {
            name: tf.compat.v1.get_variable(name, shape=shape, dtype=tf.float32)
            for name, shape in bert_numpy.checkpoint_shapes(config, head="pretraining").items()
        }
        saver = tf.compat.v1.train.Saver(graph_vars)
        with tf.compat.v1.Session() as sess:
            saver.restore(sess, prefix)
            restored = sess.run(graph_vars)
    for name, value in weights.items():
        assert np.array_equal(restored[name], value), name


def test_classifier_from_pretraining_checkpoint(tmp_path):
    config = make_config()
    weights = bert_numpy.random_weights(config, np.random.default_rng(4), head="pretraining")
    prefix = write_tf1_checkpoint(str(tmp_path / "m.ckpt"), weights, with_training_state=True)
    model = modeling.BertClassifierModel(modeling.BertConfig(**config), num_labels=3)

    with pytest.raises(modeling.CheckpointError, match="output_weights"):
        bert_checkpoint.load_bert_checkpoint(model, prefix)

    head_before = {n: v for n, v in all_values(model).items() if not n.startswith("bert/")}
    assert sorted(head_before) == ["output_bias", "output_weights"]
    bert_checkpoint.load_bert_checkpoint(model, prefix, skip_heads=True)
    after = all_values(model)
    for name, value in after.items():
        if name.startswith("bert/"):
            assert np.array_equal(value, weights[name]), name
        else:
            assert np.array_equal(value, head_before[name]), name
    inputs = encoder_inputs(make_inputs(config, np.random.default_rng(4)))
    expected = numpy_forward(weights, config, inputs)
    out = model(inputs, training=False)
    compare(out, expected, ("pooled_output",))
    assert out["logits"].shape == (BATCH, 3)


def test_pretraining_model_from_encoder_checkpoint(tmp_path):
    config = make_config()
    weights = bert_numpy.random_weights(config, np.random.default_rng(8))
    prefix = write_savev2_checkpoint(str(tmp_path / "c" / "m.ckpt"), weights)
    model = modeling.BertPretrainingModel(modeling.BertConfig(**config))
    with pytest.raises(modeling.CheckpointError, match="cls/predictions"):
        bert_checkpoint.load_bert_checkpoint(model, prefix)
    bert_checkpoint.load_bert_checkpoint(model, prefix, skip_heads=True)
    for name, value in all_values(model).items():
        if name.startswith("bert/"):
            assert np.array_equal(value, weights[name]), name


# --------------------------------------------------------------------- load errors
def _model(**overrides):
    return modeling.BertModel(modeling.BertConfig(**make_config(**overrides)))


def _ckpt(tmp_path, name="c", writer="savev2", head=None, **overrides):
    weights = bert_numpy.random_weights(make_config(**overrides), np.random.default_rng(9), head=head)
    prefix = str(tmp_path / name / "m.ckpt")
    if writer.startswith("tf1"):
        return write_tf1_checkpoint(prefix, weights, with_training_state=writer == "tf1+state")
    return write_savev2_checkpoint(prefix, weights)


def test_vanilla_checkpoint_into_normformer_config(tmp_path):
    prefix = _ckpt(tmp_path, writer="tf1+state", residual_attention=False)
    model = _model(layer_norm_type="normformer")
    with pytest.raises(modeling.CheckpointError) as err:
        bert_checkpoint.load_bert_checkpoint(model, prefix)
    message = str(err.value)
    assert "head_scale" in message and "lacks" in message
    assert "normformer" in message  # the variant the model was built as


def test_normformer_checkpoint_into_post_config(tmp_path):
    prefix = _ckpt(tmp_path, layer_norm_type="normformer")
    with pytest.raises(modeling.CheckpointError) as err:
        bert_checkpoint.load_bert_checkpoint(_model(), prefix)
    message = str(err.value)
    assert "does not have" in message
    assert "head_scale" in message or "post_LayerNorm" in message
    assert "bert/encoder/LayerNorm" in message


def test_pre_and_post_checkpoints_are_not_interchangeable(tmp_path):
    with pytest.raises(modeling.CheckpointError, match="bert/encoder/LayerNorm"):
        bert_checkpoint.load_bert_checkpoint(_model(layer_norm_type="pre"), _ckpt(tmp_path, "post"))
    with pytest.raises(modeling.CheckpointError, match="bert/encoder/LayerNorm"):
        bert_checkpoint.load_bert_checkpoint(_model(), _ckpt(tmp_path, "pre", layer_norm_type="pre"))


def test_residual_scale_mismatch(tmp_path):
    prefix = _ckpt(tmp_path, layer_norm_type="normformer")
    with pytest.raises(modeling.CheckpointError, match="residual_scale"):
        bert_checkpoint.load_bert_checkpoint(_model(layer_norm_type="normformer", normformer_residual_scale=True), prefix)


def test_layer_count_mismatch(tmp_path):
    prefix = _ckpt(tmp_path)  # 3 layers
    with pytest.raises(modeling.CheckpointError, match="layer_2"):
        bert_checkpoint.load_bert_checkpoint(_model(num_hidden_layers=2), prefix)
    with pytest.raises(modeling.CheckpointError, match="layer_3"):
        bert_checkpoint.load_bert_checkpoint(_model(num_hidden_layers=4), prefix)


def test_shape_mismatch_names_the_variable(tmp_path):
    prefix = _ckpt(tmp_path, vocab_size=60)
    model = _model()
    before = all_values(model)
    with pytest.raises(modeling.CheckpointError) as err:
        bert_checkpoint.load_bert_checkpoint(model, prefix)
    message = str(err.value)
    assert "bert/embeddings/word_embeddings" in message
    assert "60" in message and "53" in message
    # Nothing was assigned by the failed load.
    for name, value in all_values(model).items():
        assert np.array_equal(value, before[name]), name

    prefix = _ckpt(tmp_path, "inter", intermediate_size=31)
    with pytest.raises(modeling.CheckpointError, match="intermediate/dense/kernel"):
        bert_checkpoint.load_bert_checkpoint(_model(), prefix)


def test_nonexistent_checkpoint(tmp_path):
    missing = str(tmp_path / "nowhere" / "bert_model.ckpt")
    with pytest.raises(modeling.CheckpointError, match="bert_model.ckpt"):
        bert_checkpoint.load_bert_checkpoint(_model(), missing)
    with pytest.raises(modeling.CheckpointError, match="without a checkpoint"):
        bert_checkpoint.load_bert_checkpoint(_model(), str(tmp_path))


def test_config_round_trips_through_get_config():
    config = modeling.BertConfig(**make_config(layer_norm_type="normformer", **AFTER))
    for model in (modeling.BertModel(config), modeling.BertClassifierModel(config, num_labels=4)):
        clone = type(model).from_config(model.get_config())
        assert clone.config == config
    assert clone.num_labels == 4
