"""Sentence pairs for translation: parallel text files in, length-bucketed batches of
token ids out.

The files are plain UTF-8 (or `.xz` / `.gz` compressed), one sentence a line, line i of
the source file paired with line i of the target file. Both sides are tokenized with one
joint SentencePiece model (`make_vocab.py --vocab_type=sentencepiece` over both
languages). Each pair becomes

    source_ids   = pieces(source) + [</s>]          (fairseq appends </s> to the source)
    target_ids   = [<s>] + pieces(target)            (the decoder's input)
    target_labels = pieces(target) + [</s>]          (what it predicts)

Batches hold pairs of similar length (buckets of `BUCKET_WIDTH` tokens) and at most
`max_tokens` tokens of the longer side, padded (with the pad id) to their longest
member: fairseq's `--max-tokens` batching. Under XLA (`static_shapes`) the buckets are
powers of two and every batch of a bucket has one shape, so a handful of shapes compile. A training epoch's batch order is a function
of the seed and the epoch, so a resumed run skips exactly the batches it has consumed.
"""

import gzip
import lzma

import numpy as np
import tensorflow as tf

from realformer_tf.errors import InputError

BUCKET_WIDTH = 8
FEATURES = ("source_ids", "target_ids", "target_labels")


def _open_text(path):
    if not tf.io.gfile.exists(path):
        raise InputError(f"{path} does not exist")
    if path.endswith(".xz"):
        return lzma.open(path, "rt", encoding="utf-8")
    if path.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return tf.io.gfile.GFile(path, "r")


def read_lines(path):
    """The lines of a text file, without their line ends."""
    try:
        with _open_text(path) as f:
            return [line.rstrip("\r\n") for line in f]
    except (UnicodeDecodeError, lzma.LZMAError, gzip.BadGzipFile, EOFError) as e:
        raise InputError(f"{path} is not UTF-8 text{' in its compression' if path.endswith(('.xz', '.gz')) else ''} "
                         f"({e}); give plain UTF-8 text, one sentence a line") from None


def read_pairs(source_file, target_file):
    """[(source line, target line)] of two parallel files.

    Raises:
      InputError: a missing or unreadable file, files of different line counts (naming
        the first line without a partner), or a pair with an empty side (naming it).
    """
    sources, targets = read_lines(source_file), read_lines(target_file)
    if len(sources) != len(targets):
        longer, shorter = (source_file, target_file) if len(sources) > len(targets) else (target_file, source_file)
        raise InputError(f"{source_file} has {len(sources)} lines but {target_file} has {len(targets)}: line "
                         f"{min(len(sources), len(targets)) + 1} of {longer} has no partner in {shorter}. Parallel "
                         "files pair line i with line i; give two files of one corpus, in one order")
    if not sources:
        raise InputError(f"{source_file} is empty: give parallel text, one sentence a line")
    for number, (source, target) in enumerate(zip(sources, targets), 1):
        if not source.strip() or not target.strip():
            empty, other, text = (source_file, target_file, target) if not source.strip() else (
                target_file, source_file, source)
            raise InputError(f"line {number} of {empty} is empty (its partner in {other}: {text[:60]!r}); remove "
                             "the pair from both files")
    return list(zip(sources, targets))


def encode_pairs(pairs, encode, bos_id, eos_id, max_length, log=None):
    """Token ids of each pair (see the module docstring), leaving out pairs that
    tokenize to nothing on a side or have a side longer than `max_length` tokens (with
    its </s> or <s>), as fairseq skips them; `log` gets one line on what was left out.
    Returns a list of dicts of int32 arrays."""
    examples, empty, long = [], 0, 0
    for source, target in pairs:
        source_pieces, target_pieces = encode(source), encode(target)
        if not source_pieces or not target_pieces:
            empty += 1
            continue
        if max(len(source_pieces), len(target_pieces)) + 1 > max_length:
            long += 1
            continue
        examples.append({"source_ids": np.array(source_pieces + [eos_id], np.int32),
                         "target_ids": np.array([bos_id] + target_pieces, np.int32),
                         "target_labels": np.array(target_pieces + [eos_id], np.int32)})
    if log and (empty or long):
        log(f"Input: left out {empty} pair(s) with no token on a side and {long} longer than {max_length} tokens "
            f"(--max_seq_length); {len(examples)} kept")
    if not examples:
        raise InputError(f"no sentence pair fits --max_seq_length={max_length} ({len(pairs)} read): raise it")
    return examples


def _length(example):
    return max(len(example["source_ids"]), len(example["target_ids"]))


def bucket_length(length, static_shapes=False):
    """The padded length of a pair `length` tokens long: the next multiple of
    BUCKET_WIDTH, or with `static_shapes` the next power of two (at least BUCKET_WIDTH),
    so that XLA compiles a handful of shapes."""
    if static_shapes:
        return max(BUCKET_WIDTH, 1 << (int(length) - 1).bit_length())
    return -(-int(length) // BUCKET_WIDTH) * BUCKET_WIDTH


def plan_batches(examples, max_tokens, shuffle_seed=None, static_shapes=False):
    """Lists of example indices, each a batch of one length bucket (`bucket_length`)
    with at most `max_tokens` tokens once padded; in bucket order, or shuffled by
    `shuffle_seed` (batches and the pairs within buckets)."""
    rng = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)
    buckets = {}
    order = np.arange(len(examples)) if rng is None else rng.permutation(len(examples))
    for i in order:
        buckets.setdefault(bucket_length(_length(examples[i]), static_shapes), []).append(int(i))
    batches = []
    for length in sorted(buckets):
        per_batch = max(1, max_tokens // length)
        members = buckets[length]
        batches.extend(members[start:start + per_batch] for start in range(0, len(members), per_batch))
    if rng is not None:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def pad_batch(examples, indices, pad_id, max_tokens=None):
    """{feature: int32 [batch, longest]} of the examples at `indices`, padded with
    `pad_id`. With `max_tokens` (static shapes) every batch of a bucket has one shape:
    [max_tokens // bucket, bucket], the rows beyond the examples all padding (they
    weigh nothing in the loss)."""
    longest = max(_length(examples[i]) for i in indices)
    rows, width = len(indices), None
    if max_tokens is not None:
        width = bucket_length(longest, static_shapes=True)
        rows = max(1, max_tokens // width)
    batch = {}
    for name in FEATURES:
        values = [examples[i][name] for i in indices]
        out = np.full((rows, width or max(len(v) for v in values)), pad_id, np.int32)
        for j, row in enumerate(values):
            out[j, :len(row)] = row
        batch[name] = out
    return batch


def make_dataset_fn(examples, max_tokens, pad_id, is_training, seed=None, max_steps=None, log=None,
                    static_shapes=False):
    """`dataset_fn(input_context, start_step=0)` of padded batches: for training, the
    epochs' shuffled batch orders one after another without end (`start_step` batches
    skipped); otherwise the batches once, in length order. With several input pipelines
    each takes every n-th batch. `static_shapes` (for XLA): power-of-two lengths and
    one batch shape per length (`pad_batch`)."""
    def generator(pipelines, pipeline_id, start_step):
        epoch, seen = 0, 0
        while True:
            shuffle = None if not is_training else (seed or 0) * 100003 + epoch
            plan = plan_batches(examples, max_tokens, shuffle, static_shapes)[pipeline_id::pipelines]
            for indices in plan:
                if seen >= start_step:
                    yield pad_batch(examples, indices, pad_id, max_tokens if static_shapes else None)
                seen += 1
            if not is_training:
                return
            epoch += 1

    def dataset_fn(input_context=None, start_step=0):
        pipelines, pipeline_id = 1, 0
        if input_context is not None:
            pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        if start_step and log:
            log(f"Input: resumed after {start_step} batches: skipping them (the order is fixed by --seed)")
        spec = {name: tf.TensorSpec([None, None], tf.int32) for name in FEATURES}
        d = tf.data.Dataset.from_generator(lambda: generator(pipelines, pipeline_id, start_step),
                                           output_signature=spec)
        if max_steps is not None and max_steps > 0:
            d = d.take(max_steps)
        return d.prefetch(2)

    return dataset_fn
