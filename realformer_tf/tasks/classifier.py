"""Sentence(-pair) classification and regression: GLUE and XNLI (run_classifier.py)."""

import os

import numpy as np
import tensorflow as tf
from official.nlp.tools import tokenization
from scipy import stats
from sklearn import metrics as skm

from realformer_tf import checkpoint as ckpt
from realformer_tf import cli, modeling
from realformer_tf.data import glue, records
from realformer_tf.data.vocab import check_vocab
from realformer_tf.fileio import atomic_output, commit, temporary_name
from realformer_tf.training import Task, report_results


class ClassifierTask(Task):
    """Cross-entropy over the labels (mean squared error for STS-B), padding examples
    (`is_real_example == 0`) excluded."""

    metric_names = ("loss", "accuracy")
    loss_terms = ("loss",)

    def __init__(self, config, num_labels, is_regression, init_checkpoint=None):
        self.config = config
        self.num_labels = num_labels
        self.is_regression = is_regression
        self.init_checkpoint = init_checkpoint

    def build_model(self):
        return modeling.BertClassifierModel(self.config, num_labels=self.num_labels)

    def initialize(self, model):
        if not self.init_checkpoint:
            return "Training from scratch: no --init_checkpoint (expect poor results)"
        path = model.bert.load_bert_checkpoint(self.init_checkpoint)
        return f"Initialized the encoder from {path}; classifier head fresh"

    def per_example_loss(self, labels, logits):
        if self.is_regression:
            return tf.square(logits[:, 0] - tf.cast(labels, tf.float32))
        return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.cast(labels, tf.int32), logits=logits)

    def metric_sums(self, features, outputs):
        logits = outputs["logits"]
        labels = features["label_ids"]
        real = tf.cast(features["is_real_example"], tf.float32)
        count = tf.reduce_sum(real)
        if self.is_regression:
            correct = tf.zeros_like(real)
        else:
            correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), tf.cast(labels, tf.int32)), tf.float32)
        return {
            "loss": (tf.reduce_sum(self.per_example_loss(labels, logits) * real), count),
            "accuracy": (tf.reduce_sum(correct * real), count),
        }


def evaluation_metrics(task, logits, labels):
    """The original eval keys plus the task's official GLUE metric, from numpy arrays."""
    if task.is_regression:
        predictions = logits[:, 0]
        results = {"eval_loss": float(np.mean((predictions - labels) ** 2))}
        results["eval_pearson"] = float(stats.pearsonr(predictions, labels)[0])
        results["eval_spearman"] = float(stats.spearmanr(predictions, labels)[0])
        results["eval_pearson_spearman_avg"] = (results["eval_pearson"] + results["eval_spearman"]) / 2
    else:
        log_probs = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
        labels = labels.astype(np.int64)
        predictions = logits.argmax(-1)
        results = {
            "eval_loss": float(-np.mean(log_probs[np.arange(len(labels)), labels])),
            "eval_accuracy": float(np.mean(predictions == labels)),
        }
        if task.metric == "f1":
            results["eval_f1"] = float(skm.f1_score(labels, predictions, zero_division=0.0))
            results["eval_accuracy_f1_avg"] = (results["eval_f1"] + results["eval_accuracy"]) / 2
        if task.metric == "mcc":
            results["eval_mcc"] = float(skm.matthews_corrcoef(labels, predictions))
    results["loss"] = results["eval_loss"]
    return results


def _softmax(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def write_test_results(path, task, logits):
    """One tab-separated row of class probabilities per example, no header (the
    original format); STS-B writes the predicted score."""
    rows = logits[:, :1] if task.is_regression else _softmax(logits)
    with atomic_output(path) as f:
        for row in rows:
            f.write("\t".join(str(float(p)) for p in row) + "\n")


def _featurize(f, task_name, task, split, tokenizer, output_dir):
    examples = glue.read_examples(task_name, f.data_dir, split)
    path = os.path.join(output_dir, f"{split}.tf_record")
    temporary = temporary_name(path)
    glue.write_features(examples, task, f.max_seq_length, tokenizer, temporary)
    commit(temporary, path)
    return path, len(examples)


def run_classifier(f):
    """The whole run_classifier.py job from its flags."""
    cli.require(f.do_train or f.do_eval or f.do_predict,
                "at least one of --do_train, --do_eval or --do_predict must be True")
    config = cli.load_config(f.max_seq_length)
    task_name, task = glue.get_task(f.task_name)
    strategy, float16 = cli.setup_strategy()
    out_dir = cli.worker_output_dir(f.output_dir, strategy)  # f.output_dir on the chief
    cli.announce(config, strategy)
    print(f"task: {task_name} ({'regression' if task.is_regression else f'{len(task.labels)} labels'})", flush=True)
    for flag in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        cli.per_replica(strategy, getattr(f, flag), flag)
    check_vocab(f.vocab_file)
    if f.init_checkpoint:
        ckpt.resolve_checkpoint(f.init_checkpoint)
    try:
        tokenization.validate_case_matches_checkpoint(f.do_lower_case, f.init_checkpoint)
    except ValueError as e:
        raise cli.UsageError(str(e)) from None
    tokenizer = tokenization.FullTokenizer(vocab_file=f.vocab_file, do_lower_case=f.do_lower_case)
    cli.claim_output_dir(f.output_dir, config, {"task": task_name, "max_seq_length": f.max_seq_length})
    spec = glue.feature_spec(f.max_seq_length, task.is_regression)

    # Read and check every input before any training starts.
    splits = [s for s, on in (("train", f.do_train), ("dev", f.do_eval), ("test", f.do_predict)) if on]
    data = {s: _featurize(f, task_name, task, s, tokenizer, out_dir) for s in splits}

    num_train_steps = 0
    if f.do_train:
        num_train_steps = max(1, int(data["train"][1] / f.train_batch_size * f.num_train_epochs))
    num_labels = 1 if task.is_regression else len(task.labels)
    trainer, _ = cli.start_trainer(
        ClassifierTask(config, num_labels, task.is_regression, f.init_checkpoint), strategy, f,
        num_train_steps, int(num_train_steps * f.warmup_proportion), float16, train=f.do_train)

    if f.do_train:
        print(f"Training on {data['train'][1]} examples for {f.num_train_epochs} epochs = "
              f"{num_train_steps} steps of {f.train_batch_size}", flush=True)
        trainer.train(
            records.make_dataset_fn([data["train"][0]], spec, f.train_batch_size, True, seed=f.seed),
            num_train_steps,
            summary_dir=os.path.join(out_dir, "summaries", "train"),
        )
        prefix = cli.export_final_checkpoint(trainer.model, out_dir, config)
        print(f"Original-named checkpoint: {prefix}", flush=True)

    if f.do_eval:
        out = _predict(trainer, data["dev"][0], spec, f.eval_batch_size)
        results = evaluation_metrics(task, out["logits"], out["label_ids"])
        results["global_step"] = int(trainer.global_step.numpy())
        report_results(out_dir, results, f"Eval results ({data['dev'][1]} examples)")

    if f.do_predict:
        out = _predict(trainer, data["test"][0], spec, f.predict_batch_size)
        path = os.path.join(out_dir, "test_results.tsv")
        write_test_results(path, task, out["logits"])
        print(f"Wrote {len(out['logits'])} rows of predictions to {path}", flush=True)
    return trainer


def _predict(trainer, path, spec, batch_size):
    """Model outputs for every real example of a TFRecord file, in file order."""
    out = trainer.predict(
        records.make_dataset_fn([path], spec, batch_size, False, pad_to_full_batches=True),
        ["logits"], ["label_ids", "is_real_example"],
    )
    real = out["is_real_example"].astype(bool)
    return {k: v[real] for k, v in out.items()}

