"""SQuAD v1.1 / v2.0 span prediction (the original run_squad.py job), for every model
family.

Training: the loss is the original's `(start_loss + end_loss) / 2`, each the mean
cross-entropy of the gold start / end position over the batch's features (v2.0
impossible questions point at [CLS], position 0). Prediction: start/end logits for every
doc_stride window of every question, then the original n-best post-processing, written
as predictions.json / nbest_predictions.json (/ null_odds.json), and, when the
predict file has gold answers, the official SQuAD metrics in eval_results.txt.

With `--model_type=etc` and a long `--max_seq_length` (thousands of tokens) a whole
multi-paragraph context fits in one window: ETC's global-local attention keeps the cost
linear in its length.
"""

import dataclasses
import os
from typing import Optional

import tensorflow as tf

from realformer_tf.serving import export
from realformer_tf.jobs import outputs, runner
from realformer_tf.families import variant_evidence
from realformer_tf.data import records
from realformer_tf.data import squad as data
from realformer_tf.errors import require
from realformer_tf.families import get_family
from realformer_tf.jobs.tasks.classifier import check_case
from realformer_tf.training.task import Task


def _nll(positions, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.reshape(tf.cast(positions, tf.int32), [-1]), logits=tf.cast(logits, tf.float32))


class SquadTask(Task):
    """Span start/end cross-entropy; `loss` is their average, as in the original."""

    metric_names = ("loss", "start_loss", "end_loss")
    loss_terms = ("loss",)

    def __init__(self, config, init_checkpoint=None, family=None):
        self.family = family or get_family("bert")
        self.config = config
        self.init_checkpoint = init_checkpoint
        self.head_initialized = False  # the span head came from init_checkpoint

    def build_model(self):
        return self.family.build_model(self.config, "squad")

    def initialize(self, model):
        if not self.init_checkpoint:
            return "No --init_checkpoint: starting from random weights (expect poor results)"
        message, self.head_initialized = self.family.initialize(model, "squad", self.init_checkpoint)
        return message

    def metric_sums(self, features, outputs):
        start = _nll(features["start_positions"], outputs["start_logits"])
        end = _nll(features["end_positions"], outputs["end_logits"])
        count = tf.cast(tf.size(start), tf.float32)
        return {
            "loss": (tf.reduce_sum((start + end) / 2.0), count),
            "start_loss": (tf.reduce_sum(start), count),
            "end_loss": (tf.reduce_sum(end), count),
        }


@dataclasses.dataclass
class SquadOptions(runner.RunOptions):
    """run_squad.py's own flags (original names and defaults)."""

    max_seq_length: int = 384
    vocab_file: Optional[str] = None
    train_file: Optional[str] = None
    predict_file: Optional[str] = None
    do_lower_case: bool = True
    doc_stride: int = 128
    max_query_length: int = 64
    num_train_epochs: float = 3.0
    warmup_proportion: float = 0.1
    n_best_size: int = 20
    max_answer_length: int = 30
    verbose_logging: bool = False
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0


def check_squad_options(o):
    require(o.do_train or o.do_predict, "at least one of --do_train or --do_predict must be True")
    require(not o.do_eval, "run_squad.py has no --do_eval (the original has none): use --do_predict; a "
            "--predict_file with answers (e.g. dev-v1.1.json) is also evaluated")
    require(not o.do_train or o.train_file, "--do_train needs --train_file (e.g. train-v1.1.json)")
    require(not o.do_predict or o.predict_file, "--do_predict needs --predict_file (e.g. dev-v1.1.json)")
    require(o.max_seq_length > o.max_query_length + 3,
            f"--max_seq_length={o.max_seq_length} must be greater than --max_query_length="
            f"{o.max_query_length} + 3 ([CLS] and two [SEP]); lower --max_query_length")
    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                 "train_batch_size", "predict_batch_size"):
        require(getattr(o, name) >= 1, f"--{name} must be a positive integer")


class SquadJob(runner.Job):
    name = "squad"
    kind = "squad"
    options_class = SquadOptions

    def check_options(self, options):
        check_squad_options(options)

    def describe(self, options):
        return f"task: SQuAD {'v2.0 (with unanswerable questions)' if options.version_2_with_negative else 'v1.1'}"

    def batch_size_names(self, options):
        return [n for n, on in (("train_batch_size", options.do_train),
                                ("predict_batch_size", options.do_predict)) if on]

    def evidence_examples(self, options, family, config):
        """A few questions with their contexts, 15% of their tokens masked."""
        o, v2 = options, options.version_2_with_negative
        path, flag, training = ((o.train_file, "train_file", True) if o.do_train
                                else (o.predict_file, "predict_file", False))
        examples = data.read_examples(data.load_squad_file(path, flag, training, v2), training, v2)
        tokenizer = data.make_tokenizer(o.vocab_file, o.do_lower_case, config.vocab_size)
        texts = [(e.question_text, " ".join(e.doc_tokens)) for e in examples[:variant_evidence.NUM_EXAMPLES]]
        return variant_evidence.from_texts(texts, tokenizer, o.max_seq_length, f"questions of --{flag}")

    def check_inputs(self, options, family, config):
        """Reads and checks the JSON files before anything is written or trained."""
        o, v2 = options, options.version_2_with_negative
        self.tokenizer = data.make_tokenizer(o.vocab_file, o.do_lower_case, config.vocab_size)
        check_case(o.do_lower_case, o.init_checkpoint)
        self.train_file = data.load_squad_file(o.train_file, "train_file", True, v2) if o.do_train else None
        self.predict_file = data.load_squad_file(o.predict_file, "predict_file", False, v2) if o.do_predict else None
        if o.do_train:
            self.examples = data.shuffle_examples(data.read_examples(self.train_file, True, v2))
            require(runner.epochs_to_steps(len(self.examples), o) > 0,
                    f"{len(self.examples)} training examples / --train_batch_size={o.train_batch_size} * "
                    f"--num_train_epochs={o.num_train_epochs} is 0 steps; lower the batch size or raise the epochs")

    def run_identity(self, options):
        return {"task": "squad", "version_2_with_negative": bool(options.version_2_with_negative)}

    def prepare(self, options, family, config, out_dir):
        if not options.do_train:
            return 0, 0
        o, examples = options, self.examples
        skipped = self.train_file.num_questions - len(examples)
        if skipped:
            self.log(f"Skipped {skipped} training question(s) whose answer text could not be recovered "
                       "from the whitespace-split context (as the original does)")
        self.train_path = os.path.join(out_dir, "train.tf_record")
        count = data.write_training_features(examples, self.tokenizer, o.max_seq_length, o.doc_stride,
                                             o.max_query_length, self.train_path)
        steps = runner.epochs_to_steps(len(examples), o)
        warmup = int(steps * o.warmup_proportion)
        self.log("***** Running training *****\n"
                   f"  Num orig examples = {len(examples)}\n  Num split examples = {count}\n"
                   f"  Batch size = {o.train_batch_size}\n  Num steps = {steps} "
                   f"({o.num_train_epochs} epochs; {warmup} warmup)")
        return steps, warmup

    def make_task(self, family, config, options):
        return SquadTask(config, options.init_checkpoint, family)

    def after_restore(self, trainer, resumed, options):
        if options.do_predict and not options.do_train and not resumed and not trainer.task.head_initialized:
            self.log(f"WARNING: no fine-tuned checkpoint in --output_dir={options.output_dir} and no span "
                       "head in --init_checkpoint: the span head is untrained and predictions are "
                       "meaningless. Train first (--do_train) or predict from a fine-tuned output_dir.")

    def train_dataset_fn(self, options):
        return records.make_dataset_fn([self.train_path], data.feature_spec(options.max_seq_length, True),
                                       options.train_batch_size, is_training=True, seed=options.seed,
                                       log=self.log)

    def evaluate(self, trainer, options, family, config, out_dir):
        if not options.do_predict:
            return
        predictions, null_odds = self._predict(trainer, options, family, config, out_dir)
        self._evaluate(trainer, options, predictions, null_odds, out_dir)

    def _predict(self, trainer, options, family, config, out_dir):
        """predictions.json, nbest_predictions.json (/ null_odds.json) for every question."""
        o, v2 = options, options.version_2_with_negative
        examples = data.read_examples(self.predict_file, False, v2)
        features = data.convert_examples(examples, self.tokenizer, o.max_seq_length, o.doc_stride,
                                         o.max_query_length, is_training=False)
        self.log("***** Running predictions *****\n"
                   f"  Num orig examples = {len(examples)}\n  Num split examples = {len(features)}\n"
                   f"  Batch size = {o.predict_batch_size}")
        path = os.path.join(out_dir, "eval.tf_record")
        data.write_features(features, path, is_training=False)  # the last partial batch is padded
        dataset_fn = data.make_predict_dataset_fn(path, o.max_seq_length, len(features), o.predict_batch_size)
        out = trainer.predict(family.adapt_dataset_fn(dataset_fn, config, o),
                              ["start_logits", "end_logits"], ["unique_ids"])
        results = data.collect_results(features, out["unique_ids"], out["start_logits"], out["end_logits"])
        predictions, nbest, null_odds = data.postprocess(
            examples, features, results, o.n_best_size, o.max_answer_length, o.do_lower_case,
            version_2_with_negative=v2, null_score_diff_threshold=o.null_score_diff_threshold,
            verbose=o.verbose_logging)
        written = {"predictions.json": predictions, "nbest_predictions.json": nbest}
        if v2:
            written["null_odds.json"] = null_odds
        for name, content in written.items():
            data.write_json(content, os.path.join(out_dir, name))
        self.log(f"Wrote {', '.join(written)} ({len(predictions)} questions) to {out_dir}")
        return predictions, null_odds

    def _evaluate(self, trainer, options, predictions, null_odds, out_dir):
        """The official SQuAD metrics into eval_results.txt, when the file has answers."""
        predict_file, v2 = self.predict_file, options.version_2_with_negative
        if not predict_file.has_answers:
            if predict_file.num_with_gold == 0:
                self.log(f"{options.predict_file} has no gold answers: predictions not evaluated")
            else:
                self.log(f"Not evaluated: only {predict_file.num_with_gold} of {predict_file.num_questions} "
                           f"questions in {options.predict_file} have gold answers"
                           + ("" if v2 else "; for SQuAD v2.0 data use --version_2_with_negative=True"))
            return
        results = data.evaluate(predict_file.data, predictions, v2, null_odds if v2 else None)
        results["global_step"] = int(trainer.global_step.numpy())
        outputs.report_results(out_dir, results, self.log)

    def export(self, options, family, config, out_dir):
        return export.export_from_checkpoint(
            options.export_dir, family=family, config=config, init_checkpoint=family.trained_checkpoint(out_dir),
            task="squad", vocab_file=options.vocab_file, do_lower_case=options.do_lower_case,
            max_seq_length=options.max_seq_length, max_query_length=options.max_query_length,
            input_options=options, log=self.log)


def run_squad(options, log=runner.say):
    """The whole run_squad.py job (a SquadOptions); returns the Trainer."""
    return runner.run_job(SquadJob(), options, log)
