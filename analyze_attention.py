"""Attention entropy and adjacent-layer Jensen-Shannon divergence of pretrained
checkpoints, as in the RealFormer paper (§4.1.3, Figures 4-6), with violin plots.

  python analyze_attention.py \
    --checkpoints=/tmp/post/bert_model.ckpt,/tmp/realformer \
    --labels=Post-LN,RealFormer \
    --input_file=/tmp/eval.tfrecord --max_seq_length=128 \
    --num_examples=8192 --output_dir=/tmp/attention

Each checkpoint is an original-named checkpoint prefix, one of our training
checkpoints, or a directory (its latest checkpoint, else its bert_model.ckpt); its
bert_config.json is read from
beside it unless --bert_config_files lists one per checkpoint. Input: pretraining
TFRecords (--input_file), or raw text (--text_file, one sentence per line, with
--vocab_file) tokenized as "[CLS] sentence [SEP]" and padded to --max_seq_length.
Writes attention_summary.json (median, quartiles, mean per layer and head), entropy.png
and jsd.png (heads pooled; one violin per layer per checkpoint) and entropy_heads.png,
jsd_heads.png (one violin per head). Entropies are in nats, JSD in bits (base 2, [0, 1]).
"""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

import sys

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("checkpoints", None, "Comma-separated checkpoint prefixes or directories.", flag_values=fv)
    flags.DEFINE_string("labels", None, "Comma-separated legend labels, one per checkpoint "
                        "(default: each checkpoint's directory name).", flag_values=fv)
    flags.DEFINE_string("bert_config_files", None, "Comma-separated bert_config.json files, one per "
                        "checkpoint (default: bert_config.json beside each checkpoint).", flag_values=fv)
    flags.DEFINE_string("input_file", None, "Pretraining TFRecords (a file, glob or comma-separated list).", flag_values=fv)
    flags.DEFINE_string("text_file", None, "Raw text instead of --input_file: one sentence per line.", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab for --text_file.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case --text_file (uncased models).", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records / padded text.", flag_values=fv)
    flags.DEFINE_integer("num_examples", 1024, "Held-out examples per checkpoint (the paper used 8192).", flag_values=fv)
    flags.DEFINE_integer("batch_size", 32, "Examples per forward pass.", flag_values=fv)
    flags.DEFINE_bool("per_head_plots", True, "Also write entropy_heads.png and jsd_heads.png.", flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Where the summary and plots are written.", flag_values=fv)


def _split(value):
    return [v.strip() for v in (value or "").split(",") if v.strip()]


def _default_label(checkpoint):
    """The directory name: run_dir for run_dir/ and run_dir/bert_model.ckpt alike."""
    import tensorflow as tf

    path = checkpoint.rstrip("/")
    if not tf.io.gfile.isdir(path):
        path = os.path.dirname(path) or path
    return os.path.basename(path) or checkpoint


def run(FLAGS):  # noqa: N803
    """The analysis from the parsed flags."""
    from realformer_tf.analysis import analyze

    checkpoints = _split(FLAGS.checkpoints)
    cli.require(checkpoints, "--checkpoints is required (comma-separated prefixes or directories)")
    cli.require(FLAGS.output_dir, "--output_dir is required")
    labels = _split(FLAGS.labels) or [_default_label(c) for c in checkpoints]
    cli.require(len(labels) == len(checkpoints),
                f"--labels has {len(labels)} entries for {len(checkpoints)} checkpoints")
    configs = _split(FLAGS.bert_config_files) or None
    cli.require(configs is None or len(configs) == len(checkpoints),
                f"--bert_config_files has {len(configs or [])} entries for {len(checkpoints)} checkpoints")
    cli.require(bool(FLAGS.input_file) != bool(FLAGS.text_file),
                "give exactly one of --input_file (TFRecords) or --text_file (raw text, with --vocab_file)")
    cli.require(FLAGS.num_examples > 0, "--num_examples must be positive")
    cli.require(FLAGS.batch_size > 0, "--batch_size must be positive")

    if FLAGS.input_file:
        def dataset_fn():
            return analyze.records_dataset(FLAGS.input_file, FLAGS.max_seq_length, FLAGS.batch_size)
        dataset_fn()  # check the files before loading any model
    else:
        cli.require(FLAGS.vocab_file, "--text_file needs --vocab_file")
        examples = analyze.text_examples(FLAGS.text_file, FLAGS.vocab_file, FLAGS.max_seq_length,
                                         FLAGS.do_lower_case, max_examples=FLAGS.num_examples)

        def dataset_fn():
            import tensorflow as tf

            return tf.data.Dataset.from_tensor_slices(examples).batch(FLAGS.batch_size)

    # Fail on a missing checkpoint or config before spending time on the others.
    from realformer_tf.checkpoints import hf

    for i, checkpoint in enumerate(checkpoints):
        prefix = analyze.resolve(checkpoint)
        hf.load_bert_config(configs[i] if configs else analyze.find_config(prefix))

    print(f"Attention analysis of {len(checkpoints)} checkpoint(s) over up to "
          f"{FLAGS.num_examples} examples", flush=True)
    analyze.analyze_checkpoints(checkpoints, labels, configs, dataset_fn, FLAGS.num_examples,
                                FLAGS.output_dir, per_head_plots=FLAGS.per_head_plots)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status."""
    return app.run_program(argv, __doc__, define_flags, run, required_flags=["checkpoints", "output_dir"])


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.exit(main(sys.argv))
