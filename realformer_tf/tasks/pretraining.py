"""Masked-LM + next-sentence pretraining (the original run_pretraining.py objective)."""

import os

import tensorflow as tf
from absl import logging

from realformer_tf import checkpoint as ckpt
from realformer_tf import cli, modeling
from realformer_tf.data import pretraining as data
from realformer_tf.data import integrity
from realformer_tf.training import Task, report_results


def _sparse_nll(labels, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)


class PretrainingTask(Task):
    """Loss = mean masked-LM NLL over real predictions + mean next-sentence NLL."""

    metric_names = (
        "masked_lm_loss", "masked_lm_accuracy", "next_sentence_loss", "next_sentence_accuracy",
    )
    loss_terms = ("masked_lm_loss", "next_sentence_loss")

    def __init__(self, config, init_checkpoint=None):
        self.config = config
        self.init_checkpoint = init_checkpoint

    def build_model(self):
        return modeling.BertPretrainingModel(self.config)

    def initialize(self, model):
        if not self.init_checkpoint:
            return None
        names = ckpt.list_checkpoint(ckpt.resolve_checkpoint(self.init_checkpoint))
        has_heads = any(n.startswith("cls/") for n in names)
        path = model.load_bert_checkpoint(self.init_checkpoint, skip_heads=not has_heads)
        message = f"Initialized from {path}" + ("" if has_heads else " (encoder only; heads fresh)")
        logging.info(message)
        return message

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


def run_pretraining(flags_):
    """The whole run_pretraining.py job from its flags."""
    f = flags_
    cli.require(f.do_train or f.do_eval, "at least one of --do_train or --do_eval must be True")
    config = cli.load_config(f.max_seq_length)
    strategy, float16 = cli.setup_strategy()
    out_dir = cli.worker_output_dir(f.output_dir, strategy)  # f.output_dir on the chief
    cli.announce(config, strategy)
    cli.per_replica(strategy, f.train_batch_size, "train_batch_size")
    cli.per_replica(strategy, f.eval_batch_size, "eval_batch_size")
    files = data.check_files(f.input_file, f.max_seq_length, f.max_predictions_per_seq)
    if f.init_checkpoint:
        ckpt.resolve_checkpoint(f.init_checkpoint)  # fail now, not after set-up
    cli.claim_output_dir(f.output_dir, config, {
        "task": "pretraining", "max_seq_length": f.max_seq_length,
        "max_predictions_per_seq": f.max_predictions_per_seq,
    })

    trainer, _ = cli.start_trainer(PretrainingTask(config, f.init_checkpoint), strategy, f,
                                   f.num_train_steps, f.num_warmup_steps, float16, train=f.do_train)

    with integrity.unreadable_records_named(files):  # a corrupt record met later: named
        if f.do_train:
            print(f"Training on {len(files)} file(s) to step {f.num_train_steps}", flush=True)
            trainer.train(
                data.make_dataset_fn(files, f.max_seq_length, f.max_predictions_per_seq,
                                     f.train_batch_size, is_training=True, seed=f.seed),
                f.num_train_steps,
                summary_dir=os.path.join(out_dir, "summaries", "train"),
            )
            prefix = cli.export_final_checkpoint(trainer.model, out_dir, config)
            print(f"Original-named checkpoint for fine-tuning: {prefix}", flush=True)

        if f.do_eval:
            results = trainer.evaluate(
                data.make_dataset_fn(files, f.max_seq_length, f.max_predictions_per_seq,
                                     f.eval_batch_size, is_training=False, max_steps=f.max_eval_steps),
                -1,
                summary_dir=os.path.join(out_dir, "summaries", "eval"),
            )
            report_results(out_dir, results)
