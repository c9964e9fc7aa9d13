"""Sentence(-pair) classification and regression: GLUE and XNLI (run_classifier.py),
for every model family."""

import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf
from official.nlp.tools import tokenization
from scipy import stats
from sklearn import metrics as skm

from realformer_tf.serving import export
from realformer_tf.jobs import outputs, runner
from realformer_tf.families import variant_evidence
from realformer_tf.data import glue, records
from realformer_tf.data.vocab import check_vocab
from realformer_tf.errors import UsageError, require
from realformer_tf.families import get_family
from realformer_tf.fileio import atomic_output, commit, temporary_name
from realformer_tf.training.task import Task


class ClassifierTask(Task):
    """Cross-entropy over the labels (mean squared error for STS-B), padding examples
    (`is_real_example == 0`) excluded."""

    metric_names = ("loss", "accuracy")
    loss_terms = ("loss",)

    def __init__(self, config, num_labels, is_regression, init_checkpoint=None, family=None):
        self.family = family or get_family("bert")
        self.config = config
        self.num_labels = num_labels
        self.is_regression = is_regression
        self.init_checkpoint = init_checkpoint

    def build_model(self):
        return self.family.build_model(self.config, "classifier", num_labels=self.num_labels)

    def initialize(self, model):
        if not self.init_checkpoint:
            return "Training from scratch: no --init_checkpoint (expect poor results)"
        return self.family.initialize(model, "classifier", self.init_checkpoint, self.num_labels)[0]

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


def check_case(do_lower_case, init_checkpoint):
    """Model Garden's check that --do_lower_case fits a Google checkpoint's name."""
    try:
        tokenization.validate_case_matches_checkpoint(do_lower_case, init_checkpoint)
    except ValueError as e:
        raise UsageError(str(e)) from None


@dataclasses.dataclass
class ClassifierOptions(runner.RunOptions):
    """run_classifier.py's own flags (original names and defaults)."""

    task_name: Optional[str] = None
    data_dir: Optional[str] = None
    vocab_file: Optional[str] = None
    do_lower_case: bool = True
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1


class ClassifierJob(runner.Job):
    name = "classifier"
    kind = "classifier"
    options_class = ClassifierOptions

    def check_options(self, options):
        require(options.do_train or options.do_eval or options.do_predict,
                "at least one of --do_train, --do_eval or --do_predict must be True")
        require(options.data_dir, "--data_dir is required (the task's .tsv files)")
        self.task_name, self.task = glue.get_task(options.task_name)

    def describe(self, options):
        task = self.task
        return f"task: {self.task_name} ({'regression' if task.is_regression else f'{len(task.labels)} labels'})"

    def batch_size_names(self, options):
        return ("train_batch_size", "eval_batch_size", "predict_batch_size")

    def evidence_examples(self, options, family, config):
        """A few examples of the first split the run reads, 15% of their tokens masked."""
        split = "train" if options.do_train else ("dev" if options.do_eval else "test")
        examples = glue.read_examples(self.task_name, options.data_dir, split)[:variant_evidence.NUM_EXAMPLES]
        tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file, do_lower_case=options.do_lower_case)
        return variant_evidence.from_texts([(e.text_a, e.text_b) for e in examples], tokenizer,
                                           options.max_seq_length, f"{split} examples of --data_dir")

    def check_inputs(self, options, family, config):
        check_vocab(options.vocab_file)
        check_case(options.do_lower_case, options.init_checkpoint)
        self.tokenizer = tokenization.FullTokenizer(vocab_file=options.vocab_file,
                                                    do_lower_case=options.do_lower_case)

    def run_identity(self, options):
        return dict(super().run_identity(options), task=self.task_name)

    def prepare(self, options, family, config, out_dir):
        """Featurizes every split the run uses (all inputs read before training)."""
        on = {"train": options.do_train, "dev": options.do_eval, "test": options.do_predict}
        self.spec = glue.feature_spec(options.max_seq_length, self.task.is_regression)
        self.data = {split: self._featurize(options, split, out_dir) for split in on if on[split]}
        if not options.do_train:
            return 0, 0
        count = self.data["train"][1]
        steps = max(1, runner.epochs_to_steps(count, options))
        self.log(f"Training on {count} examples for {options.num_train_epochs} epochs = "
                   f"{steps} steps of {options.train_batch_size * options.gradient_accumulation_steps}")
        return steps, int(steps * options.warmup_proportion)

    def _featurize(self, options, split, out_dir):
        examples = glue.read_examples(self.task_name, options.data_dir, split)
        path = os.path.join(out_dir, f"{split}.tf_record")
        temporary = temporary_name(path)
        glue.write_features(examples, self.task, options.max_seq_length, self.tokenizer, temporary)
        commit(temporary, path)
        return path, len(examples)

    def make_task(self, family, config, options):
        num_labels = 1 if self.task.is_regression else len(self.task.labels)
        return ClassifierTask(config, num_labels, self.task.is_regression, options.init_checkpoint, family)

    def train_dataset_fn(self, options):
        return records.make_dataset_fn([self.data["train"][0]], self.spec, options.train_batch_size, True,
                                       seed=options.seed, log=self.log)

    def evaluate(self, trainer, options, family, config, out_dir):
        if options.do_eval:
            out = self._predict(trainer, family, config, options, "dev", options.eval_batch_size)
            results = evaluation_metrics(self.task, out["logits"], out["label_ids"])
            results["global_step"] = int(trainer.global_step.numpy())
            outputs.report_results(out_dir, results, self.log, f"Eval results ({self.data['dev'][1]} examples)")
        if options.do_predict:
            out = self._predict(trainer, family, config, options, "test", options.predict_batch_size)
            path = os.path.join(out_dir, "test_results.tsv")
            write_test_results(path, self.task, out["logits"])
            self.log(f"Wrote {len(out['logits'])} rows of predictions to {path}")

    def _predict(self, trainer, family, config, options, split, batch_size):
        """Model outputs for every real example of a split, in file order."""
        dataset_fn = records.make_dataset_fn([self.data[split][0]], self.spec, batch_size, False,
                                             pad_to_full_batches=True)
        out = trainer.predict(family.adapt_dataset_fn(dataset_fn, config, options),
                              ["logits"], ["label_ids", "is_real_example"])
        real = out["is_real_example"].astype(bool)
        return {k: v[real] for k, v in out.items()}

    def export(self, options, family, config, out_dir):
        task = self.task
        return export.export_from_checkpoint(
            options.export_dir, family=family, config=config, init_checkpoint=family.trained_checkpoint(out_dir),
            task="classifier", vocab_file=options.vocab_file, do_lower_case=options.do_lower_case,
            max_seq_length=options.max_seq_length, label_names=None if task.is_regression else list(task.labels),
            is_regression=task.is_regression, input_options=options, log=self.log)


def run_classifier(options, log=runner.say):
    """The whole run_classifier.py job (a ClassifierOptions); returns the Trainer."""
    return runner.run_job(ClassifierJob(), options, log)
