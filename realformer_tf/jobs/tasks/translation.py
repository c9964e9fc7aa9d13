"""Translation (`run_translation.py`): an encoder-decoder trained on sentence pairs
with label-smoothed cross-entropy, evaluated by loss, perplexity and sacreBLEU, as
fairseq trains `transformer_wmt_en_de` and Admin (RealFormer's Table 7).

Training: `--max_tokens` batches of similar length (`data.translation`), fairseq's
label smoothing (`--label_smoothing`, 0.1), Adam with betas (0.9, 0.98) and eps 1e-8,
the inverse square-root schedule after `--num_warmup_steps` of linear warmup. A model
with Admin's scales (`admin_residual_scale`) has them profiled on the first training
batch before step 1 (`TranslationModel.profile_admin`), logged.

Evaluation (`--do_eval` on `--eval_source_file` / `--eval_target_file`): the mean
token NLL (nats), its perplexity and the label-smoothed loss, then the beam-search
translations' sacreBLEU (its signature logged). `--average_last_checkpoints=N` first
averages the last N training checkpoints' weights (fairseq's
`average_checkpoints.py`), writes them as `averaged_model.ckpt` and evaluates those.
`--do_predict` translates `--predict_source_file` into output_dir/translations.txt
(scored when `--predict_target_file` is given).
"""

import dataclasses
import math
import os
from typing import Optional

import numpy as np
import tensorflow as tf

from realformer_tf.data import translation as data
from realformer_tf.data.lm_tokenizer import LmTokenizer
from realformer_tf.errors import InputError, require
from realformer_tf.fileio import atomic_output
from realformer_tf.jobs import outputs, runner
from realformer_tf.serving import translation_decoding
from realformer_tf.training import distribution
from realformer_tf.training.task import Task


def label_smoothed_sums(labels, logits, pad_id, epsilon):
    """{loss, nll, accuracy: (sum, count)} over the real target tokens: fairseq's
    label-smoothed cross-entropy (1 - eps - eps / (V - 1)) * nll + eps / (V - 1) *
    sum_v -log p(v), the plain NLL and next-token accuracy."""
    labels = tf.cast(labels, tf.int32)
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32))
    weights = tf.cast(tf.not_equal(labels, pad_id), tf.float32)
    nll = -tf.gather(log_probs, labels, batch_dims=2)
    spread = epsilon / (tf.cast(tf.shape(log_probs)[-1], tf.float32) - 1.0)
    loss = (1.0 - epsilon - spread) * nll - spread * tf.reduce_sum(log_probs, axis=-1)
    correct = tf.cast(tf.equal(tf.argmax(log_probs, -1, output_type=tf.int32), labels), tf.float32)
    count = tf.reduce_sum(weights)
    return {"loss": (tf.reduce_sum(loss * weights), count), "nll": (tf.reduce_sum(nll * weights), count),
            "accuracy": (tf.reduce_sum(correct * weights), count)}


class TranslationTask(Task):
    """Loss = mean label-smoothed cross-entropy per target token."""

    metric_names = ("loss", "nll", "accuracy")
    loss_terms = ("loss",)

    def __init__(self, config, family, label_smoothing, init_checkpoint=None, profile_batch=None):
        self.config, self.family, self.label_smoothing = config, family, label_smoothing
        self.init_checkpoint, self.profile_batch = init_checkpoint, profile_batch

    def build_model(self):
        return self.family.build_model(self.config, "translation")

    def initialize(self, model):
        if self.init_checkpoint:
            return self.family.initialize(model, "translation", self.init_checkpoint)[0]
        if self.config.admin_residual_scale and self.profile_batch is not None:
            records = model.profile_admin(self.profile_batch)
            scales = {stack: ", ".join(f"{r[0]:.2f}" for r in rows) for stack, rows in records.items()}
            return (f"Admin: residual scales profiled on the first batch ({len(self.profile_batch['source_ids'])} "
                    f"pairs): encoder {scales['encoder']}; decoder {scales['decoder']}")
        return None

    def metric_sums(self, features, outputs):
        return label_smoothed_sums(features["target_labels"], outputs["logits"], self.config.pad_id,
                                   self.label_smoothing)


@dataclasses.dataclass
class TranslationOptions(runner.RunOptions):
    """run_translation.py's flags."""

    model_type: str = "translation"
    spm_model_file: Optional[str] = None
    train_source_file: Optional[str] = None
    train_target_file: Optional[str] = None
    eval_source_file: Optional[str] = None
    eval_target_file: Optional[str] = None
    predict_source_file: Optional[str] = None
    predict_target_file: Optional[str] = None
    max_seq_length: int = 256
    max_tokens: int = 4096
    label_smoothing: float = 0.1
    num_train_steps: int = 100000
    num_warmup_steps: int = 4000
    learning_rate: float = 5e-4
    adam_beta2: float = 0.98
    weight_decay: float = 0.0
    train_batch_size: int = 0  # batches are --max_tokens, not a number of pairs
    beam_size: int = 4
    length_penalty: float = 0.6
    max_extra_length: int = 50
    max_eval_sentences: int = 0
    average_last_checkpoints: int = 0
    export_beam_sizes: tuple = (1, 4, 8)


class TranslationJob(runner.Job):
    name = "translation"
    kind = "translation"
    export_task = "translate"
    options_class = TranslationOptions
    families = ("translation",)

    def check_options(self, options):
        o = options
        require(o.do_train or o.do_eval or o.do_predict, "at least one of --do_train, --do_eval or --do_predict "
                "must be True")
        require(o.spm_model_file, "--spm_model_file is required (the joint SentencePiece model of both languages: "
                "make_vocab.py --vocab_type=sentencepiece)")
        for on, names in ((o.do_train, ("train_source_file", "train_target_file")),
                          (o.do_eval, ("eval_source_file", "eval_target_file")),
                          (o.do_predict, ("predict_source_file",))):
            for name in names:
                require(not on or getattr(o, name), f"--{name} is required with this --do_ flag")
        require(o.max_tokens >= o.max_seq_length, f"--max_tokens={o.max_tokens} is below --max_seq_length="
                f"{o.max_seq_length}: a batch must hold the longest pair")
        require(0.0 <= o.label_smoothing < 1.0, f"--label_smoothing={o.label_smoothing}; use [0, 1)")
        require(o.beam_size >= 1, f"--beam_size={o.beam_size}; use 1 (greedy) or more")
        require(o.export_beam_sizes and min(o.export_beam_sizes) >= 1, f"--export_beam_sizes="
                f"{','.join(map(str, o.export_beam_sizes))}; give one or more sizes, each 1 (greedy) or more")
        require(o.average_last_checkpoints >= 0, f"--average_last_checkpoints={o.average_last_checkpoints}; use 0 "
                "(off) or the number of checkpoints")
        if o.average_last_checkpoints > o.keep_checkpoint_max:  # the saves averaging needs are kept
            self.log(f"Keeping the last {o.average_last_checkpoints} checkpoints (--average_last_checkpoints), not "
                     f"{o.keep_checkpoint_max} (--keep_checkpoint_max)")
            o.keep_checkpoint_max = o.average_last_checkpoints

    def describe(self, options):
        return (f"Translation: --max_tokens={options.max_tokens} per batch, label smoothing "
                f"{options.label_smoothing}; beam {options.beam_size}, length penalty {options.length_penalty}")

    def run_identity(self, options):
        return {"task": self.name, "max_seq_length": options.max_seq_length, "max_tokens": options.max_tokens}

    def optimizer_settings(self, options):
        return {"schedule": "inverse_sqrt", "beta_2": options.adam_beta2, "epsilon": 1e-8}

    def check_inputs(self, options, family, config):
        o = options
        self.tokenizer = LmTokenizer.from_files(spm_model_file=o.spm_model_file)
        self.tokenizer.check_fits(config.vocab_size, "the translation config")
        check_special_ids(o.spm_model_file, config)
        self.config = config
        self.train = self._encoded(o.train_source_file, o.train_target_file, o) if o.do_train else None
        self.eval_pairs = data.read_pairs(o.eval_source_file, o.eval_target_file) if o.do_eval else None
        if o.do_eval:
            self.eval = data.encode_pairs(self.eval_pairs, self.tokenizer.encode, config.bos_id, config.eos_id,
                                          o.max_seq_length, log=self.log)
        self.predict_lines = data.read_lines(o.predict_source_file) if o.do_predict else None
        if o.do_predict and o.predict_target_file:
            data.read_pairs(o.predict_source_file, o.predict_target_file)  # the line counts agree

    def _encoded(self, source_file, target_file, options):
        pairs = data.read_pairs(source_file, target_file)
        examples = data.encode_pairs(pairs, self.tokenizer.encode, self.config.bos_id, self.config.eos_id,
                                     options.max_seq_length, log=self.log)
        tokens = sum(len(e["target_labels"]) for e in examples)
        self.log(f"Input: {len(examples)} training pairs from {source_file} / {target_file}, {tokens} target tokens")
        return examples

    def prepare(self, options, family, config, out_dir):
        if options.do_train:
            batches = len(data.plan_batches(self.train, options.max_tokens))
            self.log(f"Training to step {options.num_train_steps}: {batches} batches an epoch "
                     f"(~{options.num_train_steps / batches:.1f} epochs)")
        return options.num_train_steps, options.num_warmup_steps

    def make_task(self, family, config, options):
        profile = None
        if self.train is not None:
            first = data.plan_batches(self.train, options.max_tokens, shuffle_seed=options.seed or 0)[0]
            profile = data.pad_batch(self.train, first, config.pad_id)
        return TranslationTask(config, family, options.label_smoothing, options.init_checkpoint, profile)

    def train_dataset_fn(self, options):
        return data.make_dataset_fn(self.train, options.max_tokens, self.config.pad_id, True, seed=options.seed,
                                    log=self.log, static_shapes=static_shapes(options))

    def evaluate(self, trainer, options, family, config, out_dir):
        o = options
        if o.average_last_checkpoints > 1:
            prefix = average_checkpoints(trainer.model, family, out_dir, o.average_last_checkpoints, self.log)
            self.log(f"Averaged weights: {prefix} (evaluated below)")
        results = {}
        if o.do_eval:
            dataset_fn = data.make_dataset_fn(self.eval, o.max_tokens, config.pad_id, False,
                                              static_shapes=static_shapes(o))
            loss = trainer.evaluate(dataset_fn, -1, summary_dir=os.path.join(out_dir, "summaries", "eval"))
            results.update(eval_loss=loss["loss"], eval_nll=loss["nll"], eval_accuracy=loss["accuracy"],
                           eval_perplexity=math.exp(min(loss["nll"], 700.0)))
            pairs = self.eval_pairs[:o.max_eval_sentences] if o.max_eval_sentences else self.eval_pairs
            hypotheses = self._translator(trainer.model, o).translate([s for s, _ in pairs])
            results["eval_bleu"], signature = translation_decoding.corpus_bleu(hypotheses, [t for _, t in pairs])
            self.log(f"Dev BLEU {results['eval_bleu']:.2f} on {len(pairs)} sentences (sacreBLEU {signature})")
            write_lines(os.path.join(out_dir, "eval_translations.txt"), hypotheses)
        if o.do_predict:
            hypotheses = self._translator(trainer.model, o).translate(self.predict_lines)
            path = write_lines(os.path.join(out_dir, "translations.txt"), hypotheses)
            self.log(f"Translations of {o.predict_source_file}: {path}")
            if o.predict_target_file:
                references = data.read_lines(o.predict_target_file)
                results["predict_bleu"], signature = translation_decoding.corpus_bleu(hypotheses, references)
                self.log(f"BLEU {results['predict_bleu']:.2f} against {o.predict_target_file} (sacreBLEU {signature})")
        if results:
            outputs.report_results(out_dir, results, self.log)

    def _translator(self, model, options):
        return translation_decoding.Translator(model, self.tokenizer, options.beam_size, options.length_penalty,
                                               options.max_extra_length, options.max_tokens, log=self.log)

    def export(self, options, family, config, out_dir):
        """`--export_dir`: the trained model with a `translate` signature (text in,
        text out) and the SentencePiece model in the graph."""
        from realformer_tf.serving import translation_export

        model, _ = family.load_trained(out_dir)
        return translation_export.export_translation_model(
            model, options.export_dir, spm_model_file=options.spm_model_file, alpha=options.length_penalty,
            max_extra_length=options.max_extra_length, beam_sizes=options.export_beam_sizes)


def static_shapes(options):
    """Whether the steps compile with XLA, which compiles one step per batch shape: the
    batches then come in a handful of shapes (`data.translation.plan_batches`)."""
    return distribution.resolve_jit_compile(options.jit_compile)[0]


def check_special_ids(spm_model_file, config):
    """Raises InputError unless the SentencePiece model's <pad>, <s>, </s> are the
    config's pad_id, bos_id, eos_id."""
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor()
    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        processor.LoadFromSerializedProto(f.read())
    found = {"pad_id": processor.pad_id(), "bos_id": processor.bos_id(), "eos_id": processor.eos_id()}
    wanted = {name: getattr(config, name) for name in found}
    if found != wanted:
        raise InputError(f"{spm_model_file} has {found} but the translation config {wanted}; make the vocab with "
                         "make_vocab.py --vocab_type=sentencepiece or set the config's ids to the model's")


def average_checkpoints(model, family, out_dir, count, log):
    """Loads the mean of the last `count` training checkpoints' weights into `model`
    and writes them as out_dir/averaged_model.ckpt (under the family's names); returns
    that prefix."""
    state = tf.train.get_checkpoint_state(out_dir)
    paths = list(state.all_model_checkpoint_paths)[-count:] if state else []
    if len(paths) < count:
        log(f"--average_last_checkpoints={count}: only {len(paths)} training checkpoint(s) kept in {out_dir} "
            "(raise --keep_checkpoint_max); averaging those")
    require(paths, f"--average_last_checkpoints: no training checkpoint in {out_dir}")
    variables = family.named_variables(model)
    total = {name: np.zeros(v.shape, np.float64) for name, v in variables.items()}
    for path in paths:
        family.load_checkpoint(model, path)
        for name, v in variables.items():
            total[name] += v.numpy()
    for name, v in variables.items():
        v.assign((total[name] / len(paths)).astype(v.dtype))
    log(f"Averaged {len(paths)} checkpoints: {', '.join(os.path.basename(p) for p in paths)}")
    return family.save_checkpoint(model, os.path.join(out_dir, "averaged_model.ckpt"))


def write_lines(path, lines):
    """Writes one line per item, atomically; returns `path`."""
    with atomic_output(path) as f:
        f.write("".join(line + "\n" for line in lines))
    return path


def run_translation(options, log=runner.say):
    """The whole `run_translation.py` job; returns the Trainer."""
    return runner.run_job(TranslationJob(), options, log)
