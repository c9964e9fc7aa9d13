"""Creates pretraining TFRecords from raw text (one sentence per line, blank lines
between documents), with the original BERT flags.

The instance creation and masking are Model Garden's
(`official.nlp.data.create_pretraining_data`, a port of the original script); this
wrapper adds up-front checks, a progress display, and atomic output files.

  python create_pretraining_data.py --input_file=./sample_text.txt \
    --output_file=/tmp/tf_examples.tfrecord --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
    --masked_lm_prob=0.15 --random_seed=12345 --dupe_factor=5
"""

import os
import random
import time


import tensorflow as tf
from absl import flags, logging
from official.nlp.data import create_pretraining_data as mg
from official.nlp.tools import tokenization

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs import outputs
from realformer_tf.data.records import expand_input_files
from realformer_tf.data.text_files import check_utf8
from realformer_tf.data.vocab import check_vocab
from realformer_tf.fileio import commit, temporary_name


def define_flags(fv):
    """The original create_pretraining_data.py flags (and Model Garden's output options)
    on the FlagValues `fv`."""
    flags.DEFINE_string("input_file", None, "Input raw text file (or comma-separated list of files; globs too).", flag_values=fv)
    flags.DEFINE_string("output_file", None, "Output TF example file (or comma-separated list of files).", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True for "
                      "uncased models and False for cased models.", flag_values=fv)
    flags.DEFINE_bool("do_whole_word_mask", False, "Whether to use whole word masking rather than per-WordPiece masking.", flag_values=fv)
    flags.DEFINE_integer("max_ngram_size", None, "Mask contiguous whole words (n-grams) of up to this many words.", flag_values=fv)
    flags.DEFINE_bool("gzip_compress", False, "Whether to use `GZIP` compress option to get compressed TFRecord files.", flag_values=fv)
    flags.DEFINE_bool("use_v2_feature_names", False, "Whether to use the feature names consistent with the models.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.", flag_values=fv)
    flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.", flag_values=fv)
    flags.DEFINE_integer("dupe_factor", 10, "Number of times to duplicate the input data (with different masks).", flag_values=fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.", flag_values=fv)
    flags.DEFINE_float("short_seq_prob", 0.1, "Probability of creating sequences which are shorter than the "
                       "maximum length.", flag_values=fv)


class _Progress:
    """Counts items and prints a line at most every few seconds."""

    def __init__(self, what, total=None, every_seconds=5.0):
        self.what, self.total, self.every = what, total, every_seconds
        self.count, self.start, self.last = 0, time.time(), 0.0

    def tick(self, n=1):
        self.count += n
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            self.report()

    def report(self):
        rate = self.count / max(time.time() - self.start, 1e-9)
        total = f"/{self.total}" if self.total else ""
        print(f"  {self.what}: {self.count}{total} ({rate:.0f}/s)", flush=True)


class _CountingTokenizer:
    """The Model Garden tokenizer, reporting how many lines it has tokenized."""

    def __init__(self, tokenizer, progress):
        self._tokenizer, self._progress = tokenizer, progress

    def tokenize(self, text):
        self._progress.tick()
        return self._tokenizer.tokenize(text)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


def _counted(items, progress):
    for item in items:
        progress.tick()
        yield item


def run(FLAGS):  # noqa: N803 (the original script's name for its flags)
    """Creates the records from the parsed flags."""
    for path in (FLAGS.output_file or "").split(","):
        if path.strip():
            outputs.check_output_file(path.strip(), "--output_file")  # before the text is read
    input_files = expand_input_files(FLAGS.input_file)
    check_utf8(input_files)
    vocab = check_vocab(FLAGS.vocab_file)
    cli.require(FLAGS.output_file, "--output_file is required")
    output_files = [p.strip() for p in FLAGS.output_file.split(",") if p.strip()]
    for path in output_files:
        tf.io.gfile.makedirs(os.path.dirname(path) or ".")

    tokenizer = tokenization.FullTokenizer(vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case)
    print(f"Reading {len(input_files)} file(s); vocab {FLAGS.vocab_file} ({len(vocab)} tokens)", flush=True)
    lines = _Progress("lines tokenized")
    instances = mg.create_training_instances(
        input_files, _CountingTokenizer(tokenizer, lines),
        mg.get_processor_text_fn(False, FLAGS.do_lower_case),
        FLAGS.max_seq_length, FLAGS.dupe_factor, FLAGS.short_seq_prob, FLAGS.masked_lm_prob,
        FLAGS.max_predictions_per_seq, random.Random(FLAGS.random_seed),
        FLAGS.do_whole_word_mask, FLAGS.max_ngram_size,
    )
    lines.report()
    if not instances:
        raise cli.UsageError(f"--input_file {FLAGS.input_file} yielded no text to build examples from")

    # Write under temporary names, then rename: an interrupted run leaves no file that
    # looks complete.
    temp_files = [temporary_name(p) for p in output_files]
    written = _Progress("examples written", total=len(instances))
    logging.set_verbosity(logging.WARNING)  # Model Garden logs every one of the first 20 examples
    mg.write_instance_to_example_files(
        _counted(instances, written), tokenizer, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
        temp_files, FLAGS.gzip_compress, FLAGS.use_v2_feature_names,
    )
    for temp, final in zip(temp_files, output_files):
        commit(temp, final)
    written.report()
    print(f"Wrote {len(instances)} examples to {', '.join(output_files)}", flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["input_file", "output_file", "vocab_file"])
