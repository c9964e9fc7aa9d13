"""The files of a sharded pretraining-data run: `PREFIX-00000-of-0000N` shard names,
the run's temporary files (a bucket's tokenized documents, read by each of its rounds;
the batches that carry one round's examples for one shard from the worker that made them
to the worker that writes the shard).

Nothing appears under a final shard name until the whole run has succeeded: shards are
written under the run's temporary names and renamed into place by the launching process
(`commit_shards`); a failed run's temporaries are removed (`remove_run_temporaries`).
"""

import heapq
import os
import struct
import uuid

from realformer_tf.fileio import commit, gfile, temporary_name


def shard_name(prefix, index, count):
    """`PREFIX-00003-of-00016`: Beam's default shard template, so `PREFIX-*` globs them."""
    return f"{prefix}-{index:05d}-of-{count:05d}"


def write_records(path, records, gzip_compress):
    """Writes `records` (bytes) as a TFRecord file at `path`; returns how many."""
    import tensorflow as tf

    count = 0
    with tf.io.TFRecordWriter(path, options="GZIP" if gzip_compress else "") as writer:
        for record in records:
            writer.write(record)
            count += 1
    return count


def run_temporary_name(path, run_token):
    """Where a shard waits until the whole run has succeeded: renamed onto `path` by the
    launching process then (`commit_shards`), removed if the run fails."""
    return f"{path}.incomplete-{run_token}"


def new_run_token():
    return f"run-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def bucket_file_name(prefix, run_token, bucket, round_index):
    """One round of a bucket's examples while the run lasts (removed with the run's other
    temporaries)."""
    return f"{prefix}.incomplete-{run_token}.bucket-{bucket:06d}-round-{round_index:03d}"


def tokens_file_name(prefix, run_token, bucket):
    """A bucket's tokenized documents while the run lasts, read by each of its rounds."""
    return f"{prefix}.incomplete-{run_token}.bucket-{bucket:06d}-tokens"


def _write_atomically(path, chunks):
    """Writes the bytes `chunks` to `path` under a temporary name, then renames it: a
    retried bundle writes the same bytes under its own temporary name."""
    attempt = temporary_name(path)
    try:
        with gfile().GFile(attempt, "wb") as f:
            for chunk in chunks:
                f.write(chunk)
        commit(attempt, path)
    finally:
        if gfile().exists(attempt):
            gfile().remove(attempt)


def write_bucket_file(path, batches):
    """Writes [(shard, batch)] back to back to `path`; returns
    [(shard, (path, offset, length))]."""
    refs, offset = [], 0
    for shard, batch in batches:
        refs.append((shard, (path, offset, len(batch))))
        offset += len(batch)
    _write_atomically(path, [batch for _, batch in batches])
    return refs


# Tokenized documents as text: tokens joined by spaces, a document's lines by newlines,
# documents by blank lines. WordPiece tokens never hold whitespace (the tokenizer splits
# on it), so this reads back exactly, and it is plain text, not code (unlike a pickle).


def write_tokens_file(path, documents):
    """Writes [[[token, ...] per line] per document] to `path`."""
    text = "\n\n".join("\n".join(" ".join(line) for line in document) for document in documents)
    _write_atomically(path, [text.encode("utf-8")])


def read_tokens_file(path):
    """The documents `write_tokens_file` wrote."""
    with gfile().GFile(path, "rb") as f:
        text = f.read().decode("utf-8")
    return [[line.split(" ") for line in document.split("\n")] for document in text.split("\n\n")] if text else []


def read_batch(ref):
    """The batch at (path, offset, length)."""
    path, offset, length = ref
    with gfile().GFile(path, "rb") as f:
        f.seek(offset)
        return f.read(length)


# A batch: one round of a bucket's examples for one shard, sorted by key, as one bytes object:
# count (4 bytes), the keys (8 bytes each), the records' lengths (4 bytes each), the
# records. One object instead of a tuple per example: the runner moves and the writer
# holds a shard's data at about its size, with no per-example Python object.


def pack_batch(keyed_records):
    """[(key, record bytes), ...] -> a batch (sorted by key, then record)."""
    keyed_records = sorted(keyed_records)
    n = len(keyed_records)
    keys = [key for key, _ in keyed_records]
    records = [record for _, record in keyed_records]
    return struct.pack(f">I{n}Q{n}I", n, *keys, *map(len, records)) + b"".join(records)


def unpack_batch(batch):
    """Yields (key, record bytes) of a batch, in its order."""
    (n,) = struct.unpack_from(">I", batch)
    keys = struct.unpack_from(f">{n}Q", batch, 4)
    lengths = struct.unpack_from(f">{n}I", batch, 4 + 8 * n)
    view, offset = memoryview(batch), 4 + 12 * n
    for key, length in zip(keys, lengths):
        yield key, bytes(view[offset:offset + length])
        offset += length


def merge_batches(batches):
    """The records of sorted batches, merged into key order. The batches are put in a
    fixed order first (by content), so that two equal keys (64-bit hashes of billions of
    examples can collide) come out in the same order whatever order the runner gave."""
    ordered = sorted(batches)
    return (record for _, record in heapq.merge(*[unpack_batch(b) for b in ordered], key=lambda kv: kv[0]))


def commit_shards(config, run_token):
    """Renames every shard of the succeeded run onto its final name."""
    for index in range(config.num_output_shards):
        final = shard_name(config.output_prefix, index, config.num_output_shards)
        commit(run_temporary_name(final, run_token), final)


def remove_run_temporaries(config, run_token):
    """Removes what a failed run left under its temporary names (nothing after a success)."""
    import tensorflow as tf

    for path in tf.io.gfile.glob(f"{config.output_prefix}*.incomplete-{run_token}*"):  # shards, tokens and bucket files
        tf.io.gfile.remove(path)


def stale_shards(prefix, num_shards):
    """Shards under `prefix` from a run with another shard count: `PREFIX-*` would read
    them together with this run's."""
    import tensorflow as tf

    ours = {shard_name(prefix, i, num_shards) for i in range(num_shards)}
    found = tf.io.gfile.glob(f"{prefix}-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]")
    return sorted(p for p in found if p not in ours)
