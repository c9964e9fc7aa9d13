"""SQuAD v1.1 / v2.0 span prediction (the original run_squad.py job).

Training: the loss is the original's `(start_loss + end_loss) / 2`, each the mean
cross-entropy of the gold start / end position over the batch's features (v2.0
impossible questions point at [CLS], position 0). Prediction: start/end logits for every
doc_stride window of every question, then the original n-best post-processing, written
as predictions.json / nbest_predictions.json (/ null_odds.json), and, when the
predict file has gold answers, the official SQuAD metrics in eval_results.txt.
"""

import os

import tensorflow as tf
from official.nlp.tools import tokenization

from realformer_tf import checkpoint as ckpt
from realformer_tf import cli, modeling
from realformer_tf.data import records
from realformer_tf.data import squad as data
from realformer_tf.training import Task, report_results


def _nll(positions, logits):
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.reshape(tf.cast(positions, tf.int32), [-1]), logits=tf.cast(logits, tf.float32))


class SquadTask(Task):
    """Span start/end cross-entropy; `loss` is their average, as in the original."""

    metric_names = ("loss", "start_loss", "end_loss")
    loss_terms = ("loss",)

    def __init__(self, config, init_checkpoint=None):
        self.config = config
        self.init_checkpoint = init_checkpoint
        self.head_initialized = False  # cls/squad came from init_checkpoint

    def build_model(self):
        model = modeling.BertSquadModel(self.config)
        # The span head reads the sequence output only: the pooler gets no gradient and,
        # as in the original (whose optimizer skips None gradients), stays as loaded.
        model.bert.pooler.trainable = False
        return model

    def initialize(self, model):
        if not self.init_checkpoint:
            return "No --init_checkpoint: starting from random weights (expect poor results)"
        names = ckpt.list_checkpoint(ckpt.resolve_checkpoint(self.init_checkpoint))
        self.head_initialized = any(n.startswith("cls/squad/") for n in names)
        path = model.load_bert_checkpoint(self.init_checkpoint, skip_heads=not self.head_initialized)
        return f"Initialized from {path}" + (
            " (encoder and cls/squad head)" if self.head_initialized else " (encoder; cls/squad head fresh)")

    def metric_sums(self, features, outputs):
        start = _nll(features["start_positions"], outputs["start_logits"])
        end = _nll(features["end_positions"], outputs["end_logits"])
        count = tf.cast(tf.size(start), tf.float32)
        return {
            "loss": (tf.reduce_sum((start + end) / 2.0), count),
            "start_loss": (tf.reduce_sum(start), count),
            "end_loss": (tf.reduce_sum(end), count),
        }


def predict(trainer, features, path, max_seq_length, batch_size):
    """Writes `features` to `path` (eval.tf_record) and returns one RawResult per feature;
    the last partial batch is padded, never dropped."""
    data.write_features(features, path, is_training=False)
    out = trainer.predict(
        data.make_predict_dataset_fn(path, max_seq_length, len(features), batch_size),
        ["start_logits", "end_logits"], ["unique_ids"],
    )
    return data.collect_results(features, out["unique_ids"], out["start_logits"], out["end_logits"])


def _check_flags(f):
    cli.require(f.do_train or f.do_predict, "at least one of --do_train or --do_predict must be True")
    cli.require(not f.do_eval, "run_squad.py has no --do_eval (the original has none): use "
                "--do_predict; a --predict_file with answers (e.g. dev-v1.1.json) is also evaluated")
    cli.require(not f.do_train or f.train_file, "--do_train needs --train_file (e.g. train-v1.1.json)")
    cli.require(not f.do_predict or f.predict_file, "--do_predict needs --predict_file (e.g. dev-v1.1.json)")
    cli.require(f.max_seq_length > f.max_query_length + 3,
                f"--max_seq_length={f.max_seq_length} must be greater than --max_query_length="
                f"{f.max_query_length} + 3 ([CLS] and two [SEP]); lower --max_query_length")
    for name in ("doc_stride", "max_query_length", "n_best_size", "max_answer_length",
                 "train_batch_size", "predict_batch_size"):
        cli.require(getattr(f, name) >= 1, f"--{name} must be a positive integer")


def run_squad(f):
    """The whole run_squad.py job from its flags."""
    _check_flags(f)
    version = "v2.0 (with unanswerable questions)" if f.version_2_with_negative else "v1.1"
    config = cli.load_config(f.max_seq_length)
    strategy, float16 = cli.setup_strategy()
    out_dir = cli.worker_output_dir(f.output_dir, strategy)  # f.output_dir on the chief
    cli.announce(config, strategy)
    print(f"task: SQuAD {version}", flush=True)
    if f.do_train:
        cli.per_replica(strategy, f.train_batch_size, "train_batch_size")
    if f.do_predict:
        cli.per_replica(strategy, f.predict_batch_size, "predict_batch_size")
    tokenizer = data.make_tokenizer(f.vocab_file, f.do_lower_case, config.vocab_size)
    if f.init_checkpoint:
        ckpt.resolve_checkpoint(f.init_checkpoint)  # fail now, not after set-up
    try:
        tokenization.validate_case_matches_checkpoint(f.do_lower_case, f.init_checkpoint)
    except ValueError as e:
        raise cli.UsageError(str(e)) from None

    # Read and check every input before anything is written or trained.
    v2 = f.version_2_with_negative
    train_file = data.load_squad_file(f.train_file, "train_file", True, v2) if f.do_train else None
    predict_file = data.load_squad_file(f.predict_file, "predict_file", False, v2) if f.do_predict else None
    num_train_steps = num_warmup_steps = 0
    if f.do_train:
        examples = data.shuffle_examples(data.read_examples(train_file, True, v2))
        num_train_steps = int(len(examples) / f.train_batch_size * f.num_train_epochs)
        cli.require(num_train_steps > 0,
                    f"{len(examples)} training examples / --train_batch_size={f.train_batch_size} * "
                    f"--num_train_epochs={f.num_train_epochs} is 0 steps; lower the batch size or "
                    "raise the epochs")
        num_warmup_steps = int(num_train_steps * f.warmup_proportion)
    cli.claim_output_dir(f.output_dir, config, {"task": "squad", "version_2_with_negative": bool(v2)})

    if f.do_train:
        skipped = train_file.num_questions - len(examples)
        if skipped:
            print(f"Skipped {skipped} training question(s) whose answer text could not be recovered "
                  "from the whitespace-split context (as the original does)", flush=True)
        train_path = os.path.join(out_dir, "train.tf_record")
        num_train_features = data.write_training_features(
            examples, tokenizer, f.max_seq_length, f.doc_stride, f.max_query_length, train_path)

    trainer, resumed = cli.start_trainer(SquadTask(config, f.init_checkpoint), strategy, f,
                                         num_train_steps, num_warmup_steps, float16, train=f.do_train)
    if f.do_predict and not f.do_train and not resumed and not trainer.task.head_initialized:
        print(f"WARNING: no fine-tuned checkpoint in --output_dir={f.output_dir} and no cls/squad "
              "head in --init_checkpoint: the span head is untrained and predictions are "
              "meaningless. Train first (--do_train) or predict from a fine-tuned output_dir.",
              flush=True)

    if f.do_train:
        print("***** Running training *****\n"
              f"  Num orig examples = {len(examples)}\n  Num split examples = {num_train_features}\n"
              f"  Batch size = {f.train_batch_size}\n  Num steps = {num_train_steps} "
              f"({f.num_train_epochs} epochs; {num_warmup_steps} warmup)", flush=True)
        trainer.train(
            records.make_dataset_fn([train_path], data.feature_spec(f.max_seq_length, True),
                                    f.train_batch_size, is_training=True, seed=f.seed),
            num_train_steps,
            summary_dir=os.path.join(out_dir, "summaries", "train"),
        )
        prefix = cli.export_final_checkpoint(trainer.model, out_dir, config)
        print(f"Original-named checkpoint: {prefix}", flush=True)

    if f.do_predict:
        _predict_and_evaluate(f, trainer, tokenizer, predict_file, out_dir)
    return trainer


def _predict_and_evaluate(f, trainer, tokenizer, predict_file, out_dir):
    v2 = f.version_2_with_negative
    examples = data.read_examples(predict_file, False, v2)
    features = data.convert_examples(examples, tokenizer, f.max_seq_length, f.doc_stride,
                                     f.max_query_length, is_training=False)
    print("***** Running predictions *****\n"
          f"  Num orig examples = {len(examples)}\n  Num split examples = {len(features)}\n"
          f"  Batch size = {f.predict_batch_size}", flush=True)
    results = predict(trainer, features, os.path.join(out_dir, "eval.tf_record"),
                      f.max_seq_length, f.predict_batch_size)
    predictions, nbest, null_odds = data.postprocess(
        examples, features, results, f.n_best_size, f.max_answer_length, f.do_lower_case,
        version_2_with_negative=v2, null_score_diff_threshold=f.null_score_diff_threshold,
        verbose=f.verbose_logging,
    )
    written = {"predictions.json": predictions, "nbest_predictions.json": nbest}
    if v2:
        written["null_odds.json"] = null_odds
    for name, records_ in written.items():
        data.write_json(records_, os.path.join(out_dir, name))
    print(f"Wrote {', '.join(written)} ({len(predictions)} questions) to {out_dir}", flush=True)

    if not predict_file.has_answers:
        if predict_file.num_with_gold == 0:
            print(f"{f.predict_file} has no gold answers: predictions not evaluated", flush=True)
        else:
            print(f"Not evaluated: only {predict_file.num_with_gold} of {predict_file.num_questions} "
                  f"questions in {f.predict_file} have gold answers"
                  + ("" if v2 else "; for SQuAD v2.0 data use --version_2_with_negative=True"), flush=True)
        return
    results = data.evaluate(predict_file.data, predictions, v2, null_odds if v2 else None)
    results["global_step"] = int(trainer.global_step.numpy())
    report_results(out_dir, results)
