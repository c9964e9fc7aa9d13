"""Pretraining end to end: raw text -> create_pretraining_data.py -> run_pretraining.py
with the original flags; the training loop learns (kill -9 and resume: test_kill_resume.py)."""

import glob
import json
import math
import os

import pytest

import helpers_data as h

MAX_SEQ = 32
MAX_PRED = 5
EVAL_KEYS = {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
             "next_sentence_accuracy", "next_sentence_loss"}


def _check(proc, what):
    assert proc.returncode == 0, f"{what} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Text + vocab + tiny config, and the TFRecords create_pretraining_data.py made."""
    d = tmp_path_factory.mktemp("pretraining_corpus")
    vocab = h.write_vocab(d / "vocab.txt")
    text = h.write_text(d / "text.txt", num_docs=6, sentences_per_doc=8)
    config = h.write_config(d / "bert_config.json")
    records = str(d / "examples.tfrecord")
    proc = h.run_script(
        "create_pretraining_data.py",
        *h.flags(input_file=text, output_file=records, vocab_file=vocab, do_lower_case=True,
                 max_seq_length=MAX_SEQ, max_predictions_per_seq=MAX_PRED, masked_lm_prob=0.15,
                 random_seed=12345, dupe_factor=2),
    )
    _check(proc, "create_pretraining_data.py")
    assert os.path.exists(records) and not glob.glob(records + ".incomplete*")
    return dict(dir=d, vocab=vocab, text=text, config=config, records=records)


def _pretraining_args(corpus, output_dir, **overrides):
    values = dict(
        input_file=corpus["records"], output_dir=output_dir, do_train=True, do_eval=True,
        bert_config_file=corpus["config"], train_batch_size=8, max_seq_length=MAX_SEQ,
        max_predictions_per_seq=MAX_PRED, num_train_steps=10, num_warmup_steps=2,
        learning_rate=1e-3, save_checkpoints_steps=5, iterations_per_loop=5, max_eval_steps=3,
    )
    values.update(overrides)
    return h.flags(**values)


def _read_results(path):
    results = {}
    with open(path) as f:
        for line in f:
            key, value = line.split(" = ")
            results[key.strip()] = float(value)
    return results


@pytest.mark.slow
def test_text_to_pretrained_checkpoint(corpus, tmp_path):
    import tensorflow as tf

    from realformer_tf import modeling

    # create_pretraining_data.py wrote the original features at the requested sizes.
    first = next(iter(tf.data.TFRecordDataset(corpus["records"]).take(1)))
    feats = tf.train.Example.FromString(first.numpy()).features.feature
    assert len(feats["input_ids"].int64_list.value) == MAX_SEQ
    assert len(feats["masked_lm_positions"].int64_list.value) == MAX_PRED

    out = str(tmp_path / "out")
    steps = 10
    proc = h.run_script("run_pretraining.py", *_pretraining_args(corpus, out, num_train_steps=steps, seed=5))
    _check(proc, "run_pretraining.py")
    assert proc.stdout.splitlines()[0].startswith("RealFormer: residual attention on"), proc.stdout
    assert "Traceback" not in proc.stderr

    results = _read_results(os.path.join(out, "eval_results.txt"))
    assert set(results) == EVAL_KEYS
    assert all(math.isfinite(v) for v in results.values()), results
    assert results["global_step"] == steps
    assert results["loss"] == pytest.approx(results["masked_lm_loss"] + results["next_sentence_loss"], rel=1e-5)
    assert 0.0 <= results["masked_lm_accuracy"] <= 1.0 and 0.0 <= results["next_sentence_accuracy"] <= 1.0

    # The original-named checkpoint for other BERT tools.
    prefix = os.path.join(out, "bert_model.ckpt")
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    cfg = h.tiny_config_dict()
    expected = {
        "bert/embeddings/word_embeddings": [cfg["vocab_size"], 16],
        "bert/embeddings/position_embeddings": [cfg["max_position_embeddings"], 16],
        "bert/embeddings/token_type_embeddings": [cfg["type_vocab_size"], 16],
        "bert/encoder/layer_1/attention/self/query/kernel": [16, 16],
        "bert/encoder/layer_1/intermediate/dense/kernel": [16, 32],
        "bert/pooler/dense/kernel": [16, 16],
        "cls/predictions/transform/dense/kernel": [16, 16],
        "cls/predictions/transform/LayerNorm/gamma": [16],
        "cls/predictions/output_bias": [cfg["vocab_size"]],
        "cls/seq_relationship/output_weights": [2, 16],
        "cls/seq_relationship/output_bias": [2],
    }
    for name, shape in expected.items():
        assert shapes.get(name) == shape, (name, shapes.get(name))
    assert not any(".ATTRIBUTES" in n for n in shapes), "object-based names leaked into bert_model.ckpt"
    # The copy of the config next to it loads back as the same model.
    assert modeling.BertConfig.from_json_file(os.path.join(out, "bert_config.json")).to_dict() == \
        modeling.BertConfig(**cfg).to_dict()

    # run_config.json records every option as used: rerun from it alone, the same run.
    record = json.load(open(os.path.join(out, "run_config.json")))["run"]
    assert record["package_version"] and record["flags"]["seed"] == 5
    assert record["flags"]["input_file"] == os.path.abspath(corpus["records"])
    assert record["flags"]["num_train_steps"] == steps and record["flags"]["tpu_timeout_s"] == 60  # every flag
    again = str(tmp_path / "again")
    rerun = h.run_script("run_pretraining.py", *h.flags(**{k: v for k, v in dict(
        record["flags"], output_dir=again).items() if v is not None}))
    _check(rerun, "run_pretraining.py from run_config.json")
    assert _read_results(os.path.join(again, "eval_results.txt")) == results


def test_loss_decreases_on_a_repeated_batch(tmp_path):
    import keras
    import tensorflow as tf

    from realformer_tf import optimization
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(0)
    config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    batch = h.fixed_pretraining_batch(8, 16, 4, seed=3)

    def dataset_fn(input_context=None, start_step=0):
        return tf.data.Dataset.from_tensors(batch).repeat()

    steps = 30
    trainer = Trainer(
        PretrainingTask(config), tf.distribute.get_strategy(), str(tmp_path / "model"),
        optimizer_fn=lambda: optimization.create_optimizer("adamw", 3e-2, steps, 2),
        steps_per_loop=10, save_checkpoints_steps=100, global_batch_size=8,
    )
    assert trainer.restore_or_initialize() is None
    before = trainer.evaluate(dataset_fn, 1)
    lines = []
    trainer.train(dataset_fn, steps, log_fn=lines.append)
    after = trainer.evaluate(dataset_fn, 1)

    assert before["global_step"] == 0 and after["global_step"] == steps
    assert len(lines) == 3 and lines[-1].startswith(f"step {steps}/{steps} (100%)")
    assert after["masked_lm_loss"] < 0.5 * before["masked_lm_loss"], (before, after)
    assert after["next_sentence_loss"] < before["next_sentence_loss"], (before, after)
    assert after["loss"] == pytest.approx(after["masked_lm_loss"] + after["next_sentence_loss"])


def test_evaluation_to_the_end_of_the_data_counts_every_batch_once(tmp_path):
    """Regression: orbit's run-to-exhaustion eval loop calls the step once more when the
    data ends; a metric whose count is a static batch size (next-sentence) must not count
    that call. Compares with a direct computation over the same 16 records."""
    import numpy as np
    import tensorflow as tf

    from realformer_tf.data import pretraining as data
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.training.trainer import Trainer

    config = h.tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    records = h.write_pretraining_records(tmp_path / "eval.tfrecord", 16, 16, 4)
    trainer = Trainer(PretrainingTask(config), tf.distribute.get_strategy(), str(tmp_path / "out"))
    results = trainer.evaluate(data.make_dataset_fn([records], 16, 4, 8, is_training=False), -1)

    batch = next(iter(data.make_dataset_fn([records], 16, 4, 16, is_training=False)()))
    logits = trainer.model(batch, training=False)["next_sentence_logits"].numpy()
    labels = batch["next_sentence_labels"].numpy()[:, 0]
    accuracy = float(np.mean(logits.argmax(-1) == labels))
    log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
    loss = float(-np.mean(log_probs[np.arange(16), labels]))
    assert results["next_sentence_accuracy"] == pytest.approx(accuracy)
    assert results["next_sentence_loss"] == pytest.approx(loss, rel=1e-5)
