"""Causal-LM blocks from raw text as an Apache Beam pipeline: the same blocks, in the same
order, as `create_pretraining_data.py --objective=causal_lm` makes in one process
(`causal_lm_stream.py`), made so that no worker holds the corpus.

The stream is one sequence over the whole corpus, so a document's place in it depends on
every document before it. The pipeline tokenizes in parallel and places in order:

1. Read: each file's documents, keyed (file position, index in the file): input order.
2. Chunk and tokenize: consecutive documents of a file form a chunk
   (`documents_per_bucket` of them); a worker tokenizes one chunk, in document order,
   and writes its ids (end-of-document tokens included) to a file of the run. What goes
   on: (chunk, token count, ids file).
3. Lay out: the chunks' counts, in chunk order, give each chunk's start in the stream
   (one small list: a number per chunk).
4. Cut: each chunk, on any worker, cuts the blocks that lie wholly inside it, keyed by
   `block_key(seed, block)` and written as one batch per shard to a file of the run
   (only where each batch lies goes through the runner's shuffle, as in the masked-LM
   pipeline); the pieces of blocks that cross a chunk's edge (at most two per chunk)
   go on as ids.
5. Join: one worker joins the edge pieces into their blocks (a few per chunk).
6. Write: each shard's blocks in key order to `PREFIX-00000-of-0000N` (the masked-LM
   pipeline's writer, `beam_pretraining.WriteShard`), renamed into place by the
   launching process once the whole pipeline has succeeded.

The same seed and inputs give the same bytes on any runner with any number of workers;
with one shard, the bytes of the in-process output file.
"""

import dataclasses

import numpy as np

from realformer_tf.data import beam_pretraining, causal_lm, causal_lm_stream
from realformer_tf.data.beam_pretraining import COUNTERS, ReadDocuments, WriteShard
from realformer_tf.data.pretraining_shards import pack_batch, write_bucket_file
from realformer_tf.errors import InputError
from realformer_tf.fileio import commit, gfile, temporary_name

_IDS = "<i4"  # how a chunk's ids are stored in its file of the run


@dataclasses.dataclass(frozen=True)
class CausalPipelineConfig:
    """What the pipeline computes (the create_pretraining_data.py flags of that name).

    Args:
      input_files: the text files, in order (globs already expanded).
      output_prefix: shards are `<output_prefix>-00000-of-0000N`.
      num_output_shards: N.
      tokenizer: the causal_lm_stream.TokenizerSpec (its files read by every worker).
      documents_per_bucket: consecutive documents per chunk, the unit a worker tokenizes.
    """

    input_files: tuple
    output_prefix: str
    num_output_shards: int
    tokenizer: causal_lm_stream.TokenizerSpec
    max_seq_length: int = 128
    random_seed: int = 12345
    gzip_compress: bool = False
    documents_per_bucket: int = 1000


def _counter(name):
    from apache_beam.metrics import Metrics

    return Metrics.counter(COUNTERS, name)


def _run_file(config, run_token, what):
    """A file of the run (removed with its other temporaries by `remove_run_temporaries`)."""
    return f"{config.output_prefix}.incomplete-{run_token}.{what}"


def _chunk_file(config, run_token, chunk, what):
    position, index = chunk
    return _run_file(config, run_token, f"chunk-{position:05d}-{index:06d}-{what}")


def _write_once(path, data):
    """Writes `data` to `path` under a temporary name, then renames it: a retried bundle
    writes the same bytes under its own temporary name."""
    attempt = temporary_name(path)
    try:
        with gfile().GFile(attempt, "wb") as f:
            f.write(data)
        commit(attempt, path)
    finally:
        if gfile().exists(attempt):
            gfile().remove(attempt)


class _ChunkKey:
    """((position, index), lines) -> ((position, index // documents_per_bucket), (index, lines))."""

    def __init__(self, documents_per_bucket):
        self.documents_per_bucket = documents_per_bucket

    def __call__(self, document):
        (position, index), lines = document
        return (position, index // self.documents_per_bucket), (index, lines)


class TokenizeChunk:
    """(chunk, [(index, lines)]) -> [(chunk, tokens, ids file)] (none for a chunk without
    a token): its documents tokenized in order and their ids written to a file of the run."""

    _state = None

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def __getstate__(self):  # the tokenizer is built in the worker, never pickled
        return {k: v for k, v in self.__dict__.items() if k != "_state"}

    def __call__(self, chunk_documents):
        if self._state is None:
            self._state = (causal_lm_stream.build_tokenizer(self.config.tokenizer), _counter("documents"),
                           _counter("tokens"))
        tokenizer, documents_counter, tokens_counter = self._state
        chunk, documents = chunk_documents
        stream = causal_lm_stream.token_stream((lines for _, lines in sorted(documents, key=lambda d: d[0])),
                                               tokenizer)
        documents_counter.inc(stream.documents)
        tokens_counter.inc(len(stream.ids))
        if not stream.ids:
            return []
        path = _chunk_file(self.config, self.run_token, chunk, "ids")
        _write_once(path, np.asarray(stream.ids, dtype=_IDS).tobytes())
        return [(chunk, len(stream.ids), path)]


def chunk_layout(counts):
    """[(chunk, tokens)] in any order -> ({chunk: its start in the stream}, total tokens)."""
    starts, total = {}, 0
    for chunk, tokens in sorted(counts):
        starts[chunk] = total
        total += tokens
    return starts, total


class CutChunk:
    """(chunk, tokens, ids file) -> (shard, where a batch lies) for the blocks wholly inside
    the chunk, written to a file of the run; the pieces of blocks crossing its edges go
    to the output tagged "pieces" as (block, start, ids)."""

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def __call__(self, chunk_file, layout):
        import apache_beam as beam

        chunk, length, path = chunk_file
        starts, total = layout
        start, size, seed = starts[chunk], self.config.max_seq_length, self.config.random_seed
        with gfile().GFile(path, "rb") as f:
            ids = np.frombuffer(f.read(), dtype=_IDS)
        by_shard, pieces = {}, []
        for block, lo, hi in causal_lm_stream.blocks_touched(start, length, total, size):
            piece = ids[lo - start:hi - start].tolist()
            if hi - lo < size:
                pieces.append(beam.pvalue.TaggedOutput("pieces", (block, lo, piece)))
                continue
            key = causal_lm_stream.block_key(seed, block)
            by_shard.setdefault(key % self.config.num_output_shards, []).append((key, causal_lm.example_bytes(piece)))
        if not by_shard:
            return pieces
        batches = [(shard, pack_batch(batch)) for shard, batch in sorted(by_shard.items())]
        return pieces + write_bucket_file(_chunk_file(self.config, self.run_token, chunk, "blocks"), batches)


class JoinEdgeBlocks:
    """[(block, start, ids)] (every edge piece of the run) -> (shard, where a batch lies)
    for the blocks they make, written to one file of the run."""

    def __init__(self, config, run_token):
        self.config, self.run_token = config, run_token

    def __call__(self, pieces):
        blocks = {}
        for block, start, ids in sorted(pieces):
            blocks.setdefault(block, []).extend(ids)
        by_shard, seed = {}, self.config.random_seed
        for block, ids in blocks.items():
            if len(ids) != self.config.max_seq_length:
                raise RuntimeError(f"block {block} joined from its pieces has {len(ids)} tokens, "
                                   f"not {self.config.max_seq_length}")
            key = causal_lm_stream.block_key(seed, block)
            by_shard.setdefault(key % self.config.num_output_shards, []).append((key, causal_lm.example_bytes(ids)))
        if not by_shard:
            return []
        batches = [(shard, pack_batch(batch)) for shard, batch in sorted(by_shard.items())]
        return write_bucket_file(_run_file(self.config, self.run_token, "edge-blocks"), batches)


def build_pipeline(pipeline, config, run_token):
    """Adds the steps to the Beam `pipeline`; returns the PCollection of (shard, count)."""
    import apache_beam as beam

    files = pipeline | "Files" >> beam.Create(list(enumerate(config.input_files)))
    chunks = (
        files
        | "ReadDocuments" >> beam.FlatMap(ReadDocuments(True))  # (lower-casing is the tokenizer's)
        | "KeyByChunk" >> beam.Map(_ChunkKey(config.documents_per_bucket))
        | "GroupChunks" >> beam.GroupByKey()
        | "TokenizeChunks" >> beam.FlatMap(TokenizeChunk(config, run_token))
    )
    layout = (chunks
              | "Counts" >> beam.Map(lambda c: (c[0], c[1]))
              | "AllCounts" >> beam.combiners.ToList()
              | "Layout" >> beam.Map(chunk_layout))
    cut = (
        chunks
        # A new stage, so that the runner deals the chunks to its workers one by one.
        | "SpreadChunks" >> beam.Reshuffle()
        # (A bound method: Beam hands side inputs to functions and methods, not to other callables.)
        | "CutChunks" >> beam.FlatMap(CutChunk(config, run_token).__call__, layout=beam.pvalue.AsSingleton(layout))
        .with_outputs("pieces", main="batches")
    )
    edges = (cut.pieces
             | "AllPieces" >> beam.combiners.ToList()
             | "JoinEdgeBlocks" >> beam.FlatMap(JoinEdgeBlocks(config, run_token)))
    every_shard = pipeline | "ShardIds" >> beam.Create([(i, None) for i in range(config.num_output_shards)])
    return (
        (cut.batches, edges, every_shard)
        | "Flatten" >> beam.Flatten()
        | "GroupShards" >> beam.GroupByKey()
        | "WriteShards" >> beam.Map(WriteShard(config, run_token))
    )


def run_pipeline(config, pipeline_args, runner):
    """Runs the pipeline on `runner` with the Beam options `pipeline_args`, then renames
    the shards into place; returns the summary (documents, tokens, examples_written,
    seconds). The input checks are the caller's, before this."""
    return beam_pretraining.run_pipeline(config, pipeline_args, runner, build=build_pipeline,
                                         check_counters=_check_enough_text)


def _check_enough_text(config, counters):
    """No block written: one line, and no shard under its final name (a runner without
    metrics: no check)."""
    if not counters or counters.get("examples_written"):
        return
    why = causal_lm_stream.not_enough_text(counters.get("tokens", 0), config.max_seq_length)
    raise InputError(f"--input_file {','.join(config.input_files)} {why}; no shard was written")

