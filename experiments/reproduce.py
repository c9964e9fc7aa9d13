"""Pretrains the papers' variants over a grid of depths and seeds plus a learning-rate
sweep, evaluates each run on held-out records and writes a report with a verdict per
claim: Post-LN, Pre-LN, RealFormer, RealFormer with running mean, NormFormer and
RealFormer + NormFormer on the same data (the RealFormer paper's Table 2, Table 6 and
Figures 4-6; NormFormer's loss and learning-rate claims). experiments/README.md has the
seeded study's commands and numbers.

  # the seeded study, from raw text (a sentence per line, blank lines between documents,
  # e.g. made by experiments/prepare_corpus.py); every 10th document is held out
  python experiments/reproduce.py --budget=study --output_dir=/tmp/study \
    --text_file=corpus_sentences.txt --vocab_file=vocab.txt

  # on existing pretraining TFRecords (train + held-out)
  python experiments/reproduce.py --budget=small --output_dir=/tmp/reproduce \
    --train_input_file=/tmp/real/train.tfrecord --eval_input_file=/tmp/real/eval.tfrecord \
    --vocab_file=$BERT_BASE_DIR/vocab.txt

  # the report of the runs finished so far, while a study runs in parts
  python experiments/reproduce.py --budget=study --output_dir=/tmp/study ... --report_only

  # the report of an archive alone (the repository's study: experiments/results/), labelled
  # with the data its runs were trained on (ARCHIVE/study_data.json)
  python experiments/reproduce.py --budget=study --output_dir=/tmp/report \
    --archive_dir=experiments/results/study_runs.tar.xz --report_only

  # one run again from its seed (names as in results.md), into a fresh folder
  python experiments/reproduce.py --budget=study --output_dir=/tmp/check ... \
    --only=realformer_L12_lr0.003_s2_n6000

Outputs in --output_dir: results.md (mean +- std over seeds per variant and depth, the
sweep, attention statistics, a verdict per claim, every run), claims.json, results.json,
depth.png, sweep.png, learning_curves.png, entropy.png, jsd.png (+ per-head plots),
attention_summary.json, study.json (the grid, read by the workers), and one
run_pretraining.py output_dir per run (<variant>_L<layers>_lr<lr>_s<seed>_n<steps>/:
checkpoints, bert_model.ckpt, eval_results.txt, summaries/, the run's log
reproduce.log; analyzed runs also attention_summary.json, and those of the first seed,
which the attention plots show, attention_points.npz). The runs are shared by --workers
processes; rerunning the same command reuses finished runs and resumes interrupted ones
from their checkpoints. With --archive_dir, each finished run's small files are also
kept there and restored from there, so a study continues on another machine. An archive
named NAME.tar.xz is one file (the repository's study keeps its runs in
experiments/results/study_runs.tar.xz): it is unpacked into OUTPUT_DIR/archive/, which
serves as the archive, and packed again at the end (the file is rewritten only when its
runs changed). The archive also keeps the study's data (vocab size, held-out baselines,
input names: study_data.json); other data given with it is refused in one line. Reports
never name an absolute path.

Budgets (--budget; single flags such as --num_train_steps or --seeds override a
preset's value; experiments/study/grid.py BUDGETS has them all):
  toy    tiny model (2 layers, hidden 32), 5 steps, batch 8, sequence length 32: seconds
         of compute per run (plus process start-up), for the tests.
  small  4 layers, hidden 256, 4 heads, intermediate 1024, sequence length 128, batch 16,
         180 steps (18 warmup), lr 5e-4 and 2e-3, one seed: about 40 minutes on 2 cores;
         the very start of training only.
  study  hidden 64, 4 heads, intermediate 256, 4 and 12 layers, dropout 0, sequence
         length 64, batch 32, 6,000 steps at lr 3e-3, seeds 1-3; sweep: 4 layers, 3,000
         steps at lr 1e-3, 3e-3, 1e-2, 3e-2, seeds 1-2. 84 runs, about 5 hours on 2
         idle cores with 2 workers.
Evaluation runs in this process with the library's pretraining task and training loop
(run_pretraining.py's --do_eval would read the training --input_file), over exactly the
available number of held-out batches.
"""

import functools
import json
import os
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import dataclasses  # noqa: E402

from absl import flags  # noqa: E402

from realformer_tf import app  # noqa: E402
from realformer_tf.jobs import cli  # noqa: E402

def define_flags(fv):
    """The study's flags on the FlagValues `fv`."""
    flags.DEFINE_string("output_dir", None, "Where every run, the report and the plots go.", flag_values=fv)
    flags.DEFINE_enum("budget", "small", ["toy", "small", "study"], "Preset of the grid: model size, depths, "
                      "seeds, steps, batch sizes, learning rates.", flag_values=fv)
    flags.DEFINE_string("variants", "all", "Comma-separated variant names (realformer_tf.models.variants): "
                        "bert, pre_ln, realformer, realformer_mean, normformer, realformer_normformer "
                        "('all': these six).", flag_values=fv)
    flags.DEFINE_string("probe_variants", "all", "Variants also trained in the learning-rate sweep "
                        "(comma-separated subset of --variants, or 'all').", flag_values=fv)
    flags.DEFINE_string("train_input_file", None, "Pretraining TFRecords to train on.", flag_values=fv)
    flags.DEFINE_string("eval_input_file", None, "Held-out pretraining TFRecords to evaluate on.", flag_values=fv)
    flags.DEFINE_string("text_file", None, "Raw text instead of TFRecords (create_pretraining_data.py's "
                        "format); the records are built into output_dir/data.", flag_values=fv)
    flags.DEFINE_string("eval_text_file", None, "Held-out raw text (default: every "
                        "--eval_every_n_documents-th document of --text_file).", flag_values=fv)
    flags.DEFINE_integer("eval_every_n_documents", 10, "Hold out every n-th document of --text_file.", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab: needed with --text_file; with TFRecords it "
                        "sets vocab_size (else --vocab_size).", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "For --text_file.", flag_values=fv)
    flags.DEFINE_integer("dupe_factor", 5, "create_pretraining_data.py's dupe_factor for the training text.", flag_values=fv)
    flags.DEFINE_integer("vocab_size", 30522, "Model vocab size when no --vocab_file is given.", flag_values=fv)
    flags.DEFINE_bool("analysis", True, "Run the attention analysis over the trained checkpoints.", flag_values=fv)
    flags.DEFINE_string("archive_dir", None, "Also keep each finished run's small files (results, timing, "
                        "learning curves, attention statistics; no checkpoints) in ARCHIVE_DIR/<run name>/, "
                        "and restore the runs kept there into --output_dir first: the study continues "
                        "on another machine, or after --output_dir is lost, without training them again. "
                        "A NAME.tar.xz file is an archive packed in one file: unpacked into "
                        "OUTPUT_DIR/archive/ first, and packed again at the end.", flag_values=fv)
    flags.DEFINE_integer("workers", 2, "Runs trained at once, each in its own process (one per CPU core "
                         "is fastest for small models).", flag_values=fv)
    flags.DEFINE_integer("threads_per_worker", 1, "TensorFlow threads per worker. A run's numbers are "
                         "reproducible for a fixed thread count; rerun a single run with the same value.", flag_values=fv)
    flags.DEFINE_list("only", None, "Train only these runs (names as in results.md, e.g. "
                      "bert_L4_lr0.003_s1_n6000), to reproduce them; writes no report.", flag_values=fv)
    flags.DEFINE_bool("report_only", False, "Train nothing: write the report from the runs finished so far "
                      "(the others listed as not finished), e.g. while a long study runs in parts. With "
                      "--archive_dir the data flags may be left out: the archive's study_data.json labels "
                      "the report.", flag_values=fv)
    flags.DEFINE_string("worker", None, "Internal: 'k/n', this process is worker k of n.", flag_values=fv)
    # Overrides of the budget preset (None: the preset's value).
    flags.DEFINE_enum("model", None, ["tiny", "narrow", "mini", "small"], "Model size preset.", flag_values=fv)
    flags.DEFINE_integer("num_train_steps", None, "Training steps per run.", flag_values=fv)
    flags.DEFINE_integer("train_batch_size", None, "Training batch size.", flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", None, "Linear warmup steps.", flag_values=fv)
    flags.DEFINE_float("learning_rate", None, "The base learning rate.", flag_values=fv)
    flags.DEFINE_list("sweep_learning_rates", None, "The sweep's learning rates besides the base one "
                      "(empty: no sweep).", flag_values=fv)
    flags.DEFINE_integer("sweep_train_steps", None, "Training steps of a sweep run (0: --num_train_steps).", flag_values=fv)
    flags.DEFINE_integer("sweep_warmup_steps", None, "Warmup steps of a sweep run (0: --num_warmup_steps).", flag_values=fv)
    flags.DEFINE_list("depths", None, "Layer counts to train every variant at (empty: the model preset's).", flag_values=fv)
    flags.DEFINE_list("seeds", None, "Seeds (weights, dropout, data order); every run is repeated per seed.", flag_values=fv)
    flags.DEFINE_list("sweep_seeds", None, "Seeds of the sweep (empty: --seeds).", flag_values=fv)
    flags.DEFINE_float("dropout", None, "Hidden and attention dropout of every model.", flag_values=fv)
    flags.DEFINE_integer("eval_batch_size", None, "Evaluation batch size.", flag_values=fv)
    flags.DEFINE_integer("max_eval_steps", None, "Evaluation batches (0: all held-out records).", flag_values=fv)
    flags.DEFINE_integer("iterations_per_loop", None, "Steps per compiled loop (= learning-curve interval).", flag_values=fv)
    flags.DEFINE_integer("save_checkpoints_steps", None, "Checkpoint interval (what a resume loses at most).", flag_values=fv)
    flags.DEFINE_integer("analysis_examples", None, "Held-out examples for the attention analysis.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", None, "Must match the records.", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", None, "Must match the records.", flag_values=fv)


LIST_TYPES = {"sweep_learning_rates": float, "depths": int, "seeds": int, "sweep_seeds": int}


def _budget(fv):
    from experiments.study import grid

    budget = grid.BUDGETS[fv.budget]
    overrides = {}
    for field in dataclasses.fields(budget):
        value = fv[field.name].value if field.name in fv else None
        if value is None:
            continue
        if field.name in LIST_TYPES:
            try:
                value = tuple(LIST_TYPES[field.name](v) for v in value)
            except ValueError:
                raise cli.UsageError(f"--{field.name}={','.join(value)}: expected a comma-separated list "
                                     f"of {LIST_TYPES[field.name].__name__}s") from None
        overrides[field.name] = value
    return dataclasses.replace(budget, **overrides)


def _prepare_records(fv, budget, output_dir):
    """TFRecords from --text_file (and --eval_text_file) with create_pretraining_data.py;
    reuses records an earlier run built."""
    import tensorflow as tf

    from experiments.study import study_files
    from realformer_tf.data.records import InputError

    cli.require(fv.vocab_file, "--text_file needs --vocab_file")
    if not tf.io.gfile.exists(fv.text_file):
        raise InputError(f"--text_file {fv.text_file} does not exist")
    data_dir = os.path.join(output_dir, "data")
    tf.io.gfile.makedirs(data_dir)
    texts = {"train": fv.text_file, "eval": fv.eval_text_file}
    if not fv.eval_text_file:
        cli.require(fv.eval_every_n_documents >= 2, "--eval_every_n_documents must be at least 2")
        with tf.io.gfile.GFile(fv.text_file) as f:
            try:
                train, held_out = study_files.split_documents(f.read(), fv.eval_every_n_documents)
            except ValueError as e:
                raise InputError(f"--text_file {fv.text_file}: {e}") from None
        for name, text in (("train", train), ("eval", held_out)):
            texts[name] = os.path.join(data_dir, f"{name}.txt")
            with tf.io.gfile.GFile(texts[name], "w") as f:
                f.write(text)
    elif not tf.io.gfile.exists(fv.eval_text_file):
        raise InputError(f"--eval_text_file {fv.eval_text_file} does not exist")
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
                input_file=text, output_file=records[name], vocab_file=fv.vocab_file,
                do_lower_case=fv.do_lower_case, max_seq_length=budget.max_seq_length,
                max_predictions_per_seq=budget.max_predictions_per_seq, masked_lm_prob=0.15,
                random_seed=12345, dupe_factor=fv.dupe_factor if name == "train" else 1),
            os.path.join(data_dir, "create_pretraining_data.log"))
        if status != 0:
            raise InputError(f"create_pretraining_data.py failed on {text}: {tail[-1] if tail else ''}")
    return records["train"], records["eval"]


def run_script_logged(script, flag_values, log_path):
    """Runs one of the repository's scripts, its output appended to log_path and echoed.
    A subprocess, so that all its output, TensorFlow's C++ lines included, reaches the
    log. Returns (exit status, the last lines)."""
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


def _check_inputs(fv, budget, output_dir):
    """(train_file, eval_file, data_note): the records given, or built from --text_file;
    (None, None, "") for a report of the archive alone (--report_only without data)."""
    records_given = bool(fv.train_input_file or fv.eval_input_file)
    if not records_given and not fv.text_file and fv.report_only and fv.archive_dir:
        return None, None, ""  # the archive's own data labels the report (_study_data)
    cli.require(records_given != bool(fv.text_file),
                "give either --train_input_file and --eval_input_file (TFRecords) or --text_file "
                "(raw text, with --vocab_file); with --report_only, an --archive_dir alone reports its runs")
    if not records_given:
        train_file, eval_file = _prepare_records(fv, budget, output_dir)
        return train_file, eval_file, (
            f"Built from `{_input_name(fv.text_file, output_dir)}`"
            + (f" and `{_input_name(fv.eval_text_file, output_dir)}`" if fv.eval_text_file
               else f" (every {fv.eval_every_n_documents}th document held out)") + ".")
    cli.require(fv.train_input_file and fv.eval_input_file, "give both --train_input_file and --eval_input_file")
    from realformer_tf.data import pretraining
    from realformer_tf.data.records import InputError

    for flag in ("train_input_file", "eval_input_file"):
        try:
            pretraining.check_files(fv[flag].value, budget.max_seq_length, budget.max_predictions_per_seq)
        except InputError as e:
            raise InputError(str(e).replace("--input_file", f"--{flag}")) from None
    return fv.train_input_file, fv.eval_input_file, ""


def _input_name(path, output_dir):
    """How the report names an input: inside the study's --output_dir as
    `<output_dir>/...`, inside the repository relative to it, else by its file name. Never
    an absolute path: a report is read on other machines, whose paths these are not."""
    if "://" in path:
        return path
    path = os.path.abspath(path)
    for base, prefix in ((output_dir, "<output_dir>/"), (ROOT, "")):
        if "://" not in base and os.path.commonpath([path, os.path.abspath(base)]) == os.path.abspath(base):
            return prefix + os.path.relpath(path, base)
    return os.path.basename(path)


def _study_data(fv, budget, inputs, archive_dir):
    """The StudyData that labels the report: that of the data given, checked against the
    archive's (one error line if the archive holds runs of other data) and kept in it;
    the archive's own with --report_only and no data."""
    from experiments.study import run_archive, study_files, study_stats

    train_file, eval_file, data_note = inputs
    archived = run_archive.load_study_data(archive_dir) if archive_dir else None
    if train_file is None:
        cli.require(archived, f"--archive_dir={fv.archive_dir} does not name the data of its runs "
                    f"({run_archive.STUDY_DATA}): give the study's data as well (--text_file, or "
                    "--train_input_file and --eval_input_file)")
        return archived
    unigram, copy_unigram = study_stats.plateau_baselines(eval_file, budget.max_seq_length,
                                                          budget.max_predictions_per_seq)
    current = study_files.StudyData(
        vocab_size=study_files.count_vocab(fv.vocab_file) if fv.vocab_file else fv.vocab_size,
        unigram_baseline=unigram, copy_unigram_baseline=copy_unigram,
        train_records=_input_name(train_file, fv.output_dir), eval_records=_input_name(eval_file, fv.output_dir),
        data_note=data_note)
    if archived is None:
        if archive_dir:
            run_archive.save_study_data(archive_dir, current)
        return current
    if archived.differs_from(current):
        from realformer_tf.data.records import InputError

        raise InputError(f"--archive_dir={fv.archive_dir} holds runs of other data ({archived.describe()}; "
                         f"this data: {current.describe()}), which a report would mislabel and a run would mix "
                         "with them: give the study's own data, another --archive_dir, or --report_only with "
                         "no data to report the archive alone")
    return archived


def _check_budget(fv, budget):
    from experiments.study import grid

    cli.require(budget.model in grid.MODEL_PRESETS, f"unknown model preset {budget.model}")
    cli.require(budget.num_train_steps > 0, f"--num_train_steps={budget.num_train_steps} must be positive")
    cli.require(budget.seeds, "--seeds is empty; give at least one seed")
    cli.require(all(d > 0 for d in budget.layer_counts), f"--depths={budget.depths}: layer counts must be positive")
    cli.require(set(budget.sweep_seeds) <= set(budget.seeds),
                f"--sweep_seeds={budget.sweep_seeds} must be a subset of --seeds={budget.seeds}")
    cli.require(fv.workers >= 1 and fv.threads_per_worker >= 0,
                f"--workers={fv.workers} must be >= 1 and --threads_per_worker={fv.threads_per_worker} >= 0")


def _state_path(output_dir):
    return os.path.join(output_dir, "study.json")


def _reproduction(state):
    from experiments.study import grid, reproduction

    budget = grid.Budget(**state["settings"])  # JSON gave lists; the grid hashes tuples
    budget = dataclasses.replace(budget, **{k: tuple(getattr(budget, k)) for k in LIST_TYPES})
    return reproduction.Reproduction(state["output_dir"], state["variants"], budget, state["train_file"],
                                     state["eval_file"], state["vocab_size"], probe_variants=state["probe"])


def _selected(repro, only):
    """The planned runs, or those named in `only` (checked against the plan)."""
    plan = repro.plan()
    if not only:
        return plan
    by_name = {run.name: run for run in plan}
    unknown = [name for name in only if name not in by_name]
    cli.require(not unknown, f"--only: {', '.join(unknown)} is not a run of this grid; its runs are named "
                             f"like {plan[0].name} (see results.md)")
    return [by_name[name] for name in only]


def _keep_finished(repro, archive_dir):
    """The hook run after each finished run: its attention statistics (analyzed runs,
    while the checkpoint is there), then its copy in the archive."""
    from experiments.study import run_archive, study_figures

    def keep(result):
        if study_figures.is_analyzed(repro, result):
            study_figures.run_attention(repro, result.run, log_fn=repro.log)
        if archive_dir:
            run_archive.save(repro.run_dir(result.run), os.path.join(archive_dir, result.run.name))

    return keep


def _sync_archive(repro, archive_dir):
    """Restores the archived runs --output_dir lacks, then keeps the finished runs the
    archive lacks (statistics, archive copy), so runs finished before the archive was
    given are in it; runs already archived are not copied again."""
    from experiments.study import run_archive

    keep = _keep_finished(repro, archive_dir)
    restored = 0
    for run in repro.plan():
        archived = os.path.join(archive_dir, run.name) if archive_dir else None
        if archived and run_archive.restore(archived, repro.run_dir(run)):
            restored += 1
            continue
        found = repro.existing(run)
        if found and found.status != "failed" and not (archived and run_archive.is_finished(archived)):
            keep(found)
    if archive_dir:
        print(f"Archive {archive_dir}: {restored} finished run(s) restored into {repro.output_dir}", flush=True)


def _worker_main(fv):
    """One worker: trains its share of the selected runs, single file of output."""
    import tensorflow as tf

    from experiments.study import grid

    with tf.io.gfile.GFile(_state_path(fv.output_dir)) as f:
        state = json.load(f)
    worker, workers = (int(x) for x in fv.worker.split("/"))
    repro = _reproduction(state)
    repro.on_finished = _keep_finished(repro, state.get("archive_dir"))
    results = repro.run_all(grid.share_of(_selected(repro, fv.only), worker, workers))
    failed = [r.name for r in results if r.status == "failed"]
    if failed:
        raise cli.UserError(f"{len(failed)} run(s) failed: {', '.join(failed)}; rerun to retry them")


def _spawn_workers(fv, runs, count):
    """Starts `count` worker processes that share `runs` (each worker on its own CPU core
    when one thread each), prints their output as it comes, prefixed; returns the
    workers that failed."""
    import subprocess
    import threading

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if fv.threads_per_worker:
        threads = str(fv.threads_per_worker)
        env.update(TF_NUM_INTRAOP_THREADS=threads, TF_NUM_INTEROP_THREADS=threads, OMP_NUM_THREADS=threads)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    procs = []
    for k in range(count):
        command = [sys.executable, os.path.abspath(__file__), f"--output_dir={fv.output_dir}",
                   f"--worker={k}/{count}", f"--only={','.join(run.name for run in runs)}"]
        pin = None
        if fv.threads_per_worker == 1 and len(cores) >= count:
            pin = functools.partial(os.sched_setaffinity, 0, {cores[k]})
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                      env=env, cwd=ROOT, bufsize=1, preexec_fn=pin))

    def echo(k, proc):
        for line in proc.stdout:
            print(f"[worker {k}] {line}", end="", flush=True)

    readers = [threading.Thread(target=echo, args=(k, p), daemon=True) for k, p in enumerate(procs)]
    for t in readers:
        t.start()
    codes = [p.wait() for p in procs]
    for t in readers:
        t.join()
    return [k for k, code in enumerate(codes) if code != 0]


def _report(fv, repro, state):
    import tensorflow as tf

    from experiments.study import study_report, study_stats
    from experiments.study.study_files import StudyData

    results = repro.collect()
    data = StudyData(**state["data"])
    report = study_report.write_all(repro, results, fv.budget, data, analysis=fv.analysis)
    with tf.io.gfile.GFile(os.path.join(repro.output_dir, "results.json"), "w") as f:
        json.dump({"budget": fv.budget, "settings": state["settings"], "data": state["data"],
                   "threads_per_worker": fv.threads_per_worker,
                   "runs": [study_stats.result_dict(r) for r in results]}, f, indent=2)
    return report, results


def _study_state(fv):
    """Checks the flags and inputs (building records from --text_file), writes the
    grid's state to study.json for the workers and returns it."""
    import tensorflow as tf

    from experiments.study import grid

    try:
        variants = grid.parse_variants(fv.variants)
        probe = variants if fv.probe_variants == "all" else grid.parse_variants(fv.probe_variants)
    except ValueError as e:
        raise cli.UsageError(f"--variants / --probe_variants: {e}") from None
    cli.require(set(probe) <= set(variants), "--probe_variants must be a subset of --variants")
    budget = _budget(fv)
    _check_budget(fv, budget)
    cli.require(not (fv.only and fv.report_only), "--only trains runs and --report_only trains none; "
                                                  "give one of them")
    fv.output_dir = os.path.abspath(fv.output_dir) if "://" not in fv.output_dir else fv.output_dir
    tf.io.gfile.makedirs(fv.output_dir)
    inputs = _check_inputs(fv, budget, fv.output_dir)
    archive_dir, packed = _archive(fv)
    data = _study_data(fv, budget, inputs, archive_dir)
    # The workers' state (absolute paths: they run in other processes); the report names
    # its inputs through `data` only.
    state = dict(output_dir=fv.output_dir, variants=variants, probe=probe, settings=dataclasses.asdict(budget),
                 train_file=inputs[0], eval_file=inputs[1], vocab_size=data.vocab_size,
                 data=dataclasses.asdict(data), archive_dir=archive_dir, packed_archive=packed)
    with tf.io.gfile.GFile(_state_path(fv.output_dir), "w") as f:
        json.dump(state, f, indent=2)
    return state


def _archive(fv):
    """(the archive folder or None, the packed archive or None): --archive_dir as given, or
    for a NAME.tar.xz the folder OUTPUT_DIR/archive/ with the file's runs added to it."""
    import tensorflow as tf

    from experiments.study import run_archive

    if not fv.archive_dir:
        return None, None
    path = os.path.abspath(fv.archive_dir) if "://" not in fv.archive_dir else fv.archive_dir
    if not run_archive.is_packed(path):
        return path, None
    folder = os.path.join(fv.output_dir, "archive")
    if tf.io.gfile.exists(path):
        print(f"Archive {fv.archive_dir}: {len(run_archive.unpack(path, folder))} file(s) unpacked into {folder}",
              flush=True)
    return folder, path


def _pack_archive(state):
    """Packs the archive folder back into --archive_dir's .tar.xz (when one was given)."""
    from experiments.study import run_archive

    if state.get("packed_archive") and run_archive.pack(state["archive_dir"], state["packed_archive"]):
        print(f"Archive {state['packed_archive']}: packed from {state['archive_dir']}", flush=True)


def _pending(repro, runs):
    """The runs still to train; says which finished ones are reused (no worker starts for
    a study that is done)."""
    pending = []
    for i, run in enumerate(runs):
        found = repro.existing(run)
        if found:
            print(f"[{i + 1}/{len(runs)} {run.name}] reusing the finished run ({found.status}) in "
                  f"{repro.run_dir(run)}", flush=True)
        else:
            pending.append(run)
    return pending


def _train(fv, repro, state):
    """Trains the selected runs on --workers processes, then writes the report (none
    with --only: it prints the runs' numbers instead)."""
    from experiments.study import grid

    runs = _selected(repro, fv.only)
    budget = repro.budget
    pending = _pending(repro, runs)
    workers = min(fv.workers, len(pending))
    print(f"Study: {len(runs)} run{'s' if len(runs) != 1 else ''} ({len(pending)} to train; "
          f"{len(state['variants'])} variants, depths {budget.layer_counts}, seeds {budget.seeds}, sweep lrs "
          f"{budget.sweep_learning_rates}), budget {fv.budget}, {workers} worker(s) x "
          f"{fv.threads_per_worker or 'default'} thread(s); output {fv.output_dir}", flush=True)
    started = time.time()
    failed_workers = _spawn_workers(fv, pending, workers) if pending else []
    if fv.only:
        for run in runs:
            found = repro.existing(run)
            print(f"{run.name}: " + (f"{found.status} {json.dumps(found.results, sort_keys=True)}" if found
                                     else "not finished"))
    else:
        report, _ = _report(fv, repro, state)
        print(f"\nDone in {grid.format_seconds(time.time() - started)}. Report: {report}", flush=True)
    if failed_workers:
        raise cli.UserError(f"worker(s) {failed_workers} failed (their output above says why); rerun the same "
                            "command to retry: finished runs are reused, interrupted ones resume")


def run(fv):
    if fv.worker:
        return _worker_main(fv)
    state = _study_state(fv)
    repro = _reproduction(state)
    try:
        _sync_archive(repro, state["archive_dir"])
        if not fv.report_only:
            return _train(fv, repro, state)
        report, results = _report(fv, repro, state)
        unfinished = sum(not r.finished for r in results)
        print(f"Report of {len(results) - unfinished} finished run(s), {unfinished} not finished: {report}",
              flush=True)
    finally:
        _pack_archive(state)


def main(argv=None):
    return app.run_program(argv, __doc__, define_flags, run, required_flags=["output_dir"])


if __name__ == "__main__":
    sys.exit(main())
