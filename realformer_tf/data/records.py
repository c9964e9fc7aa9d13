"""TFRecord input helpers shared by every task: file globs, checked parsing, batching."""

import tensorflow as tf
from absl import logging

from realformer_tf.errors import InputError


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


def make_dataset_fn(files, spec, global_batch_size, is_training, seed=None, max_steps=None,
                    pad_to_full_batches=False, log=logging.info):
    """Returns `dataset_fn(input_context, start_step=0)` for
    `distribute_datasets_from_function`; `start_step` (training) is the global step a
    resumed run starts at.

    Training: each input pipeline reads its shard of the files, interleaved, repeated
    and shuffled, as the original input_fn did. Evaluation / prediction: files in order,
    once, capped at `max_steps` batches. Batches are fixed-size (drop_remainder) so TPUs
    compile once; `pad_to_full_batches` appends copies of the first record marked
    `is_real_example = 0` so that no real example is dropped (the original's
    PaddingInputExample). `log(message)` gets the one line a resumed run's pipeline
    says about where it starts (the jobs pass their logger, which prints it).
    """
    files = list(files)

    def dataset_fn(input_context=None, start_step=0):
        batch_size, pipelines, pipeline_id, replicas = global_batch_size, 1, 0, 1
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(global_batch_size)
            pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
            replicas = input_context.num_replicas_in_sync
        # Shard by file where there are enough files, else by record.
        shard_files = len(files) >= pipelines
        d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        if pipelines > 1 and shard_files:
            d = d.shard(pipelines, pipeline_id)
        if is_training:
            d = d.repeat().shuffle(len(files), seed=seed)
            d = d.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
        else:
            d = tf.data.TFRecordDataset(d)
        if pipelines > 1 and not shard_files:
            d = d.shard(pipelines, pipeline_id)
        if is_training:
            d = d.shuffle(100, seed=seed)
            d = _skip_consumed(d, start_step, seed, batch_size * (replicas // pipelines), log)
        d = d.map(lambda r: decode_record(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
        if pad_to_full_batches:
            d = _pad_to_multiple(d, global_batch_size)
        d = d.batch(batch_size, drop_remainder=True)
        if max_steps is not None and max_steps > 0:
            d = d.take(max_steps)
        return d.prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def _skip_consumed(records, start_step, seed, records_per_step, log):
    """Where a resumed run's data starts. `start_step` counts the batches already read
    (the global step times the gradient accumulation steps). With a seed the record
    order is a fixed function of it, so skipping what those batches consumed (reading
    the records, not decoding them) continues exactly where the interrupted run was;
    without one the order is random anyway and a fresh shuffle serves as well."""
    if not start_step:
        return records
    if seed is None:
        log(f"Input: resumed after {start_step} batches without --seed: reading a fresh shuffle")
        return records
    skipped = start_step * records_per_step
    log(f"Input: resumed after {start_step} batches: skipping the {skipped} records read before "
        "(the order is fixed by --seed)")
    return records.skip(skipped)


def _pad_to_multiple(dataset, multiple):
    count = dataset.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    padding = (-count) % multiple
    fake = dataset.take(1).map(lambda x: dict(x, is_real_example=tf.zeros_like(x["is_real_example"])))
    return dataset.concatenate(fake.repeat(padding))
