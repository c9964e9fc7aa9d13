"""The original BERT pretraining TFRecords (create_pretraining_data.py's features)."""

import tensorflow as tf
from absl import logging

from realformer_tf.data import causal_lm, integrity, records
from realformer_tf.data.records import check_record_lengths, expand_input_files
from realformer_tf.errors import InputError


def feature_spec(max_seq_length, max_predictions_per_seq):
    seq = lambda n, dtype=tf.int64: tf.io.FixedLenFeature([n], dtype)  # noqa: E731
    return {
        "input_ids": seq(max_seq_length),
        "input_mask": seq(max_seq_length),
        "segment_ids": seq(max_seq_length),
        "masked_lm_positions": seq(max_predictions_per_seq),
        "masked_lm_ids": seq(max_predictions_per_seq),
        "masked_lm_weights": seq(max_predictions_per_seq, tf.float32),
        "next_sentence_labels": seq(1),
    }


def check_files(input_file, max_seq_length, max_predictions_per_seq, log=logging.info):
    """Expands --input_file and checks, up front, the first file's record layout and
    that the records are whole (see data.integrity); `log(message)` gets the one line
    that says what was found (the jobs pass their logger, which prints it)."""
    files = expand_input_files(input_file)
    _refuse_causal_records(files[0])
    check_record_lengths(files[0], {
        "input_ids": max_seq_length,
        "masked_lm_positions": max_predictions_per_seq,
        "next_sentence_labels": 1,
    })
    count = integrity.check_records_readable(files)
    log(f"Input: {len(files)} file(s)" + (f", {count} records, all readable" if count is not None
        else "; too large to read through up front: file ends checked, records checked as read"))
    return files


def _refuse_causal_records(path):
    """Causal-LM blocks hold `input_ids` alone: without this they would fail as "records
    lack the feature 'masked_lm_positions'", which does not say which data they are."""
    example = causal_lm.first_example(path)
    if example is not None and causal_lm.is_causal_example(example):
        raise InputError(f"{path}: records are causal-LM blocks (create_pretraining_data.py --objective=causal_lm), "
                         "not masked-LM examples; make masked-LM data with --objective=masked_lm (the default)")


def make_dataset_fn(files, max_seq_length, max_predictions_per_seq, global_batch_size,
                    is_training, max_steps=None, seed=None, log=logging.info):
    """`dataset_fn(input_context)` over pretraining TFRecords (see records.make_dataset_fn)."""
    return records.make_dataset_fn(
        files, feature_spec(max_seq_length, max_predictions_per_seq), global_batch_size,
        is_training, seed=seed, max_steps=max_steps, log=log,
    )
