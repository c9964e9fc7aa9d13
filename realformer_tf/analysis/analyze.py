"""Attention analysis of checkpoints (analyze_attention.py): loads each model, runs it
over held-out examples (pretraining records or raw text) and writes the statistics
(`realformer_tf.analysis.attention_stats`) and their plots
(`realformer_tf.analysis.attention_plots`).

    stats = analyze.analyze_checkpoints([ckpt_a, ckpt_b], ["BERT", "RealFormer"], None,
                                        lambda: analyze.records_dataset(path, 128, 32),
                                        num_examples=8192, output_dir="/tmp/analysis")
"""

import os
import time

import numpy as np
import tensorflow as tf

from realformer_tf.analysis.attention_plots import DPI, plot_entropy, plot_jsd
from realformer_tf.analysis.attention_stats import collect_statistics, summarize, write_summary


def find_config(checkpoint_prefix):
    """bert_config.json beside the checkpoint (or in its directory)."""
    return os.path.join(os.path.dirname(checkpoint_prefix), "bert_config.json")


def resolve(checkpoint):
    """A checkpoint prefix, or a directory: its latest training checkpoint, else the
    bert_model.ckpt in it (a downloaded BERT / RealFormer model directory)."""
    from realformer_tf.checkpoints import tf_checkpoint as ckpt

    if tf.io.gfile.isdir(checkpoint) and tf.train.latest_checkpoint(checkpoint) is None:
        exported = os.path.join(checkpoint, "bert_model.ckpt")
        if tf.io.gfile.exists(exported + ".index"):
            return exported
        raise ckpt.CheckpointError(f"{checkpoint} is a directory without a checkpoint (no "
                                   "'checkpoint' index and no bert_model.ckpt)")
    return ckpt.resolve_checkpoint(checkpoint)


def load_model(checkpoint, config_file=None):
    """Builds a BertModel from `config_file` (default: bert_config.json beside the
    checkpoint) and loads an original-named checkpoint or one of our training
    checkpoints (a prefix or a directory); a config that does not state the variant (a
    Google BERT release's) is decided from the weights, as the public loader does.
    Returns (model, resolved prefix)."""
    from realformer_tf.checkpoints import hf
    from realformer_tf.families.bert import load_bert_checkpoint
    from realformer_tf.models.bert.model import BertModel

    prefix = resolve(checkpoint)
    config_file = config_file or find_config(prefix)
    config = hf.load_bert_config(config_file)  # ours, or a Hugging Face folder's
    model = BertModel(config)
    load_bert_checkpoint(model, prefix)
    return model, prefix


def records_dataset(input_file, max_seq_length, batch_size):
    """Batches of {input_ids, input_mask, segment_ids} from pretraining (or any) TFRecords
    with those features, in file order, once."""
    from realformer_tf.data import records

    files = records.expand_input_files(input_file)
    records.check_record_lengths(files[0], {"input_ids": max_seq_length, "input_mask": max_seq_length})
    spec = {k: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    d = tf.data.TFRecordDataset(files)
    d = d.map(lambda r: records.decode_record(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
    return d.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def text_examples(text_file, vocab_file, max_seq_length, do_lower_case=True, max_examples=None):
    """Raw text, one sentence (or passage) per non-empty line -> numpy features:
    "[CLS] tokens [SEP]" (Model Garden's FullTokenizer, truncated to fit), padded with
    zeros to `max_seq_length`. Returns {input_ids, input_mask, segment_ids} [N, L]."""
    from official.nlp.tools import tokenization

    from realformer_tf.data.records import InputError
    from realformer_tf.data.vocab import check_vocab

    check_vocab(vocab_file)
    if not tf.io.gfile.exists(text_file):
        raise InputError(f"--text_file {text_file} does not exist")
    if max_seq_length < 3:
        raise InputError(f"max_seq_length must be at least 3, got {max_seq_length}")
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    rows = []
    with tf.io.gfile.GFile(text_file, "r") as f:
        for line in f:
            if max_examples is not None and len(rows) >= max_examples:
                break
            tokens = tokenizer.tokenize(tokenization.convert_to_unicode(line.strip()))
            if not tokens:
                continue
            tokens = ["[CLS]"] + tokens[:max_seq_length - 2] + ["[SEP]"]
            rows.append(tokenizer.convert_tokens_to_ids(tokens))
    if not rows:
        raise InputError(f"--text_file {text_file} holds no text")
    ids = np.zeros([len(rows), max_seq_length], np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def text_dataset(text_file, vocab_file, max_seq_length, batch_size, do_lower_case=True,
                 max_examples=None):
    examples = text_examples(text_file, vocab_file, max_seq_length, do_lower_case, max_examples)
    return tf.data.Dataset.from_tensor_slices(examples).batch(batch_size)


def analyze_checkpoints(checkpoints, labels, config_files, dataset_fn, num_examples, output_dir,
                        per_head_plots=True, log_fn=print):
    """Loads each checkpoint, collects its statistics over `dataset_fn()` and writes
    attention_summary.json, entropy.png and jsd.png (plus entropy_heads.png and
    jsd_heads.png with `per_head_plots`) to `output_dir`. Returns the statistics."""
    tf.io.gfile.makedirs(output_dir)
    config_files = list(config_files or [None] * len(checkpoints))
    all_stats = []
    for i, (checkpoint, label, config_file) in enumerate(zip(checkpoints, labels, config_files)):
        start = time.time()
        model, prefix = load_model(checkpoint, config_file)
        stats = collect_statistics(model, dataset_fn(), num_examples, label=label)
        all_stats.append(stats)
        log_fn(f"[{i + 1}/{len(checkpoints)}] {label}: {stats.description}; {prefix}; "
               f"{stats.num_examples} examples, {stats.num_tokens} tokens ({time.time() - start:.0f}s)")
    write_analysis(all_stats, [summarize(s) for s in all_stats], output_dir, per_head_plots, log_fn)
    return all_stats


def write_analysis(all_stats, summaries, output_dir, per_head_plots=True, log_fn=print, per_head_dpi=DPI):
    """Writes attention_summary.json (`summaries`, one per model) and the plots of
    `all_stats` (AttentionStatistics, one per model) to `output_dir`; the per-head plots
    at `per_head_dpi` (a panel per layer and model makes them large)."""
    tf.io.gfile.makedirs(output_dir)
    written = {
        "summary": write_summary(os.path.join(output_dir, "attention_summary.json"), summaries),
        "entropy": plot_entropy(all_stats, os.path.join(output_dir, "entropy.png")),
        "jsd": plot_jsd(all_stats, os.path.join(output_dir, "jsd.png")),
    }
    if per_head_plots:
        written["entropy_heads"] = plot_entropy(all_stats, os.path.join(output_dir, "entropy_heads.png"),
                                                per_head=True, dpi=per_head_dpi)
        written["jsd_heads"] = plot_jsd(all_stats, os.path.join(output_dir, "jsd_heads.png"), per_head=True,
                                        dpi=per_head_dpi)
    for path in written.values():
        log_fn(f"wrote {path}")
    return written
