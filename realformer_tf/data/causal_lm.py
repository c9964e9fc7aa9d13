"""Causal language model TFRecords: the one place that says what a record holds.

`create_pretraining_data.py --objective=causal_lm` writes the documents as one token
stream, an end-of-document token after each, cut into consecutive blocks of exactly
`max_seq_length` tokens (fairseq's `--sample-break-mode none`). Each block is one
tf.train.Example with a single int64 feature, `input_ids`, of length `max_seq_length`:
no padding, no mask, no labels (the targets are the inputs shifted by one).
"""

import tensorflow as tf
from absl import logging

from realformer_tf.data import integrity, records
from realformer_tf.data.records import check_record_lengths, expand_input_files
from realformer_tf.errors import InputError

FEATURE = "input_ids"


def feature_spec(max_seq_length):
    """The parsing spec of a block record."""
    return {FEATURE: tf.io.FixedLenFeature([max_seq_length], tf.int64)}


def example_bytes(ids):
    """A block (token ids) as a serialized tf.train.Example, serialized deterministically
    so that the same block gives the same bytes in every process."""
    feature = tf.train.Feature(int64_list=tf.train.Int64List(value=list(ids)))
    example = tf.train.Example(features=tf.train.Features(feature={FEATURE: feature}))
    return example.SerializeToString(deterministic=True)


def decode_record(record, max_seq_length):
    """A serialized block -> {"input_ids": int32 [max_seq_length]} (TPUs want int32)."""
    return records.decode_record(record, feature_spec(max_seq_length))


def is_causal_example(example):
    """Whether a parsed tf.train.Example holds a block of this format (only `input_ids`)."""
    return set(example.features.feature) == {FEATURE}


def first_example(path):
    """The first record of `path` as a tf.train.Example, or None when the file cannot be
    read or holds none (`records.check_record_lengths` then names the problem)."""
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.DataLossError:
        return None
    return None if first is None else tf.train.Example.FromString(first.numpy())


def check_files(input_file, max_seq_length, log=logging.info):
    """Expands --input_file and checks, up front, that the first file holds causal-LM
    blocks of `max_seq_length` tokens and that the records are whole (data.integrity):
    masked-LM records would otherwise train on their [MASK]ed inputs without a word.
    `log(message)` gets the one line that says what was found."""
    files = expand_input_files(input_file)
    example = first_example(files[0])
    if example is not None and not is_causal_example(example):
        names = ", ".join(sorted(example.features.feature))
        raise InputError(f"{files[0]}: records hold the features {names}, not the causal-LM block ({FEATURE!r} "
                         "alone): masked-LM data? Make causal-LM data with create_pretraining_data.py "
                         "--objective=causal_lm")
    found = len(example.features.feature[FEATURE].int64_list.value) if example is not None else max_seq_length
    if found != max_seq_length:
        raise InputError(f"{files[0]}: blocks of {found} tokens, but max_seq_length is {max_seq_length}; set "
                         f"--max_seq_length={found} or make the data again with --max_seq_length={max_seq_length}")
    check_record_lengths(files[0], {FEATURE: max_seq_length})  # an unreadable or empty file: its own line
    count = integrity.check_records_readable(files)
    log(f"Input: {len(files)} file(s)" + (f", {count} blocks, all readable" if count is not None
        else "; too large to read through up front: file ends checked, records checked as read"))
    return files


def make_dataset_fn(files, max_seq_length, batch_size, is_training, seed, max_steps=None, log=None):
    """`dataset_fn(input_context, start_step=0)` over causal-LM blocks, with the
    conventions of every pretraining input (records.make_dataset_fn): per-pipeline file
    shards, seeded shuffle and repeat for training, `start_step` skipping the batches a
    resumed run already consumed, fixed-size batches."""
    return records.make_dataset_fn(
        files, feature_spec(max_seq_length), batch_size, is_training, seed=seed, max_steps=max_steps,
        log=log or logging.info,
    )
