"""TFRecord input helpers shared by every task: file globs, checked parsing, batching."""

import tensorflow as tf


class InputError(ValueError):
    """Input files that cannot be read as the job expects."""


def expand_input_files(patterns, flag_name="input_file"):
    """Comma-separated globs (the original --input_file syntax) -> sorted file list."""
    files = []
    for pattern in [p.strip() for p in str(patterns).split(",") if p.strip()]:
        matched = tf.io.gfile.glob(pattern)
        if not matched:
            raise InputError(f"--{flag_name}: no file matches {pattern!r}")
        files.extend(sorted(matched))
    if not files:
        raise InputError(f"--{flag_name} is empty; give a file, a glob or a comma-separated list")
    return files


def check_record_lengths(path, int_features):
    """Reads the first record of `path` and checks each fixed-length feature's length,
    so TFRecords built for another max_seq_length fail before training starts."""
    try:
        first = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    except tf.errors.DataLossError as e:
        raise InputError(f"{path} is not a readable TFRecord file ({e.message.splitlines()[0]})") from None
    if first is None:
        raise InputError(f"{path} holds no records")
    example = tf.train.Example.FromString(first.numpy())
    for name, length in int_features.items():
        feature = example.features.feature.get(name)
        if feature is None:
            raise InputError(f"{path}: records lack the feature {name!r}; was it written by "
                             "create_pretraining_data.py (or the matching data script)?")
        found = len(feature.int64_list.value) or len(feature.float_list.value)
        if found != length:
            raise InputError(
                f"{path}: feature {name!r} has length {found} but the flags expect {length}; "
                "regenerate the data or set --max_seq_length / --max_predictions_per_seq to match"
            )


def decode_record(record, name_to_features):
    """tf.Example -> dict of int32/float32 tensors (TPUs want int32)."""
    example = tf.io.parse_single_example(record, name_to_features)
    return {
        name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t for name, t in example.items()
    }
