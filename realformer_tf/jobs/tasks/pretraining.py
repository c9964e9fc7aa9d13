"""Masked-LM + next-sentence pretraining (the original run_pretraining.py objective),
for every model family."""

import dataclasses
import os
from typing import Optional

import tensorflow as tf

import numpy as np

from realformer_tf.jobs import outputs, runner
from realformer_tf.families import variant_evidence
from realformer_tf.data import integrity
from realformer_tf.data import pretraining as data
from realformer_tf.errors import require
from realformer_tf.families import get_family
from realformer_tf.training.task import Task


def _sparse_nll(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


class PretrainingTask(Task):
    """Loss = mean masked-LM NLL over real predictions + mean next-sentence NLL."""

    metric_names = (
        "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy",
    )
    loss_terms = ("masked_lm_loss", "next_sentence_loss")

    def __init__(self, config, init_checkpoint=None, family=None):
        self.family = family or get_family("bert")
        self.config = config
        self.init_checkpoint = init_checkpoint

    def build_model(self):
        return self.family.build_model(self.config, "pretraining")

    def initialize(self, model):
        if not self.init_checkpoint:
            return None
        return self.family.initialize(model, "pretraining", self.init_checkpoint)[0]

    def metric_sums(self, features, outputs):
        weights = tf.cast(features["masked_lm_weights"], tf.float32)
        mlm_logits = outputs["masked_lm_logits"]
        mlm_ids = features["masked_lm_ids"]
        mlm_nll = _sparse_nll(mlm_ids, mlm_logits)
        mlm_correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), mlm_ids), tf.float32)

        nsp_labels = tf.reshape(features["next_sentence_labels"], [-1])
        nsp_logits = outputs["next_sentence_logits"]
        nsp_nll = _sparse_nll(nsp_labels, nsp_logits)
        nsp_correct = tf.cast(tf.equal(tf.argmax(nsp_logits, -1, output_type=tf.int32), nsp_labels), tf.float32)
        count = tf.cast(tf.size(nsp_labels), tf.float32)
        real = tf.reduce_sum(weights)
        return {
            "masked_lm_loss": (tf.reduce_sum(mlm_nll * weights), real),
            "masked_lm_accuracy": (tf.reduce_sum(mlm_correct * weights), real),
            "next_sentence_loss": (tf.reduce_sum(nsp_nll), count),
            "next_sentence_accuracy": (tf.reduce_sum(nsp_correct), count),
        }


@dataclasses.dataclass
class PretrainingOptions(runner.RunOptions):
    """run_pretraining.py's own flags (original names and defaults)."""

    input_file: Optional[str] = None
    eval_input_file: Optional[str] = None
    max_predictions_per_seq: int = 20
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    max_eval_steps: int = 100


class PretrainingJob(runner.Job):
    name = "pretraining"
    kind = "pretraining"
    options_class = PretrainingOptions

    def check_options(self, options):
        require(options.do_train or options.do_eval, "at least one of --do_train or --do_eval must be True")
        require(options.input_file, "--input_file is required (pretraining TFRecords)")
        require(not options.export_dir, "--export_dir exports a causal LM (--model_type=causal_lm); export a "
                "fine-tuned BERT model with export_saved_model.py or run_classifier.py / run_squad.py")

    def batch_size_names(self, options):
        return [n for n, on in (("train_batch_size", options.do_train), ("eval_batch_size", options.do_eval)) if on]

    def evidence_examples(self, options, family, config):
        """The first records of --input_file, with their own masked positions."""
        files = data.expand_input_files(options.input_file)
        spec = data.feature_spec(options.max_seq_length, options.max_predictions_per_seq)
        rows = [tf.io.parse_single_example(r, spec)
                for r in tf.data.TFRecordDataset(files[:1]).take(variant_evidence.NUM_EXAMPLES)]
        if not rows:
            return None
        batch = {k: np.stack([r[k].numpy() for r in rows]).astype(np.float32 if k == "masked_lm_weights" else np.int32)
                 for k in spec if k != "next_sentence_labels"}
        return variant_evidence.Examples(batch, f"{len(rows)} records of --input_file")

    def check_inputs(self, options, family, config):
        self.files = data.check_files(options.input_file, options.max_seq_length, options.max_predictions_per_seq,
                                      log=self.log)
        self.eval_files = (data.check_files(options.eval_input_file, options.max_seq_length,
                                            options.max_predictions_per_seq, log=self.log)
                           if options.eval_input_file else self.files)

    def run_identity(self, options):
        return dict(super().run_identity(options), max_predictions_per_seq=options.max_predictions_per_seq)

    def prepare(self, options, family, config, out_dir):
        if options.do_train:
            self.log(f"Training on {len(self.files)} file(s) to step {options.num_train_steps}")
        return options.num_train_steps, options.num_warmup_steps

    def make_task(self, family, config, options):
        return PretrainingTask(config, options.init_checkpoint, family)

    def _dataset_fn(self, options, batch_size, is_training, max_steps=None):
        return data.make_dataset_fn(self.files if is_training else self.eval_files, options.max_seq_length, options.max_predictions_per_seq,
                                    batch_size, is_training=is_training, seed=options.seed, max_steps=max_steps,
                                    log=self.log)

    def train_dataset_fn(self, options):
        return self._dataset_fn(options, options.train_batch_size, True)

    def reading_inputs(self):
        # A corrupt record met later: named.
        return integrity.unreadable_records_named(sorted(set(self.files) | set(self.eval_files)))

    def evaluate(self, trainer, options, family, config, out_dir):
        if not options.do_eval:
            return
        dataset_fn = self._dataset_fn(options, options.eval_batch_size, False, options.max_eval_steps)
        results = trainer.evaluate(family.adapt_dataset_fn(dataset_fn, config, options), -1,
                                   summary_dir=os.path.join(out_dir, "summaries", "eval"))
        outputs.report_results(out_dir, results, self.log)


def run_pretraining(options, log=runner.say):
    """The whole run_pretraining.py job (a PretrainingOptions); returns the Trainer."""
    return runner.run_job(PretrainingJob(), options, log)
