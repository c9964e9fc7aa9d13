"""Pretraining TFRecords from raw text as an Apache Beam pipeline, at corpus scale.

The same examples as `create_pretraining_data.py`'s in-process path (Model Garden's
`official.nlp.data.create_pretraining_data`, a port of the original BERT script), made
so that no worker ever holds the corpus:

1. Read: each file is split into documents (blank-line separated; a new file starts a
   new document). A document's id is (the file's name relative to the inputs' common
   folder, its index in the file): the same corpus under another folder or bucket gives
   the same ids.
2. Bucket: each document goes to bucket `hash(seed, id) % B`, with
   B = ceil(documents / documents_per_bucket) (a count over the corpus, not a guess).
3. Tokenize: each bucket, its documents sorted by id, is tokenized once, shuffled with a
   `random.Random` seeded from (seed, bucket) (as Model Garden shuffles the corpus
   before its rounds), and written to a file of the run.
4. Create: each of the bucket's dupe_factor rounds, on whichever worker the runner deals
   it to, turns the bucket's documents into instances exactly as Model Garden does for
   the whole corpus (its `create_instances_from_document`: pairs, a random next segment
   from another document of the same bucket, 80/10/10 masking), with a `random.Random`
   seeded from (seed, bucket, round). A worker holds one bucket.
5. Shuffle and write: each serialized tf.Example is keyed by hash(seed, bucket, round,
   index); shard = key % N. A round writes its examples to a file of the run, one sorted
   batch per shard, and only where each batch lies goes through the runner's shuffle; a
   shard's examples are written in key order to `PREFIX-00000-of-0000N` (Beam's shard
   name template), under a temporary name that the launching process renames once the
   whole pipeline has succeeded.

Why rounds, not buckets, are the unit of work: the DirectRunner deals a stage's elements
to its workers once, in equal numbers, with no stealing later, and documents differ in
length by a thousand times, so whole buckets left one of two workers idle for the last
~10% of the stage; a round is a fifth of a bucket (at dupe_factor 5) and a bucket's
rounds go to both workers.

This module wires the steps into a pipeline; one bucket's work is
`bucket_examples.py`, the shard files and batches are `pretraining_shards.py`.

Nothing depends on which worker did what or in which order: the same seed and inputs
give the same bytes on any runner with any number of workers. Apache Beam is an extra
(`realformer_tf[beam]`) and is imported only when a pipeline is built.
"""

import contextlib
import dataclasses
import hashlib
import math
import os
import random
import time

from realformer_tf.data.beam_workers import IMPORT_NOISE, WORKER_START_NOISE, stderr_without, with_quiet_local_workers
from realformer_tf.data.bucket_examples import (
    example_bytes, read_documents, round_instances, seeded_global_random, tokenize_documents)
from realformer_tf.data.pretraining_shards import (
    bucket_file_name, commit_shards, merge_batches, new_run_token, pack_batch, read_batch, read_tokens_file,
    remove_run_temporaries, run_temporary_name, shard_name, tokens_file_name, write_bucket_file, write_records,
    write_tokens_file)
from realformer_tf.errors import InputError, UsageError
from realformer_tf.fileio import commit, gfile, temporary_name

COUNTERS = "realformer_tf.pretraining_data"  # the Beam metrics namespace of the counters below
_INSTALL = 'pip install "realformer_tf[beam]"'


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
    """What the pipeline computes (the create_pretraining_data.py flags of that name).

    Args:
      input_files: the text files, in order (globs already expanded).
      output_prefix: shards are `<output_prefix>-00000-of-0000N`.
      num_output_shards: N.
      vocab_file: the WordPiece vocab (read by every worker; gs:// on a cloud runner).
      documents_per_bucket: the most documents one worker holds at a time (on average).
      The rest are Model Garden's arguments of the same names.
    """

    input_files: tuple
    output_prefix: str
    num_output_shards: int
    vocab_file: str
    do_lower_case: bool = True
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    do_whole_word_mask: bool = False
    max_ngram_size: int = None
    gzip_compress: bool = False
    use_v2_feature_names: bool = False
    documents_per_bucket: int = 1000


# ----------------------------------------------------------------- names and hashing


def stable_int(*parts):
    """A 64-bit integer from `parts` (str / int), the same in every process and Python
    version (Python's own hash() of a str is salted per process)."""
    text = "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def document_names(files):
    """Each file's name relative to the files' common folder (`a/x.txt`, `b/x.txt`), so
    that a corpus gives the same document ids wherever it is stored; a file given twice
    gets `#2`, `#3`, ... (ids must be unique for the order inside a bucket to be fixed)."""
    folders = [f.rsplit("/", 1)[0] + "/" if "/" in f else "" for f in files]
    common = os.path.commonprefix(folders)
    common = common[: common.rfind("/") + 1]
    names, seen = [], {}
    for path in files:
        name = path[len(common):]
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return names


def number_of_buckets(num_documents, documents_per_bucket):
    return max(1, math.ceil(num_documents / documents_per_bucket))


# -------------------------------------------------------------- the steps as callables
# Plain picklable callables (Beam's Map / FlatMap take any callable), so that this module
# imports without Beam. Each builds its tokenizer on first use in the worker.


class _Throughput:
    """Counts documents and examples in one worker and prints a line at most every
    `every` seconds, so a long run shows it is moving (on a cloud runner: the workers'
    logs; the counters are also Beam metrics)."""

    def __init__(self, what, every=5.0, with_examples=True):
        self.what, self.every, self.with_examples = what, every, with_examples
        self.documents = self.examples = 0
        self.start = self.last = time.time()

    def add(self, documents=0.0, examples=0):
        self.documents += documents
        self.examples += examples
        now = time.time()
        if now - self.last >= self.every:
            self.last = now
            seconds = max(now - self.start, 1e-9)
            examples = f", {self.examples} examples ({self.examples / seconds:.0f}/s)" if self.with_examples else ""
            print(f"  [worker {os.getpid()}] {self.what}: {self.documents:.0f} documents "
                  f"({self.documents / seconds:.0f}/s){examples}", flush=True)


def _counter(name):
    from apache_beam.metrics import Metrics

    return Metrics.counter(COUNTERS, name)


class _LazyStep:
    """A step whose worker-side state (tokenizer, counters) is built on first use and
    never pickled: what travels to the workers is the configuration only."""

    _state = None

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_state"}


class ReadDocuments(_LazyStep):
    """(name, path) -> ((name, index), lines) for every document of the file."""

    def __init__(self, do_lower_case):
        self.do_lower_case = do_lower_case

    def __call__(self, named_file):
        if self._state is None:
            from official.nlp.data import create_pretraining_data as mg

            self._state = (mg.get_processor_text_fn(False, self.do_lower_case),
                           _Throughput("read", with_examples=False), _counter("documents_read"))
        processor_text_fn, progress, counter = self._state
        name, path = named_file
        for document in read_documents(path, name, processor_text_fn):
            progress.add(documents=1)
            counter.inc()
            yield document


class KeyByBucket:
    """((name, index), lines) -> (bucket, ((name, index), lines))."""

    def __init__(self, seed, documents_per_bucket):
        self.seed, self.documents_per_bucket = seed, documents_per_bucket

    def __call__(self, document, num_documents):
        buckets = number_of_buckets(num_documents, self.documents_per_bucket)
        return stable_int(self.seed, *document[0]) % buckets, document


class TokenizeBucket(_LazyStep):
    """(bucket, documents) -> (bucket, round, tokens file) for each of the dupe_factor
    rounds: the bucket's documents are tokenized once, put in the bucket's random order
    and written to a file of the run, which each round reads."""

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def __call__(self, bucket_documents):
        if self._state is None:
            from official.nlp.tools import tokenization

            self._state = (tokenization.FullTokenizer(self.config.vocab_file, self.config.do_lower_case),
                           _counter("documents"))
        tokenizer, documents_counter = self._state
        bucket, documents = bucket_documents
        all_documents = tokenize_documents(documents, tokenizer)
        documents_counter.inc(len(all_documents))
        if not all_documents:
            return []
        random.Random(stable_int(self.config.random_seed, "bucket", bucket)).shuffle(all_documents)
        path = tokens_file_name(self.config.output_prefix, self.run_token, bucket)
        write_tokens_file(path, all_documents)
        return [(bucket, round_index, path) for round_index in range(self.config.dupe_factor)]


class CreateExamples(_LazyStep):
    """(bucket, round, tokens file) -> (shard, (path, offset, length)) for each shard the
    round's examples go to: the round's serialized examples are written to one file of
    the run (a batch per shard, sorted by key, back to back), and only where each batch
    lies goes through the runner's shuffle.

    So the shuffle moves a few bytes per round and shard, not the examples: on the
    DirectRunner the launching process, which holds the shuffle, and each worker, which
    gets its whole share of a shuffled stage at once, would otherwise hold a part of the
    corpus in proportion to its size. A worker holds one bucket here, and one shard
    while it writes it.

    Args:
      config: the PipelineConfig.
      run_token: the run's temporary names (`pretraining_shards.new_run_token`).
    """

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def _setup(self):
        from official.nlp.data import create_pretraining_data as mg
        from official.nlp.tools import tokenization

        tokenizer = tokenization.FullTokenizer(self.config.vocab_file, self.config.do_lower_case)
        self._state = (mg, tokenizer, list(tokenizer.vocab.keys()), _Throughput("created"), _counter("examples"))

    def __call__(self, bucket_round):
        if self._state is None:
            self._setup()
        mg, tokenizer, vocab_words, progress, examples_counter = self._state
        bucket, round_index, tokens_path = bucket_round
        seed, shards = self.config.random_seed, self.config.num_output_shards
        all_documents = read_tokens_file(tokens_path)
        # A document counts once over its dupe_factor rounds.
        progress.add(documents=len(all_documents) / self.config.dupe_factor)
        rng = random.Random(stable_int(seed, "round", bucket, round_index))
        by_shard = {}
        with seeded_global_random(stable_int(seed, "ngram", bucket, round_index), bool(self.config.max_ngram_size)):
            for index, instance in enumerate(round_instances(all_documents, self.config, rng, vocab_words, mg)):
                key = stable_int(seed, "example", bucket, round_index, index)
                by_shard.setdefault(key % shards, []).append((key, example_bytes(instance, tokenizer, self.config, mg)))
                progress.add(examples=1)
        examples_counter.inc(sum(len(batch) for batch in by_shard.values()))
        batches = [(shard, pack_batch(batch)) for shard, batch in sorted(by_shard.items())]
        name = bucket_file_name(self.config.output_prefix, self.run_token, bucket, round_index)
        return write_bucket_file(name, batches)


class WriteShard:
    """(shard, [where a batch lies, ...]) -> the shard written, in key order, under its
    run's temporary name; returns (shard, examples written). Every shard also gets a
    None, so that each of the N exists even if the hash gave it no example."""

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def __call__(self, shard_batches):
        shard, refs = shard_batches
        batches = [read_batch(ref) for ref in refs if ref is not None]  # the shard's examples, once
        final = shard_name(self.config.output_prefix, shard, self.config.num_output_shards)
        target = run_temporary_name(final, self.run_token)
        attempt = temporary_name(target)  # a retried bundle must not write over this one's file
        try:
            count = write_records(attempt, merge_batches(batches), self.config.gzip_compress)
            commit(attempt, target)
        finally:
            if gfile().exists(attempt):
                gfile().remove(attempt)
        _counter("examples_written").inc(count)
        if not count:
            _counter("empty_shards").inc()
        return shard, count


# ---------------------------------------------------------------------- the pipeline


def import_beam():
    """`apache_beam`, or a UsageError that says how to install it."""
    import logging

    class _DropImportNoise(logging.Filter):
        def filter(self, record):
            return not any(noise in record.getMessage() for noise in IMPORT_NOISE)

    loggers, drop = [logging.getLogger(), logging.getLogger("apache_beam.io.filesystems")], _DropImportNoise()
    for logger in loggers:
        logger.addFilter(drop)
    try:
        import apache_beam
    except ImportError as e:
        raise UsageError(f"--runner needs Apache Beam, which is not installed here ({e}); "
                         f"install it with `{_INSTALL}` (or pip install apache-beam)") from None
    finally:
        for logger in loggers:
            logger.removeFilter(drop)
    return apache_beam


def build_pipeline(pipeline, config, run_token):
    """Adds the steps to the Beam `pipeline`; returns the PCollection of (shard, count)."""
    import apache_beam as beam

    names = document_names(config.input_files)
    files = pipeline | "Files" >> beam.Create(list(zip(names, config.input_files)))
    documents = files | "ReadDocuments" >> beam.FlatMap(ReadDocuments(config.do_lower_case))
    num_documents = documents | "CountDocuments" >> beam.combiners.Count.Globally()
    examples = (
        documents
        | "KeyByBucket" >> beam.Map(KeyByBucket(config.random_seed, config.documents_per_bucket),
                                    num_documents=beam.pvalue.AsSingleton(num_documents))
        | "GroupBuckets" >> beam.GroupByKey()
        | "TokenizeBuckets" >> beam.FlatMap(TokenizeBucket(config, run_token))
        # A new stage, so that the runner deals the rounds to its workers one by one.
        | "SpreadRounds" >> beam.Reshuffle()
        | "CreateExamples" >> beam.FlatMap(CreateExamples(config, run_token))
    )
    every_shard = pipeline | "ShardIds" >> beam.Create([(i, None) for i in range(config.num_output_shards)])
    return (
        (examples, every_shard)
        | "Flatten" >> beam.Flatten()
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.Map(WriteShard(config, run_token))
    )


def _check_examples_written(config, counters):
    """No example written: one line, and no shard under its final name (a runner
    without metrics: no check)."""
    if counters and not counters.get("examples_written"):
        raise InputError(f"--input_file {','.join(config.input_files)} yielded no text to build examples "
                         "from; no shard was written")


def run_pipeline(config, pipeline_args, runner, build=None, check_counters=_check_examples_written):
    """Runs the pipeline (`build(pipeline, config, run_token)`, default this module's
    masked-LM `build_pipeline`) on `runner` with the Beam options `pipeline_args` (a
    command line's unparsed flags), checks its counters (`check_counters(config,
    counters)` raises for output that must not be committed), then renames the shards
    into place; returns the summary (the counters and `seconds`).

    The input checks (files exist, UTF-8, vocab, output path) are the caller's, before
    this: a bad input must not cost a pipeline start.
    """
    beam = import_beam()
    from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions
    from apache_beam.runners.runner import PipelineState

    options = PipelineOptions(with_quiet_local_workers(pipeline_args, runner), runner=runner)
    run_token, start = new_run_token(), time.time()
    try:
        pipeline = beam.Pipeline(options=options)
        local_workers = ("direct" in str(runner).lower()
                         and options.view_as(DirectOptions).direct_running_mode == "multi_processing")
        (build or build_pipeline)(pipeline, config, run_token)
        with stderr_without(WORKER_START_NOISE) if local_workers else contextlib.nullcontext():
            result = pipeline.run()
            # Waited for even with --no_wait_until_finish: the shards are renamed into
            # place only once every one of them is written.
            state = result.wait_until_finish()
        if state != PipelineState.DONE:
            raise RuntimeError(f"the pipeline ended in state {state}; no shard was written under its final name")
        counters = read_counters(result)
        check_counters(config, counters)
        commit_shards(config, run_token)
    finally:
        remove_run_temporaries(config, run_token)
    return dict(counters, seconds=time.time() - start)


def read_counters(result):
    """The counters of a finished run, {name: value} (committed where the runner has them)."""
    from apache_beam.metrics.metric import MetricsFilter

    values = {}
    for counter in result.metrics().query(MetricsFilter().with_namespace(COUNTERS))["counters"]:
        value = counter.committed if counter.committed is not None else counter.attempted
        values[counter.key.metric.name] = values.get(counter.key.metric.name, 0) + (value or 0)
    return values


