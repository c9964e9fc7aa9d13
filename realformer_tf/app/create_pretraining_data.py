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

A causal (GPT-style) language model's data, with --objective=causal_lm: the documents as
one token stream, an end-of-document token after each ([SEP] for a WordPiece
--vocab_file, </s> for a SentencePiece --spm_model_file), cut into blocks of exactly
--max_seq_length tokens, each a tf.train.Example with one feature, input_ids
(realformer_tf/data/causal_lm.py); the last incomplete block is dropped. With --runner,
the same blocks as shards.

  python create_pretraining_data.py --objective=causal_lm --input_file=corpus.txt \
    --spm_model_file=spm.model --max_seq_length=512 --output_file=lm.tfrecord
"""

import contextlib
import os
import random
import time


import numpy as np
import tensorflow as tf
from absl import flags, logging
from official.nlp.data import create_pretraining_data as mg
from official.nlp.tools import tokenization

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs import outputs
from realformer_tf.data import beam_causal_lm, beam_pretraining, causal_lm, causal_lm_stream, pretraining_shards
from realformer_tf.data.records import expand_input_files
from realformer_tf.data.text_files import check_text_files
from realformer_tf.data.vocab import check_vocab
from realformer_tf.errors import InputError
from realformer_tf.fileio import commit, temporary_name


# Masked-LM flags that mean nothing for the causal-LM stream: refused when given with it.
MASKED_LM_ONLY_FLAGS = ("max_predictions_per_seq", "masked_lm_prob", "dupe_factor", "short_seq_prob",
                        "do_whole_word_mask", "max_ngram_size", "use_v2_feature_names")


def define_flags(fv):
    """The original create_pretraining_data.py flags (and Model Garden's output options)
    on the FlagValues `fv`, plus --objective and --spm_model_file."""
    flags.DEFINE_enum("objective", "masked_lm", ("masked_lm", "causal_lm"), "masked_lm: BERT's masked-LM / "
                      "next-sentence examples; causal_lm: the token stream in blocks of --max_seq_length "
                      "(a GPT-style language model).", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "causal_lm only: a SentencePiece model (PREFIX.model) to tokenize "
                        "with, instead of a WordPiece --vocab_file.", flag_values=fv)
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
    _check_objective_flags(FLAGS)
    if FLAGS.objective == "causal_lm":
        return run_causal_lm(FLAGS, unparsed)
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
    cli.require(FLAGS.documents_per_bucket >= 2, f"--documents_per_bucket={FLAGS.documents_per_bucket}: give 2 "
                "or more (next-sentence negatives come from other documents of the same bucket)")
    prefix, shards = _beam_output(FLAGS)
    return beam_pretraining.PipelineConfig(
        input_files=tuple(expand_input_files(FLAGS.input_file)), output_prefix=prefix, num_output_shards=shards,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case, max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq, random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor, masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob,
        do_whole_word_mask=FLAGS.do_whole_word_mask, max_ngram_size=FLAGS.max_ngram_size,
        gzip_compress=FLAGS.gzip_compress, use_v2_feature_names=FLAGS.use_v2_feature_names,
        documents_per_bucket=FLAGS.documents_per_bucket)


def _beam_output(FLAGS):  # noqa: N803
    """(output prefix, shard count) of a Beam run, checked: one prefix, a shard count, a
    writable place, and no shards of a run with another count under the prefix."""
    prefix = (FLAGS.output_file or "").strip()
    cli.require("," not in prefix, f"--output_file={prefix}: with --runner it is one prefix "
                "(shards are PREFIX-00000-of-0000N), not a list")
    shards = FLAGS.num_output_shards
    cli.require(shards is not None and shards >= 1, f"--num_output_shards={shards}: with --runner give the number "
                "of output shards (1 or more; e.g. 16), so that one shard fits a worker's memory")
    outputs.check_output_file(prefix, "--output_file", example="train")
    stale = pretraining_shards.stale_shards(prefix, shards)
    cli.require(not stale, f"--output_file={prefix}: {len(stale)} shard(s) of a run with another "
                f"--num_output_shards are there ({stale[0] if stale else ''}, ...), and PREFIX-* would read "
                "them with this run's; remove them or choose another prefix")
    return prefix, shards


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


# ------------------------------------------------------------------ --objective=causal_lm


def _check_objective_flags(FLAGS):  # noqa: N803
    """The tokenizer flags and the objective's own flags, before any file is read: exactly
    one of --vocab_file and --spm_model_file, SentencePiece for causal_lm only."""
    vocab, spm = FLAGS.vocab_file, FLAGS.spm_model_file
    cli.require(not (vocab and spm), "--vocab_file and --spm_model_file are both given; give one: a WordPiece "
                "vocab.txt (--vocab_file) or a SentencePiece model (--spm_model_file, --objective=causal_lm only)")
    if FLAGS.objective == "masked_lm":
        cli.require(not spm, f"--spm_model_file={spm}: --objective=masked_lm needs a WordPiece --vocab_file (its "
                    "masking and [CLS]/[SEP]/[MASK] are WordPiece tokens); SentencePiece is for --objective=causal_lm")
        cli.require(vocab, "--vocab_file is required (a WordPiece vocab.txt; make_vocab.py makes one)")
    else:
        _check_causal_lm_flags(FLAGS)


def _check_causal_lm_flags(FLAGS):  # noqa: N803
    """A tokenizer, and no flag that means nothing for the stream (it would be silently
    ignored)."""
    spm = FLAGS.spm_model_file
    cli.require(FLAGS.vocab_file or spm, "--objective=causal_lm needs a tokenizer: give --vocab_file (a WordPiece "
                "vocab.txt) or --spm_model_file (a SentencePiece model)")
    given = [f"--{name}" for name in MASKED_LM_ONLY_FLAGS if FLAGS[name].present]
    cli.require(not given, f"{', '.join(given)}: masked-LM flag(s), meaningless with --objective=causal_lm (the "
                "blocks are the token stream cut every --max_seq_length tokens); drop them")
    cli.require(not (spm and FLAGS["do_lower_case"].present), "--do_lower_case with --spm_model_file: a "
                "SentencePiece model folds case by its own rules (make_vocab.py --do_lower_case builds that in); "
                "drop the flag")
    cli.require(FLAGS.max_seq_length >= 2, f"--max_seq_length={FLAGS.max_seq_length}: a causal-LM block needs 2 "
                "or more tokens (each predicts the next); e.g. 512")


def _tokenizer_spec(FLAGS):  # noqa: N803
    return causal_lm_stream.TokenizerSpec(vocab_file=FLAGS.vocab_file or None,
                                          spm_model_file=FLAGS.spm_model_file or None,
                                          do_lower_case=FLAGS.do_lower_case)


def run_causal_lm(FLAGS, unparsed=()):  # noqa: N803
    """--objective=causal_lm: the token stream in blocks, in this process or, given
    --runner, as a Beam pipeline (the same blocks in the same order)."""
    if FLAGS.runner:
        return run_causal_lm_beam(FLAGS, unparsed)
    _refuse_beam_flags(FLAGS, unparsed)
    output_files = [p.strip() for p in FLAGS.output_file.split(",") if p.strip()]
    cli.require(output_files, "--output_file is required")
    for path in output_files:
        outputs.check_output_file(path, "--output_file")  # before the text is read
    input_files = expand_input_files(FLAGS.input_file)
    check_text_files(input_files)
    tokenizer = causal_lm_stream.build_tokenizer(_tokenizer_spec(FLAGS))
    for path in output_files:
        tf.io.gfile.makedirs(os.path.dirname(path) or ".")

    print(f"Reading {len(input_files)} file(s); {tokenizer.description} ({tokenizer.size} tokens)", flush=True)
    lines = _Progress("lines tokenized")
    stream = causal_lm_stream.token_stream(causal_lm_stream.read_documents(input_files), tokenizer,
                                           on_document=lambda document: lines.tick(len(document)))
    lines.report()
    length = FLAGS.max_seq_length
    blocks = len(stream.ids) // length
    if not blocks:
        raise InputError(f"--input_file {FLAGS.input_file} {causal_lm_stream.not_enough_text(len(stream.ids), length)}")
    _write_blocks(stream.ids, blocks, FLAGS, output_files)
    print(f"Wrote {blocks} blocks to {', '.join(output_files)}; "
          f"{_causal_statistics(stream.documents, len(stream.ids), blocks, length)}", flush=True)


def _write_blocks(ids, num_blocks, FLAGS, output_files):  # noqa: N803
    """Writes the blocks in their seeded order, dealt round robin to the files (as the
    masked-LM writer deals its examples), under temporary names renamed into place once
    all are written: an interrupted run leaves no file that looks complete."""
    ids, length = np.frombuffer(ids, dtype=np.intc), FLAGS.max_seq_length
    temp_files = [temporary_name(p) for p in output_files]
    written = _Progress("blocks written", total=num_blocks)
    try:
        with contextlib.ExitStack() as stack:
            writers = [stack.enter_context(tf.io.TFRecordWriter(t, options="GZIP" if FLAGS.gzip_compress else ""))
                       for t in temp_files]
            for n, block in enumerate(causal_lm_stream.block_order(num_blocks, FLAGS.random_seed)):
                block_ids = ids[block * length:(block + 1) * length].tolist()
                writers[n % len(writers)].write(causal_lm.example_bytes(block_ids))
                written.tick()
        for temp, final in zip(temp_files, output_files):
            commit(temp, final)
    finally:
        for temp in temp_files:
            if tf.io.gfile.exists(temp):
                tf.io.gfile.remove(temp)
    written.report()


def _causal_statistics(documents, tokens, blocks, length):
    """The statistics line's figures, the same in one process and on Beam."""
    return (f"{documents} documents, {tokens} tokens (end-of-document tokens included), {blocks} blocks of "
            f"{length} tokens, {tokens - blocks * length} tokens dropped (the last, incomplete block)")


def run_causal_lm_beam(FLAGS, pipeline_args):  # noqa: N803
    """Checks the inputs here, then runs the Beam pipeline (realformer_tf/data/beam_causal_lm.py)."""
    cli.require(FLAGS.documents_per_bucket >= 1, f"--documents_per_bucket={FLAGS.documents_per_bucket}: give 1 or "
                "more (consecutive documents that one worker tokenizes)")
    prefix, shards = _beam_output(FLAGS)
    config = beam_causal_lm.CausalPipelineConfig(
        input_files=tuple(expand_input_files(FLAGS.input_file)), output_prefix=prefix, num_output_shards=shards,
        tokenizer=_tokenizer_spec(FLAGS), max_seq_length=FLAGS.max_seq_length, random_seed=FLAGS.random_seed,
        gzip_compress=FLAGS.gzip_compress, documents_per_bucket=FLAGS.documents_per_bucket)
    beam_pretraining.import_beam()  # a missing install is one error line before the text is read
    tokenizer = causal_lm_stream.build_tokenizer(config.tokenizer)  # its files checked before the corpus is read
    check_text_files(config.input_files)
    print(f"Beam pipeline on {FLAGS.runner}: {len(config.input_files)} file(s), {tokenizer.description} "
          f"({tokenizer.size} tokens), {shards} shard(s), about {config.documents_per_bucket} documents per chunk",
          flush=True)
    outputs.makedirs(os.path.dirname(prefix) or ".", "--output_file")
    summary = beam_causal_lm.run_pipeline(config, pipeline_args, FLAGS.runner)
    if summary.get("empty_shards"):
        print(f"warning: {summary['empty_shards']} of {shards} shards hold no block; use fewer "
              "--num_output_shards for this corpus", flush=True)
    blocks, seconds = summary.get("examples_written", 0), max(summary["seconds"], 1e-9)
    print(f"Wrote {blocks} blocks to {pretraining_shards.shard_name(prefix, 0, shards)} ...; "
          f"{_causal_statistics(summary.get('documents', 0), summary.get('tokens', 0), blocks, config.max_seq_length)}"
          f"; in {seconds:.1f} s ({blocks / seconds:.0f} blocks/s)", flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run, pass_unknown_flags=True,
                           required_flags=["input_file", "output_file"])
