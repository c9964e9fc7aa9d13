"""ETC tasks: masked-LM (+ next-sentence) pretraining and long-document classification,
on the SAME TFRecords as the BERT tasks (create_pretraining_data.py output; the GLUE
features of run_classifier.py), through the shared `Trainer`.

BERT records have no sentence structure, so the long input gets ETC's "fixed blocks"
global tokens: one global token (id 1) per `--etc_tokens_per_global` long tokens
(`realformer_tf.data.etc_inputs.make_fixed_block_features`), added in the input pipeline.

Hook (see the final report): the run scripts call `define_etc_flags()` next to
`cli.define_model_flags()` and, when `--model_type=etc`, call `run_etc_pretraining(FLAGS)`
/ `run_etc_classifier(FLAGS)` instead of the BERT ones; `--bert_config_file` then names an
ETC config JSON (`EtcConfig` fields).
"""

import os

import numpy as np
import tensorflow as tf
from absl import flags, logging

from realformer_tf import checkpoint as ckpt
from realformer_tf import cli, etc_modeling
from realformer_tf.data import etc_inputs, integrity, records
from realformer_tf.data import pretraining as pretraining_data
from realformer_tf.tasks import classifier as bert_classifier
from realformer_tf.tasks.classifier import ClassifierTask
from realformer_tf.tasks.pretraining import PretrainingTask
from realformer_tf.training import report_results

MODEL_TYPES = ("bert", "etc")
ETC_CHECKPOINT_NAME = "etc_model.ckpt"
ETC_CONFIG_NAME = "etc_config.json"


def define_etc_flags():
    """The two flags the ETC variants add to run_pretraining.py / run_classifier.py."""
    flags.DEFINE_enum("model_type", "bert", MODEL_TYPES,
                      "bert: BERT / RealFormer / NormFormer (bert_config_file is a BERT config); "
                      "etc: ETC global-local attention (bert_config_file is an ETC config).")
    flags.DEFINE_integer("etc_tokens_per_global", 16,
                         "ETC only: long tokens per global token (fixed-block global tokens).")


def load_etc_config(path, max_seq_length=None):
    cli.require(path, "--bert_config_file (the ETC config JSON) is required")
    config = etc_modeling.EtcConfig.from_json_file(path)
    limit = config.max_absolute_position_embeddings
    if max_seq_length is not None and limit and max_seq_length > limit:
        raise cli.UsageError(
            f"--max_seq_length={max_seq_length} exceeds max_absolute_position_embeddings={limit} of {path}")
    return config


def to_etc_features(features, config, tokens_per_global):
    """BERT-style batch (input_ids, input_mask, segment_ids, ...) -> the same dict plus
    the ETC model inputs (global tokens, masks, relative ids)."""
    etc = etc_inputs.make_fixed_block_features(
        features["input_ids"], features["input_mask"], features["segment_ids"], tokens_per_global,
        config.local_radius, config.relative_pos_max_distance,
        use_hard_g2l_mask=config.use_hard_g2l_mask, use_hard_l2g_mask=config.use_hard_l2g_mask)
    return dict(features, **etc)


def etc_dataset_fn(dataset_fn, config, tokens_per_global):
    """Wraps a batched BERT `dataset_fn(input_context, start_step)` to add the ETC inputs."""

    def fn(input_context=None, start_step=0):
        return dataset_fn(input_context, start_step=start_step).map(
            lambda f: to_etc_features(f, config, tokens_per_global), num_parallel_calls=tf.data.AUTOTUNE)

    return fn


def _initialize_from(model, init_checkpoint, head_prefixes):
    """Loads the encoder (and the heads when the checkpoint has them)."""
    names = ckpt.original_names(ckpt.list_checkpoint(ckpt.resolve_checkpoint(init_checkpoint))) or {}
    has_heads = bool(head_prefixes) and any(n.startswith(tuple(head_prefixes)) for n in names)
    path = model.load_etc_checkpoint(init_checkpoint, skip_heads=not has_heads)
    return f"Initialized from {path}" + ("" if has_heads else " (encoder only; heads fresh)")


class EtcPretrainingTask(PretrainingTask):
    """Masked LM over the long tokens + next sentence on the first global token (the
    BERT pretraining records' objectives and metrics, from PretrainingTask)."""

    def build_model(self):
        return etc_modeling.EtcPretrainingModel(self.config)

    def initialize(self, model):
        if not self.init_checkpoint:
            return None
        message = _initialize_from(model, self.init_checkpoint, model._head_prefixes)
        logging.info(message)
        return message


class EtcClassifierTask(ClassifierTask):
    """Document classification from the first global token (losses and metrics from
    ClassifierTask)."""

    def build_model(self):
        return etc_modeling.EtcClassifierModel(self.config, num_labels=self.num_labels)

    def initialize(self, model):
        if not self.init_checkpoint:
            return "Training from scratch: no --init_checkpoint (expect poor results)"
        path = model.load_etc_checkpoint(self.init_checkpoint, skip_heads=True)
        return f"Initialized the ETC encoder from {path}; classifier head fresh"


def export_etc_checkpoint(model, output_dir, config):
    """Writes the name-based ETC checkpoint and its config (for fine-tuning)."""
    prefix = os.path.join(output_dir, ETC_CHECKPOINT_NAME)
    model.save_etc_checkpoint(prefix)
    config.to_json_file(os.path.join(output_dir, ETC_CONFIG_NAME))
    return prefix


def run_etc_pretraining(flags_):
    """run_pretraining.py --model_type=etc: the same flags and outputs as the BERT job."""
    f = flags_
    cli.require(f.do_train or f.do_eval, "at least one of --do_train or --do_eval must be True")
    config = load_etc_config(f.bert_config_file, f.max_seq_length)
    strategy, float16 = cli.setup_strategy()
    cli.announce(config, strategy)
    tpg = f.etc_tokens_per_global
    cli.require(tpg > 0, "--etc_tokens_per_global must be positive")
    print(f"ETC inputs: {-(-f.max_seq_length // tpg)} global tokens (one per {tpg} long tokens)", flush=True)
    cli.per_replica(strategy, f.train_batch_size, "train_batch_size")
    cli.per_replica(strategy, f.eval_batch_size, "eval_batch_size")
    files = pretraining_data.check_files(f.input_file, f.max_seq_length, f.max_predictions_per_seq)
    if f.init_checkpoint:
        ckpt.resolve_checkpoint(f.init_checkpoint)
    cli.claim_output_dir(f.output_dir, config, {
        "task": "etc_pretraining", "max_seq_length": f.max_seq_length,
        "max_predictions_per_seq": f.max_predictions_per_seq, "etc_tokens_per_global": tpg,
    })
    trainer, _ = cli.start_trainer(EtcPretrainingTask(config, f.init_checkpoint), strategy, f,
                                   f.num_train_steps, f.num_warmup_steps, float16, train=f.do_train)

    def dataset(batch_size, is_training, max_steps=None):
        return etc_dataset_fn(pretraining_data.make_dataset_fn(
            files, f.max_seq_length, f.max_predictions_per_seq, batch_size, is_training=is_training,
            seed=f.seed, max_steps=max_steps), config, tpg)

    with integrity.unreadable_records_named(files):  # a corrupt record met later: named
        if f.do_train:
            print(f"Training on {len(files)} file(s) to step {f.num_train_steps}", flush=True)
            trainer.train(dataset(f.train_batch_size, True), f.num_train_steps,
                          summary_dir=os.path.join(f.output_dir, "summaries", "train"))
            prefix = export_etc_checkpoint(trainer.model, f.output_dir, config)
            print(f"ETC checkpoint for fine-tuning: {prefix}", flush=True)
        if f.do_eval:
            results = trainer.evaluate(dataset(f.eval_batch_size, False, f.max_eval_steps), -1,
                                       summary_dir=os.path.join(f.output_dir, "summaries", "eval"))
            report_results(f.output_dir, results)


def run_etc_classifier(flags_):
    """run_classifier.py --model_type=etc: GLUE-format data, long documents allowed
    (--max_seq_length may be in the thousands), same outputs as the BERT job."""
    from official.nlp.tools import tokenization

    from realformer_tf.data import glue
    from realformer_tf.data.vocab import check_vocab

    f = flags_
    cli.require(f.do_train or f.do_eval or f.do_predict,
                "at least one of --do_train, --do_eval or --do_predict must be True")
    config = load_etc_config(f.bert_config_file, f.max_seq_length)
    task_name, task = glue.get_task(f.task_name)
    strategy, float16 = cli.setup_strategy()
    cli.announce(config, strategy)
    tpg = f.etc_tokens_per_global
    cli.require(tpg > 0, "--etc_tokens_per_global must be positive")
    for flag in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
        cli.per_replica(strategy, getattr(f, flag), flag)
    check_vocab(f.vocab_file)
    if f.init_checkpoint:
        ckpt.resolve_checkpoint(f.init_checkpoint)
    tokenizer = tokenization.FullTokenizer(vocab_file=f.vocab_file, do_lower_case=f.do_lower_case)
    cli.claim_output_dir(f.output_dir, config, {"task": f"etc_{task_name}", "max_seq_length": f.max_seq_length,
                                                "etc_tokens_per_global": tpg})
    spec = glue.feature_spec(f.max_seq_length, task.is_regression)
    splits = [s for s, on in (("train", f.do_train), ("dev", f.do_eval), ("test", f.do_predict)) if on]
    data = {s: bert_classifier._featurize(f, task_name, task, s, tokenizer, f.output_dir) for s in splits}

    num_train_steps = 0
    if f.do_train:
        num_train_steps = max(1, int(data["train"][1] / f.train_batch_size * f.num_train_epochs))
    num_labels = 1 if task.is_regression else len(task.labels)
    trainer, _ = cli.start_trainer(
        EtcClassifierTask(config, num_labels, task.is_regression, f.init_checkpoint), strategy, f,
        num_train_steps, int(num_train_steps * f.warmup_proportion), float16, train=f.do_train)

    def predict(path, batch_size):
        out = trainer.predict(
            etc_dataset_fn(records.make_dataset_fn([path], spec, batch_size, False, pad_to_full_batches=True),
                           config, tpg),
            ["logits"], ["label_ids", "is_real_example"])
        real = out["is_real_example"].astype(bool)
        return {k: v[real] for k, v in out.items()}

    if f.do_train:
        trainer.train(
            etc_dataset_fn(records.make_dataset_fn([data["train"][0]], spec, f.train_batch_size, True,
                                                   seed=f.seed), config, tpg),
            num_train_steps, summary_dir=os.path.join(f.output_dir, "summaries", "train"))
        prefix = export_etc_checkpoint(trainer.model, f.output_dir, config)
        print(f"ETC checkpoint: {prefix}", flush=True)
    if f.do_eval:
        out = predict(data["dev"][0], f.eval_batch_size)
        results = bert_classifier.evaluation_metrics(task, out["logits"], out["label_ids"])
        results["global_step"] = int(trainer.global_step.numpy())
        report_results(f.output_dir, results, f"Eval results ({data['dev'][1]} examples)")
    if f.do_predict:
        out = predict(data["test"][0], f.predict_batch_size)
        path = os.path.join(f.output_dir, "test_results.tsv")
        bert_classifier.write_test_results(path, task, np.asarray(out["logits"]))
        print(f"Wrote {len(out['logits'])} rows of predictions to {path}", flush=True)
