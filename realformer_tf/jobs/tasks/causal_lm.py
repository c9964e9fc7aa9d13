"""Causal language-model pretraining (`run_pretraining.py --model_type=causal_lm`):
next-token prediction on blocks of a packed token stream, as fairseq's
`--task language_modeling --sample-break-mode none` trains NormFormer's models.

Each record is one block of `max_seq_length` tokens (`create_pretraining_data.py
--objective=causal_lm`); position t predicts token t + 1, so a block gives
max_seq_length - 1 predictions. Evaluation reports the mean next-token loss (nats),
its perplexity exp(loss) and bits per token loss / ln 2, on `--eval_input_file` or,
as the original run_pretraining evaluates, on the training input.
"""

import dataclasses
import math
import os
from typing import Optional

import tensorflow as tf

from realformer_tf.data import causal_lm as data
from realformer_tf.data import integrity
from realformer_tf.errors import require
from realformer_tf.jobs import outputs, runner
from realformer_tf.jobs.tasks.pretraining import PretrainingTask


def next_token_sums(input_ids, logits, input_mask=None):
    """{lm_loss, lm_accuracy: (sum, count)} of predicting token t + 1 at position t,
    over the positions whose target is a real token (`input_mask`, default all)."""
    targets = tf.cast(input_ids[:, 1:], tf.int32)
    logits = tf.cast(logits[:, :-1], tf.float32)
    weights = tf.ones_like(targets, tf.float32) if input_mask is None else tf.cast(input_mask[:, 1:], tf.float32)
    nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=targets, logits=logits)
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), targets), tf.float32)
    count = tf.reduce_sum(weights)
    return {"lm_loss": (tf.reduce_sum(nll * weights), count), "lm_accuracy": (tf.reduce_sum(correct * weights), count)}


def perplexity_lines(results):
    """`results` with `perplexity` = exp(lm_loss) and `bits_per_token` = lm_loss / ln 2."""
    loss = results["lm_loss"]
    return dict(results, perplexity=math.exp(min(loss, 700.0)), bits_per_token=loss / math.log(2.0))


class CausalLMTask(PretrainingTask):
    """Loss = mean next-token NLL over the block's predictions. The model and its
    initialization are a pretraining task's (the family's "pretraining" model)."""

    metric_names = ("lm_loss", "lm_accuracy")
    loss_terms = ("lm_loss",)

    def __init__(self, config, family, init_checkpoint=None):
        super().__init__(config, init_checkpoint, family)

    def metric_sums(self, features, outputs):
        return next_token_sums(features["input_ids"], outputs["logits"], features.get("input_mask"))


@dataclasses.dataclass
class CausalLMOptions(runner.RunOptions):
    """run_pretraining.py's flags for a causal LM."""

    input_file: Optional[str] = None
    eval_input_file: Optional[str] = None
    num_train_steps: int = 100000
    num_warmup_steps: int = 10000
    max_eval_steps: int = 100
    # The tokenizer of --export_dir (one of the two).
    vocab_file: Optional[str] = None
    spm_model_file: Optional[str] = None
    do_lower_case: bool = True


class CausalLMPretrainingJob(runner.Job):
    name = "causal_lm_pretraining"
    kind = "pretraining"
    export_task = "generate"
    options_class = CausalLMOptions
    families = ("causal_lm",)

    def check_options(self, options):
        require(options.do_train or options.do_eval, "at least one of --do_train or --do_eval must be True")
        require(not options.export_dir or bool(options.vocab_file) != bool(options.spm_model_file),
                "--export_dir needs the tokenizer the data was made with: exactly one of --vocab_file and "
                "--spm_model_file")
        require(options.input_file or (options.do_eval and not options.do_train and options.eval_input_file),
                "--input_file is required (causal LM token blocks: create_pretraining_data.py --objective=causal_lm)")

    def batch_size_names(self, options):
        return [n for n, on in (("train_batch_size", options.do_train), ("eval_batch_size", options.do_eval)) if on]

    def describe(self, options):
        source = "--eval_input_file" if options.eval_input_file else "--input_file (no --eval_input_file)"
        return f"Next-token prediction on blocks of {options.max_seq_length} tokens; evaluation on {source}"

    def check_inputs(self, options, family, config):
        self.files = data.check_files(options.input_file, options.max_seq_length, log=self.log) \
            if options.input_file else []
        self.eval_files = (data.check_files(options.eval_input_file, options.max_seq_length, log=self.log)
                           if options.eval_input_file else self.files)

    def prepare(self, options, family, config, out_dir):
        if options.do_train:
            self.log(f"Training on {len(self.files)} file(s) to step {options.num_train_steps}")
        return options.num_train_steps, options.num_warmup_steps

    def make_task(self, family, config, options):
        return CausalLMTask(config, family, options.init_checkpoint)

    def train_dataset_fn(self, options):
        return data.make_dataset_fn(self.files, options.max_seq_length, options.train_batch_size, True,
                                    seed=options.seed, log=self.log)

    def reading_inputs(self):
        return integrity.unreadable_records_named(sorted(set(self.files) | set(self.eval_files)))

    def export(self, options, family, config, out_dir):
        """`--export_dir`: the trained model with `generate` and `score` signatures; the
        tokenizer is --vocab_file or --spm_model_file."""
        from realformer_tf.data.lm_tokenizer import LmTokenizer
        from realformer_tf.serving import lm_export

        tokenizer = LmTokenizer.from_files(options.vocab_file, options.spm_model_file, options.do_lower_case)
        model, _ = family.load_trained(out_dir)
        return lm_export.export_causal_lm(model, options.export_dir, tokenizer=tokenizer,
                                          vocab_file=options.vocab_file, spm_model_file=options.spm_model_file,
                                          do_lower_case=options.do_lower_case)

    def evaluate(self, trainer, options, family, config, out_dir):
        if not options.do_eval:
            return
        dataset_fn = data.make_dataset_fn(self.eval_files, options.max_seq_length, options.eval_batch_size, False,
                                          seed=options.seed, max_steps=options.max_eval_steps, log=self.log)
        results = trainer.evaluate(dataset_fn, -1, summary_dir=os.path.join(out_dir, "summaries", "eval"))
        outputs.report_results(out_dir, perplexity_lines(results), self.log)


def run_causal_lm_pretraining(options, log=runner.say):
    """The whole `run_pretraining.py --model_type=causal_lm` job; returns the Trainer."""
    return runner.run_job(CausalLMPretrainingJob(), options, log)
