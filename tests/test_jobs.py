"""The job matrix {pretraining, classifier, SQuAD} x {BERT, ETC} through the one runner,
in-process (plain options, no flags): outputs, resume, --export_dir, and the exported
model serving raw text exactly as the training pipeline featurized it.

The classifier and SQuAD jobs start from configs that do not state residual_attention
(the eleven fields of a release's bert_config.json): a run decides its model once, at
its start, writes the decision into output_dir, and every later phase (the export
included) and every later program given the output_dir use it."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
import test_squad as sq
from realformer_tf.jobs import runner
from realformer_tf.families import get_family
from realformer_tf.jobs.tasks.classifier import ClassifierOptions, run_classifier
from realformer_tf.jobs.tasks.pretraining import PretrainingOptions, run_pretraining
from realformer_tf.jobs.tasks.squad import SquadOptions, run_squad

FAMILIES = ("bert", "etc")
QUIET = dict(iterations_per_loop=2, save_checkpoints_steps=2, seed=1, learning_rate=1e-3)


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, ensure_ascii=False)
    return str(path)


def model_config(tmp_path, family, vocab_size, stated=True, **overrides):
    """A tiny config file of the family; stated=False leaves residual_attention out."""
    if family == "etc":
        values = h.tiny_etc_config_dict(vocab_size=vocab_size, **overrides)
    else:
        values = h.tiny_config_dict(vocab_size=vocab_size, max_position_embeddings=64, **overrides)
    if not stated:
        del values["residual_attention"]
    return write_json(tmp_path / f"{family}_config.json", values)


def check_decided_config(out, family):
    """output_dir's config file states the decision (from scratch: residual attention on)."""
    written = json.load(open(os.path.join(out, get_family(family).config_name)))
    assert written["residual_attention"] is True


def read_results(out):
    return dict(line.split(" = ") for line in open(os.path.join(out, "eval_results.txt")).read().splitlines())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_pretraining_job_trains_evaluates_and_resumes(tmp_path, family):
    records = h.write_pretraining_records(tmp_path / "train.tfrecord", 24, 32, 5)
    out = str(tmp_path / "out")
    options = PretrainingOptions(
        input_file=records, output_dir=out, bert_config_file=model_config(tmp_path, family, h.vocab_size()),
        model_type=family, etc_tokens_per_global=8, max_seq_length=32, max_predictions_per_seq=5,
        do_train=True, do_eval=True, train_batch_size=4, eval_batch_size=4, num_train_steps=4,
        num_warmup_steps=1, max_eval_steps=2, **QUIET)
    trainer = run_pretraining(options)
    assert int(trainer.global_step.numpy()) == 4
    results = read_results(out)
    assert {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
            "next_sentence_loss"} == set(results)
    assert os.path.exists(os.path.join(out, get_family(family).checkpoint_name + ".index"))
    identity = json.load(open(os.path.join(out, "run_config.json")))
    assert identity["task"] == "pretraining" and ("etc_tokens_per_global" in identity) == (family == "etc")

    # The same output_dir with more steps resumes where the first run stopped.
    trainer = run_pretraining(PretrainingOptions(**dict(vars(options), num_train_steps=6)))
    assert int(trainer.global_step.numpy()) == 6
    assert read_results(out)["global_step"] == "6"


@pytest.mark.slow
# BERT only: ETC's serving graph (its global tokens built in the graph) is exported and
# served by test_squad_job_on_a_long_document_exports_and_serves[etc], through the same
# export code as a classifier's.
@pytest.mark.parametrize("family", ["bert"])
def test_classifier_job_exports_a_model_that_serves_what_it_predicted(tmp_path, family):
    data_dir = h.write_glue_mrpc(str(tmp_path / "mrpc"), num_train=12, num_dev=6)
    vocab = h.write_vocab(tmp_path / "vocab.txt")
    out, export_dir = str(tmp_path / "out"), str(tmp_path / "export")
    options = ClassifierOptions(
        task_name="MRPC", data_dir=data_dir, vocab_file=vocab, output_dir=out, export_dir=export_dir,
        bert_config_file=model_config(tmp_path, family, h.vocab_size(), stated=False), model_type=family,
        etc_tokens_per_global=8, max_seq_length=40, do_train=True, do_eval=True, do_predict=True,
        train_batch_size=4, eval_batch_size=4, predict_batch_size=4, num_train_epochs=1, **QUIET)
    run_classifier(options)
    assert {"eval_accuracy", "eval_f1", "eval_loss", "global_step", "loss"} <= set(read_results(out))
    predicted = np.loadtxt(os.path.join(out, "test_results.tsv"), ndmin=2)

    # The export tokenizes and builds the model inputs (ETC: global tokens) in the graph,
    # and loads without this package.
    path = os.path.join(export_dir, "1")
    info = json.load(open(os.path.join(path, "assets.extra", "realformer_export.json")))
    assert info["model_type"] == family and info["task"] == "classifier"
    served = _serve_test_split(path, data_dir)
    assert served.shape == predicted.shape
    np.testing.assert_allclose(served, predicted, atol=1e-5)

    # Exported again by the program, from what the run left in output_dir alone.
    check_decided_config(out, family)
    fam = get_family(family)
    again = h.run_script("export_saved_model.py", *h.flags(
        bert_config_file=os.path.join(out, fam.config_name), init_checkpoint=os.path.join(out, fam.checkpoint_name),
        model_type=family, etc_tokens_per_global=8, vocab_file=vocab, task_name="MRPC", max_seq_length=40,
        export_dir=str(tmp_path / "export_again")))
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    np.testing.assert_allclose(_serve_test_split(os.path.join(tmp_path, "export_again", "1"), data_dir), predicted,
                               atol=1e-5)


@pytest.mark.slow
def test_pretrain_then_fine_tune_export_and_serve(tmp_path):
    """The mission's chain as a user runs it: pretrain from an eleven-field config, then
    fine-tune from what the run left (its bert_config.json states the decision), export,
    and serve raw text: the SavedModel gives the probabilities test_results.tsv holds."""
    pretrained = str(tmp_path / "pretrained")
    run_pretraining(PretrainingOptions(
        input_file=h.write_pretraining_records(tmp_path / "train.tfrecord", 16, 40, 5), output_dir=pretrained,
        bert_config_file=model_config(tmp_path, "bert", h.vocab_size(), stated=False), max_seq_length=40,
        max_predictions_per_seq=5, do_train=True, train_batch_size=4, num_train_steps=3, num_warmup_steps=1,
        **QUIET))
    check_decided_config(pretrained, "bert")

    data_dir = h.write_glue_mrpc(str(tmp_path / "mrpc"), num_train=8, num_dev=4)
    out, export_dir = str(tmp_path / "out"), str(tmp_path / "export")
    run_classifier(ClassifierOptions(
        task_name="MRPC", data_dir=data_dir, vocab_file=h.write_vocab(tmp_path / "vocab.txt"), output_dir=out,
        export_dir=export_dir, bert_config_file=os.path.join(pretrained, "bert_config.json"),
        init_checkpoint=os.path.join(pretrained, "bert_model.ckpt"), max_seq_length=40, do_train=True,
        do_predict=True, train_batch_size=4, predict_batch_size=4, num_train_epochs=1, **QUIET))
    check_decided_config(out, "bert")
    predicted = np.loadtxt(os.path.join(out, "test_results.tsv"), ndmin=2)
    np.testing.assert_allclose(_serve_test_split(os.path.join(export_dir, "1"), data_dir), predicted, atol=1e-5)


# Runs in a fresh interpreter outside the repository with realformer_tf and Model Garden
# unimportable: the SavedModel must serve with TensorFlow and tensorflow-text alone.
SERVE_WITHOUT_PACKAGE = r"""
import importlib.abc, json, sys

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("realformer_tf", "official"):
            raise ModuleNotFoundError(name + " is blocked in this test")

sys.meta_path.insert(0, Block())
import tensorflow as tf
import tensorflow_text  # registers the tokenizer ops

path, text_a, text_b, out = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
serve = tf.saved_model.load(path).signatures["serving_default"]
result = serve(text_a=tf.constant(text_a), text_b=tf.constant(text_b))
json.dump(result["probabilities"].numpy().tolist(), open(out, "w"))
"""


def _serve_test_split(path, data_dir):
    import subprocess
    import sys

    rows = [line.rstrip("\n").split("\t") for line in open(os.path.join(data_dir, "test.tsv"), encoding="utf-8")][1:]
    out = os.path.join(os.path.dirname(path), "served.json")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", SERVE_WITHOUT_PACKAGE, path, json.dumps([r[3] for r in rows]),
                           json.dumps([r[4] for r in rows]), out], cwd=os.path.dirname(path), env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return np.array(json.load(open(out)))


def long_document_squad():
    """SQuAD v2.0 JSON whose one context is all the test paragraphs joined (a
    multi-paragraph document), with every question re-anchored in it."""
    context = "\n\n".join(sq.CONTEXTS + [sq.CONTEXT_2.replace("RealFormer", "NormFormer")])
    data = sq.squad_json(True)
    qas = [qa for paragraph in data["data"][0]["paragraphs"] for qa in paragraph["qas"]]
    for qa in qas:
        for key in ("answers", "plausible_answers"):
            for answer in qa.get(key, []):
                answer["answer_start"] = context.index(answer["text"])
    return {"version": "v2.0", "data": [{"title": "long", "paragraphs": [{"context": context, "qas": qas}]}]}


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_squad_job_on_a_long_document_exports_and_serves(tmp_path, family):
    files = sq.write_files(tmp_path)
    vocab, vocab_size = files["vocab"], files["vocab_size"]
    data_file = write_json(tmp_path / "long.json", long_document_squad())
    # ETC reads the whole document in one window; BERT needs doc_stride windows.
    seq = 256 if family == "etc" else 64
    out, export_dir = str(tmp_path / "out"), str(tmp_path / "export")
    options = SquadOptions(
        vocab_file=vocab, train_file=data_file, predict_file=data_file, output_dir=out, export_dir=export_dir,
        bert_config_file=model_config(tmp_path, family, vocab_size, stated=False),
        model_type=family, etc_tokens_per_global=16, max_seq_length=seq, doc_stride=32, max_query_length=16,
        do_train=True, do_predict=True, version_2_with_negative=True, train_batch_size=2, predict_batch_size=3,
        num_train_epochs=1, n_best_size=5, **QUIET)
    trainer = run_squad(options)
    results = read_results(out)
    assert {"exact_match", "f1", "total", "HasAns_f1", "NoAns_f1", "best_f1_thresh"} <= set(results)
    assert int(results["total"]) == len(sq.ANSWERABLE) + len(sq.IMPOSSIBLE)
    for name in ("predictions.json", "nbest_predictions.json", "null_odds.json"):
        assert os.path.exists(os.path.join(out, name)), name
    check_decided_config(out, family)
    _check_squad_export(os.path.join(export_dir, "1"), trainer, options, out)


def _first_eval_feature(out, seq):
    from realformer_tf.data import squad as data

    dataset = tf.data.TFRecordDataset(os.path.join(out, "eval.tf_record")).map(
        lambda r: tf.io.parse_single_example(r, data.feature_spec(seq, False)))
    return {k: v.numpy()[None].astype(np.int32) for k, v in next(iter(dataset)).items()}


def _check_squad_export(path, trainer, options, out):
    """The served logits equal the trained model's on the same features, and the text
    signature builds the features run_squad.py built (first window)."""
    import tensorflow_text  # noqa: F401

    family = get_family(options.model_type)
    feature = _first_eval_feature(out, options.max_seq_length)
    inputs = {k: feature[k] for k in ("input_ids", "input_mask", "segment_ids")}
    reference = trainer.model(family.adapt_features({k: tf.constant(v) for k, v in inputs.items()},
                                                    trainer.model.config, options), training=False)
    loaded = tf.saved_model.load(path)
    served = loaded.signatures["serve_token_ids"](**{k: tf.constant(v) for k, v in inputs.items()})
    np.testing.assert_allclose(served["start_logits"].numpy(), reference["start_logits"].numpy(), atol=1e-5)
    np.testing.assert_allclose(served["end_logits"].numpy(), reference["end_logits"].numpy(), atol=1e-5)
    question = sq.ANSWERABLE[0][2]
    context = long_document_squad()["data"][0]["paragraphs"][0]["context"]
    text = loaded.signatures["serving_default"](text_a=tf.constant([question]), text_b=tf.constant([context]))
    length = int(feature["input_mask"].sum())
    np.testing.assert_array_equal(text["input_ids"].numpy()[0, :length], feature["input_ids"][0, :length])
    np.testing.assert_allclose(text["start_logits"].numpy()[0, :length],
                               reference["start_logits"].numpy()[0, :length], atol=1e-5)


def test_runner_refuses_bad_options_before_touching_output_dir(tmp_path):
    from realformer_tf.errors import UsageError

    config = model_config(tmp_path, "etc", h.vocab_size())
    out = tmp_path / "out"
    with pytest.raises(UsageError, match="--etc_tokens_per_global=0"):
        run_pretraining(PretrainingOptions(input_file="x", output_dir=str(out), bert_config_file=config,
                                           model_type="etc", etc_tokens_per_global=0, do_train=True))
    with pytest.raises(UsageError, match="--model_type='gpt'"):
        run_pretraining(PretrainingOptions(input_file="x", output_dir=str(out), bert_config_file=config,
                                           model_type="gpt", do_train=True))
    assert not out.exists()


def test_options_from_flag_values_keep_only_fields():
    values = {"output_dir": "o", "do_train": True, "unrelated_flag": 3, "input_file": "f"}
    options = runner.options_from(PretrainingOptions, values)
    assert options.output_dir == "o" and options.input_file == "f" and options.do_train
    assert not hasattr(options, "unrelated_flag")


def test_orbit_loop_messages_leave_stdout_checkpoint_messages_stay(capsys):
    import orbit.controller as controller

    from realformer_tf.training.orbit_runner import orbit_messages_filtered

    with orbit_messages_filtered():
        controller._log("train | step:     10 | steps/sec:  1.0 | output:\n    {'loss': 1.0}")
        controller._log(" eval | step:     10 | eval time:  1.0 sec | output: {'loss': 1.0}")
        controller._log("saved checkpoint to /tmp/x/ckpt-10.")
        print("progress 10/20")
    assert capsys.readouterr().out == "saved checkpoint to /tmp/x/ckpt-10.\nprogress 10/20\n"
    print("after")
    assert capsys.readouterr().out == "after\n"
