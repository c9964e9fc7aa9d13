"""A small-scale reproduction of the RealFormer paper: pretrain Post-LN, Pre-LN,
RealFormer, RealFormer with running mean, NormFormer and RealFormer+NormFormer on the
same data with the same seed and budget, evaluate masked-LM accuracy/loss on held-out
records, repeat at a high learning rate (the paper's Table 6 stability probe: a NaN
loss is reported as "diverged"), plot the learning curves and run the attention
analysis (Figures 4-6) over the trained checkpoints.

  # on existing pretraining TFRecords (train + held-out)
  python experiments/reproduce.py --budget=small --output_dir=/tmp/reproduce \
    --train_input_file=/tmp/real/train.tfrecord --eval_input_file=/tmp/real/eval.tfrecord \
    --vocab_file=$BERT_BASE_DIR/vocab.txt

  # from raw text (one sentence per line, blank lines between documents, e.g. made by
  # experiments/prepare_corpus.py); every 10th document is held out for evaluation
  python experiments/reproduce.py --budget=small --output_dir=/tmp/reproduce \
    --text_file=corpus_sentences.txt --vocab_file=vocab.txt

Outputs in --output_dir: results.md (a row per run: variant, lr, MLM acc, MLM loss, NSP
acc, steps, time; the stability probe; attention medians), results.json,
learning_curves.png, entropy.png, jsd.png, entropy_heads.png, jsd_heads.png,
attention_summary.json, and one run_pretraining.py output_dir per run
(<variant>_lr<lr>/: checkpoints, bert_model.ckpt, eval_results.txt, summaries/, the
run's log reproduce.log). Rerunning the same command reuses finished runs and resumes
interrupted ones from their checkpoints.

Budgets (--budget; single flags such as --num_train_steps override a preset's value):
  toy    tiny model (2 layers, hidden 32), 5 steps, batch 8, sequence length 32: seconds
         of compute per run (plus process start-up), for the tests.
  small  4 layers, hidden 256, 4 heads, intermediate 1024 (3.2M encoder parameters plus
         the 30522 x 256 embeddings), sequence length 128, batch 16, 180 steps (18 warmup),
         lr 5e-4 and 2e-3, evaluation on 8 x 32 held-out examples, attention analysis on
         256. Sized for all 12 runs in about 40 minutes on 2 CPU cores:
           measured (TF 2.20 CPU, 2 cores shared with other jobs, load average ~5):
           1.3-2.0 s/step wall and 1.2 CPU-seconds/step at batch 16 in steady state;
           45-55 s wall (~20-25 CPU-seconds) per run of process start-up, graph
           tracing and held-out evaluation;
           extrapolated to 2 idle cores: ~0.75 s/step (1.0 at worst) and ~25 s of
           overhead, so a run is 25 + 180 x 0.75 ~= 160 s, 12 runs ~= 32 min (41 at
           1.0 s/step), plus ~1-2 min of attention analysis and plots.
         On a machine shared like the measurement's, expect about twice that (~75 min).
         It shows early-training trends only (masked-LM accuracy of a few percent above
         the unigram baseline); use --num_train_steps for more.
Evaluation runs in this process with the library's pretraining task and training loop
(run_pretraining.py's --do_eval would read the training --input_file), over exactly the
available number of held-out batches.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import dataclasses  # noqa: E402

from absl import app, flags  # noqa: E402

from realformer_tf import cli  # noqa: E402

flags.DEFINE_string("output_dir", None, "Where every run, the report and the plots go.")
flags.DEFINE_enum("budget", "small", ["toy", "small"], "Preset of model size, steps and batch sizes.")
flags.DEFINE_string("variants", "all", "Comma-separated subset of post, pre, realformer, "
                    "realformer_mean, normformer, realformer_normformer (or 'all').")
flags.DEFINE_string("probe_variants", "all", "Variants also trained at --high_learning_rate "
                    "(comma-separated subset of --variants, or 'all').")
flags.DEFINE_string("train_input_file", None, "Pretraining TFRecords to train on.")
flags.DEFINE_string("eval_input_file", None, "Held-out pretraining TFRecords to evaluate on.")
flags.DEFINE_string("text_file", None, "Raw text instead of TFRecords (create_pretraining_data.py's "
                    "format); the records are built into output_dir/data.")
flags.DEFINE_string("eval_text_file", None, "Held-out raw text (default: every "
                    "--eval_every_n_documents-th document of --text_file).")
flags.DEFINE_integer("eval_every_n_documents", 10, "Hold out every n-th document of --text_file.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab: needed with --text_file; with TFRecords it "
                    "sets vocab_size (else --vocab_size).")
flags.DEFINE_bool("do_lower_case", True, "For --text_file.")
flags.DEFINE_integer("dupe_factor", 5, "create_pretraining_data.py's dupe_factor for the training text.")
flags.DEFINE_integer("vocab_size", 30522, "Model vocab size when no --vocab_file is given.")
flags.DEFINE_integer("seed", 1, "The same seed for every run (weights, dropout, data order).")
flags.DEFINE_bool("analysis", True, "Run the attention analysis over the trained checkpoints.")
# Overrides of the budget preset (None: the preset's value).
flags.DEFINE_enum("model", None, ["tiny", "mini", "small"], "Model size preset.")
flags.DEFINE_integer("num_train_steps", None, "Training steps per run.")
flags.DEFINE_integer("train_batch_size", None, "Training batch size.")
flags.DEFINE_integer("num_warmup_steps", None, "Linear warmup steps.")
flags.DEFINE_float("learning_rate", None, "The base learning rate.")
flags.DEFINE_float("high_learning_rate", None, "The stability probe's learning rate (0: no probe).")
flags.DEFINE_integer("eval_batch_size", None, "Evaluation batch size.")
flags.DEFINE_integer("max_eval_steps", None, "Evaluation batches.")
flags.DEFINE_integer("iterations_per_loop", None, "Steps per compiled loop (= learning-curve interval).")
flags.DEFINE_integer("save_checkpoints_steps", None, "Checkpoint interval (what a resume loses at most).")
flags.DEFINE_integer("analysis_examples", None, "Held-out examples for the attention analysis.")
flags.DEFINE_integer("max_seq_length", None, "Must match the records.")
flags.DEFINE_integer("max_predictions_per_seq", None, "Must match the records.")
FLAGS = flags.FLAGS


def _budget():
    from realformer_tf import experiments

    budget = experiments.BUDGETS[FLAGS.budget]
    overrides = {f.name: FLAGS[f.name].value for f in dataclasses.fields(budget)
                 if f.name in FLAGS and FLAGS[f.name].value is not None}
    return dataclasses.replace(budget, **overrides)


def _prepare_records(budget, output_dir):
    """TFRecords from --text_file (and --eval_text_file) with create_pretraining_data.py;
    reuses records an earlier run built."""
    import tensorflow as tf

    from realformer_tf import experiments
    from realformer_tf.data.records import InputError

    cli.require(FLAGS.vocab_file, "--text_file needs --vocab_file")
    if not tf.io.gfile.exists(FLAGS.text_file):
        raise InputError(f"--text_file {FLAGS.text_file} does not exist")
    data_dir = os.path.join(output_dir, "data")
    tf.io.gfile.makedirs(data_dir)
    texts = {"train": FLAGS.text_file, "eval": FLAGS.eval_text_file}
    if not FLAGS.eval_text_file:
        cli.require(FLAGS.eval_every_n_documents >= 2, "--eval_every_n_documents must be at least 2")
        with tf.io.gfile.GFile(FLAGS.text_file) as f:
            try:
                train, held_out = experiments.split_documents(f.read(), FLAGS.eval_every_n_documents)
            except ValueError as e:
                raise InputError(f"--text_file {FLAGS.text_file}: {e}") from None
        for name, text in (("train", train), ("eval", held_out)):
            texts[name] = os.path.join(data_dir, f"{name}.txt")
            with tf.io.gfile.GFile(texts[name], "w") as f:
                f.write(text)
    elif not tf.io.gfile.exists(FLAGS.eval_text_file):
        raise InputError(f"--eval_text_file {FLAGS.eval_text_file} does not exist")
    records = {}
    for name, text in texts.items():
        records[name] = os.path.join(
            data_dir, f"{name}_seq{budget.max_seq_length}_pred{budget.max_predictions_per_seq}.tfrecord")
        if tf.io.gfile.exists(records[name]):
            print(f"Reusing {records[name]}", flush=True)
            continue
        print(f"Creating {records[name]} from {text}", flush=True)
        status, tail = run_script_logged(
            "create_pretraining_data.py", dict(
                input_file=text, output_file=records[name], vocab_file=FLAGS.vocab_file,
                do_lower_case=FLAGS.do_lower_case, max_seq_length=budget.max_seq_length,
                max_predictions_per_seq=budget.max_predictions_per_seq, masked_lm_prob=0.15,
                random_seed=12345, dupe_factor=FLAGS.dupe_factor if name == "train" else 1),
            os.path.join(data_dir, "create_pretraining_data.log"))
        if status != 0:
            raise InputError(f"create_pretraining_data.py failed on {text}: {tail[-1] if tail else ''}")
    return records["train"], records["eval"]


def run_script_logged(script, flag_values, log_path):
    """Runs one of the repository's scripts, its output appended to log_path and echoed.
    A subprocess, unlike the pretraining runs: Model Garden's create_pretraining_data
    module defines global absl flags when imported, which clash with this script's.
    Returns (exit status, the last lines)."""
    import subprocess

    command = [sys.executable, os.path.join(ROOT, script), *[f"--{k}={v}" for k, v in flag_values.items()]]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    tail = []
    with open(log_path, "a", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env, cwd=ROOT, bufsize=1)
        for line in proc.stdout:
            log.write(line)
            print(line, end="", flush=True)
            tail = (tail + [line.rstrip("\n")])[-40:]
    return proc.wait(), tail


def main(argv):
    del argv
    import tensorflow as tf

    from realformer_tf import experiments

    cli.require(FLAGS.output_dir, "--output_dir is required")
    try:
        variants = experiments.parse_variants(FLAGS.variants)
    except ValueError as e:
        raise cli.UsageError(f"--variants: {e}") from None
    try:
        probe = variants if FLAGS.probe_variants == "all" else experiments.parse_variants(FLAGS.probe_variants)
    except ValueError as e:
        raise cli.UsageError(f"--probe_variants: {e}") from None
    cli.require(set(probe) <= set(variants), "--probe_variants must be a subset of --variants")
    budget = _budget()
    cli.require(budget.model in experiments.MODEL_PRESETS, f"unknown model preset {budget.model}")
    cli.require(budget.num_train_steps > 0, "--num_train_steps must be positive")
    output_dir = os.path.abspath(FLAGS.output_dir) if "://" not in FLAGS.output_dir else FLAGS.output_dir
    tf.io.gfile.makedirs(output_dir)

    records_given = bool(FLAGS.train_input_file or FLAGS.eval_input_file)
    cli.require(records_given != bool(FLAGS.text_file),
                "give either --train_input_file and --eval_input_file (TFRecords) or --text_file "
                "(raw text, with --vocab_file)")
    if records_given:
        cli.require(FLAGS.train_input_file and FLAGS.eval_input_file,
                    "give both --train_input_file and --eval_input_file")
        from realformer_tf.data import pretraining

        for flag in ("train_input_file", "eval_input_file"):
            try:
                pretraining.check_files(FLAGS[flag].value, budget.max_seq_length,
                                        budget.max_predictions_per_seq)
            except cli.InputError as e:
                raise cli.InputError(str(e).replace("--input_file", f"--{flag}")) from None
        train_file, eval_file = FLAGS.train_input_file, FLAGS.eval_input_file
        data_note = ""
    else:
        train_file, eval_file = _prepare_records(budget, output_dir)
        data_note = (f"Built from `{FLAGS.text_file}`" + (f" and `{FLAGS.eval_text_file}`" if FLAGS.eval_text_file
                     else f" (every {FLAGS.eval_every_n_documents}th document held out)") + ".")
    vocab_size = experiments.count_vocab(FLAGS.vocab_file) if FLAGS.vocab_file else FLAGS.vocab_size

    lrs = [budget.learning_rate] + ([budget.high_learning_rate] if budget.high_learning_rate else [])
    repro = experiments.Reproduction(output_dir, variants, lrs, budget, train_file, eval_file,
                                     vocab_size, seed=FLAGS.seed, probe_variants=probe)
    plan = repro.plan()
    print(f"Reproduction: {len(variants)} variant(s) at lr {experiments.format_lr(lrs[0])}"
          + (f", {len(probe)} at lr {experiments.format_lr(lrs[1])}" if len(lrs) > 1 else "")
          + f" = {len(plan)} runs, "
          f"budget {FLAGS.budget} ({budget.model} model, {budget.num_train_steps} steps of batch "
          f"{budget.train_batch_size}, seq {budget.max_seq_length}); output {output_dir}", flush=True)
    started = time.time()
    results = repro.run_all()

    curves = repro.learning_curves(results, os.path.join(output_dir, "learning_curves.png"))
    stats = repro.analyze(results, output_dir) if FLAGS.analysis else []
    report = repro.write_report(results, os.path.join(output_dir, "results.md"), curves, stats,
                                FLAGS.budget, data_note)
    with tf.io.gfile.GFile(os.path.join(output_dir, "results.json"), "w") as f:
        json.dump({"budget": FLAGS.budget, "settings": dataclasses.asdict(budget), "vocab_size": vocab_size,
                   "train_file": train_file, "eval_file": eval_file,
                   "runs": [dict(dataclasses.asdict(r), name=r.name) for r in results]}, f, indent=2)
    print(f"\nDone in {experiments.format_seconds(time.time() - started)}. Report: {report}", flush=True)
    with tf.io.gfile.GFile(report) as f:
        print(f.read())
    failed = [r.name for r in results if r.status == "failed"]
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(failed)}; rerun to retry them", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    flags.mark_flag_as_required("output_dir")
    app.run(cli.run(main))
