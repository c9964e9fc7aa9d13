"""Creates pretraining TFRecords from raw text (one sentence per line, blank lines
between documents), with the original BERT flags.

The instance creation and masking are Model Garden's
(`official.nlp.data.create_pretraining_data`, a port of the original script); this
wrapper adds up-front checks, a progress display, and atomic output files.

  python create_pretraining_data.py --input_file=./sample_text.txt \
    --output_file=/tmp/tf_examples.tfrecord --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --do_lower_case=True --max_seq_length=128 --max_predictions_per_seq=20 \
    --masked_lm_prob=0.15 --random_seed=12345 --dupe_factor=5

At corpus scale, as an Apache Beam pipeline (`pip install "realformer_tf[beam]"`): give
--runner, an output prefix and a shard count; every other Beam pipeline option passes
through (docs/beam.md: DirectRunner, Dataflow, Flink, Spark).

  python create_pretraining_data.py --input_file='corpus/*.txt' --vocab_file=vocab.txt \
    --output_file=data/train --num_output_shards=16 --dupe_factor=5 \
    --runner=DirectRunner --direct_num_workers=2 --direct_running_mode=multi_processing
  # writes data/train-00000-of-00016 ... data/train-00015-of-00016;
  # run_pretraining.py --input_file='data/train-*' reads them
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
from realformer_tf.data import beam_pretraining, pretraining_shards
from realformer_tf.data.records import expand_input_files
from realformer_tf.data.text_files import check_text_files
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
    # Apache Beam (any other flag is a Beam pipeline option, passed through to it).
    flags.DEFINE_string("runner", None, "Run as an Apache Beam pipeline on this runner (DirectRunner, "
                        "DataflowRunner, FlinkRunner, SparkRunner, ...); --output_file is then a prefix of "
                        "--num_output_shards shards. Default: in this process.", flag_values=fv)
    flags.DEFINE_integer("num_output_shards", None, "With --runner: write PREFIX-00000-of-0000N ... (N shards). A "
                         "worker holds one shard in memory while it writes it: choose N for shards of a few hundred MB.", flag_values=fv)
    flags.DEFINE_integer("documents_per_bucket", 1000, "With --runner: documents per bucket (on average). A worker "
                         "holds one bucket; next-sentence negatives come from the same bucket.", flag_values=fv)


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


def run(FLAGS, unparsed=()):  # noqa: N803 (the original script's name for its flags)
    """Creates the records from the parsed flags: in this process, or as a Beam pipeline
    given --runner (`unparsed`, the flags this program does not define, are its options)."""
    if FLAGS.runner:
        return run_beam(FLAGS, unparsed)
    _refuse_beam_flags(FLAGS, unparsed)
    for path in (FLAGS.output_file or "").split(","):
        if path.strip():
            outputs.check_output_file(path.strip(), "--output_file")  # before the text is read
    input_files = expand_input_files(FLAGS.input_file)
    check_text_files(input_files)
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


def _refuse_beam_flags(FLAGS, unparsed):  # noqa: N803
    """Without --runner, flags this program does not define are mistakes, as for every program."""
    if unparsed:
        raise cli.UsageError(f"unknown flag(s) {' '.join(unparsed)}: not flags of this program (Beam pipeline "
                             "options need --runner=...; see --helpfull)")
    for name in ("num_output_shards", "documents_per_bucket"):
        if FLAGS[name].present:
            raise cli.UsageError(f"--{name} needs --runner (the Beam pipeline); without it, --output_file is a "
                                 "file or a comma-separated list of files")


def run_beam(FLAGS, pipeline_args):  # noqa: N803
    """Checks the inputs here, then runs the Beam pipeline (realformer_tf/data/beam_pretraining.py)."""
    config = _beam_config(FLAGS)
    beam_pretraining.import_beam()  # a missing install is one error line before the text is read
    vocab = check_vocab(FLAGS.vocab_file)  # before the corpus is read through, which takes longer
    check_text_files(config.input_files)
    print(f"Beam pipeline on {FLAGS.runner}: {len(config.input_files)} file(s), vocab {FLAGS.vocab_file} "
          f"({len(vocab)} tokens), {config.num_output_shards} shard(s), about {config.documents_per_bucket} "
          "documents per bucket", flush=True)
    outputs.makedirs(os.path.dirname(config.output_prefix) or ".", "--output_file")
    summary = beam_pretraining.run_pipeline(config, pipeline_args, FLAGS.runner)
    _print_beam_summary(config, summary)


def _beam_config(FLAGS):  # noqa: N803
    """The pipeline's PipelineConfig from the flags, the output path checked."""
    prefix = (FLAGS.output_file or "").strip()
    cli.require("," not in prefix, f"--output_file={prefix}: with --runner it is one prefix "
                "(shards are PREFIX-00000-of-0000N), not a list")
    shards = FLAGS.num_output_shards
    cli.require(shards is not None and shards >= 1, f"--num_output_shards={shards}: with --runner give the number "
                "of output shards (1 or more; e.g. 16), so that one shard fits a worker's memory")
    cli.require(FLAGS.documents_per_bucket >= 2, f"--documents_per_bucket={FLAGS.documents_per_bucket}: give 2 "
                "or more (next-sentence negatives come from other documents of the same bucket)")
    outputs.check_output_file(prefix, "--output_file", example="train")
    stale = pretraining_shards.stale_shards(prefix, shards)
    cli.require(not stale, f"--output_file={prefix}: {len(stale)} shard(s) of a run with another "
                f"--num_output_shards are there ({stale[0] if stale else ''}, ...), and PREFIX-* would read "
                "them with this run's; remove them or choose another prefix")
    return beam_pretraining.PipelineConfig(
        input_files=tuple(expand_input_files(FLAGS.input_file)), output_prefix=prefix, num_output_shards=shards,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq, random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor, masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        do_whole_word_mask=FLAGS.do_whole_word_mask, max_ngram_size=FLAGS.max_ngram_size,
        gzip_compress=FLAGS.gzip_compress, use_v2_feature_names=FLAGS.use_v2_feature_names,
        documents_per_bucket=FLAGS.documents_per_bucket)


def _print_beam_summary(config, summary):
    seconds = max(summary["seconds"], 1e-9)
    documents, examples = summary.get("documents", 0), summary.get("examples_written", 0)
    if summary.get("empty_shards"):
        print(f"warning: {summary['empty_shards']} of {config.num_output_shards} shards hold no example; "
              "use fewer --num_output_shards for this corpus", flush=True)
    print(f"Wrote {examples} examples from {documents} documents to "
          f"{pretraining_shards.shard_name(config.output_prefix, 0, config.num_output_shards)} ... "
          f"in {seconds:.1f} s ({documents / seconds:.0f} documents/s, {examples / seconds:.0f} examples/s)",
          flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run, pass_unknown_flags=True,
                           required_flags=["input_file", "output_file", "vocab_file"])
