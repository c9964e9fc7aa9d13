"""The original BERT pretraining TFRecords (create_pretraining_data.py's features)."""

import tensorflow as tf

from realformer_tf.data.records import check_record_lengths, decode_record, expand_input_files


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


def check_files(input_file, max_seq_length, max_predictions_per_seq):
    """Expands --input_file and checks the first file's record layout up front."""
    files = expand_input_files(input_file)
    check_record_lengths(files[0], {
        "input_ids": max_seq_length,
        "masked_lm_positions": max_predictions_per_seq,
        "next_sentence_labels": 1,
    })
    return files


def make_dataset_fn(files, max_seq_length, max_predictions_per_seq, global_batch_size,
                    is_training, max_steps=None, seed=None):
    """Returns `dataset_fn(input_context)` for `distribute_datasets_from_function`.

    Training: each input pipeline reads its shard of the files, interleaved, repeated
    and shuffled, as the original input_fn did. Evaluation: files in order, once,
    capped at `max_steps` batches. Batches are fixed-size (drop_remainder) so TPUs
    compile once.
    """
    spec = feature_spec(max_seq_length, max_predictions_per_seq)

    def dataset_fn(input_context=None):
        batch_size, pipelines, pipeline_id = global_batch_size, 1, 0
        if input_context is not None:
            batch_size = input_context.get_per_replica_batch_size(global_batch_size)
            pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        # Shard by file where there are enough files, else by record.
        shard_files = len(files) >= pipelines
        d = tf.data.Dataset.from_tensor_slices(tf.constant(files))
        if pipelines > 1 and shard_files:
            d = d.shard(pipelines, pipeline_id)
        if is_training:
            d = d.repeat().shuffle(len(files), seed=seed)
            d = d.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=seed is not None)
            d = d.shuffle(100, seed=seed)
        else:
            d = tf.data.TFRecordDataset(d)
        if pipelines > 1 and not shard_files:
            d = d.shard(pipelines, pipeline_id)
        d = d.map(lambda r: decode_record(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
        d = d.batch(batch_size, drop_remainder=True)
        if max_steps is not None and max_steps > 0:
            d = d.take(max_steps)
        return d.prefetch(tf.data.AUTOTUNE)

    return dataset_fn
