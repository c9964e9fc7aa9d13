"""Trains the runs of a study grid (`experiments.study.grid`): `Reproduction` trains
and evaluates each one with the pretraining job run_pretraining.py runs
(`realformer_tf.jobs.tasks.pretraining.run_pretraining`, in this process), into its own
output_dir: finished runs (eval_results.txt at the run's step) are reused and
interrupted ones resume from their checkpoints. experiments/study/study_report.py
writes the report.
"""

import dataclasses
import json
import math
import os
import re
import time

import tensorflow as tf

from experiments.study.grid import Run, canonical_names, format_lr, format_seconds, model_config, plan_runs, title
from experiments.study.study_files import checkpoint_step, read_eval_results


# -- training ------------------------------------------------------------------------------

def train_in_process(options, log_path, on_line=None):
    """Runs the pretraining job (`options`: PretrainingOptions) in this process, its
    output appended to `log_path` and each line passed to `on_line`. Returns (None or
    the divergence message, seconds)."""
    import contextlib
    import sys

    import keras

    from realformer_tf.errors import NonFiniteLossError
    from realformer_tf.jobs.tasks.pretraining import run_pretraining

    console, start = sys.stdout, time.time()

    def say(line):
        print(line, flush=True)
        if on_line:
            with contextlib.redirect_stdout(console):
                on_line(line)

    with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        print(f"$ run_pretraining {json.dumps(dataclasses.asdict(options), sort_keys=True)}", flush=True)
        try:
            run_pretraining(options, log=say)
            return None, time.time() - start
        except NonFiniteLossError as e:
            print(f"error: {e}", flush=True)
            return str(e), time.time() - start
        finally:
            keras.backend.clear_session()  # one process trains many models


# -- evaluation ----------------------------------------------------------------------------

def evaluate_run(run_dir, config_file, eval_file, budget):
    """Masked-LM / next-sentence metrics of run_dir's latest checkpoint on the held-out
    records, with the pretraining task and training loop run_pretraining.py uses; writes
    run_dir/eval_results.txt (its format) and returns the results.

    In process rather than a second run_pretraining.py call (whose --do_eval reads the
    training --input_file), and over exactly the available number of batches: evaluating
    until the data runs out (steps=-1) makes orbit call the step once more on the
    exhausted iterator, and the next-sentence count (the static batch size, which needs
    no data) is still added then, understating NSP accuracy and loss by n/(n+1)."""
    from realformer_tf.models.bert.config import BertConfig
    from realformer_tf.data import pretraining as data
    from realformer_tf.data import records
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.jobs.outputs import write_results
    from realformer_tf.training.trainer import Trainer

    files = data.check_files(eval_file, budget.max_seq_length, budget.max_predictions_per_seq, log=print)
    wanted = budget.max_eval_steps * budget.eval_batch_size if budget.max_eval_steps > 0 else -1
    count = tf.data.TFRecordDataset(files).take(wanted).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1)
    available = int(count) // budget.eval_batch_size
    if available < 1:
        raise records.InputError(f"{eval_file} holds fewer than eval_batch_size="
                                 f"{budget.eval_batch_size} records")
    steps = min(available, budget.max_eval_steps) if budget.max_eval_steps > 0 else available
    config = BertConfig.from_json_file(config_file)
    trainer = Trainer(PretrainingTask(config), tf.distribute.get_strategy(), run_dir)
    if not trainer.restore_or_initialize(weights_only=True):
        raise RuntimeError(f"{run_dir} has no checkpoint to evaluate")
    results = trainer.evaluate(
        data.make_dataset_fn(files, budget.max_seq_length, budget.max_predictions_per_seq,
                             budget.eval_batch_size, is_training=False, max_steps=steps),
        steps, summary_dir=os.path.join(run_dir, "summaries", "eval"))
    results["eval_examples"] = steps * budget.eval_batch_size
    write_results(os.path.join(run_dir, "eval_results.txt"), results)
    return results


@dataclasses.dataclass
class RunResult:
    run: Run
    status: str            # "done", "diverged" or "failed"
    results: dict          # eval_results.txt
    seconds: float         # training + evaluation wall time (all sessions)
    steps: int             # steps trained (where a diverged run stopped)
    message: str = ""
    reused: bool = False

    @property
    def name(self):
        return self.run.name

    @property
    def finished(self):
        """Trained to the end or diverged: a run that says something about its variant
        (a "missing" or "failed" one has yet to finish)."""
        return self.status in ("done", "diverged")

    @property
    def accuracy(self):
        return self.results.get("masked_lm_accuracy", float("nan")) if self.status == "done" else float("nan")


class Reproduction:
    """Trains the runs of a `Budget`'s grid into `output_dir`, each resumable on its own."""

    def __init__(self, output_dir, variants, budget, train_file, eval_file, vocab_size,
                 probe_variants=None, log_fn=print, on_finished=None):
        self.output_dir = output_dir
        self.variants = canonical_names(variants)  # a study.json may hold old names
        self.probe_variants = list(self.variants if probe_variants is None else
                                   [v for v in self.variants if v in canonical_names(probe_variants)])
        self.budget = budget
        self.train_file = train_file
        self.eval_file = eval_file
        self.vocab_size = vocab_size
        self.log = log_fn
        self.on_finished = on_finished  # called with each RunResult trained or evaluated here
        self.started = None
        self.done_cost = 0          # compute of the runs trained (not reused) in this session
        self.session_seconds = 0.0

    def plan(self):
        return plan_runs(self.budget, self.variants, self.probe_variants)

    def run_dir(self, run):
        """The run's folder; that of its old name (e.g. post_L4_...) when a study started
        before the variant names were unified holds it, so it is reused or resumed."""
        path = os.path.join(self.output_dir, run.name)
        if not tf.io.gfile.isdir(path):
            for name in run.legacy_names:
                legacy = os.path.join(self.output_dir, name)
                if tf.io.gfile.isdir(legacy):
                    return legacy
        return path

    # -- running ---------------------------------------------------------------------------
    def _train_options(self, run, run_dir, config_file):
        from realformer_tf.jobs.tasks.pretraining import PretrainingOptions

        b = self.budget
        return PretrainingOptions(
            input_file=self.train_file, output_dir=run_dir, bert_config_file=config_file,
            do_train=True, do_eval=False, train_batch_size=b.train_batch_size,
            max_seq_length=b.max_seq_length, max_predictions_per_seq=b.max_predictions_per_seq,
            num_train_steps=run.steps, num_warmup_steps=run.warmup, learning_rate=run.learning_rate,
            iterations_per_loop=b.iterations_per_loop, save_checkpoints_steps=b.save_checkpoints_steps,
            seed=run.seed, keep_checkpoint_max=2,
        )

    def _timing(self, run_dir, add=None):
        path = os.path.join(run_dir, "timing.json")
        timing = {"train_seconds": 0.0, "eval_seconds": 0.0}
        if tf.io.gfile.exists(path):
            with tf.io.gfile.GFile(path) as f:
                timing.update(json.load(f))
        if add:
            for key, seconds in add.items():
                timing[key] = timing.get(key, 0.0) + seconds
            with tf.io.gfile.GFile(path, "w") as f:
                json.dump(timing, f, indent=2)
        return timing

    def existing(self, run):
        """The RunResult of a finished (or diverged) run, else None."""
        run_dir = self.run_dir(run)
        seconds = sum(self._timing(run_dir).values())
        diverged = os.path.join(run_dir, "diverged.txt")
        if tf.io.gfile.exists(diverged):
            with tf.io.gfile.GFile(diverged) as f:
                message = f.read().strip()
            match = re.search(r"global step (\d+)", message)
            return RunResult(run, "diverged", {}, seconds,
                             int(match.group(1)) if match else checkpoint_step(run_dir), message, True)
        results = read_eval_results(os.path.join(run_dir, "eval_results.txt"))
        if results and int(results.get("global_step", -1)) == run.steps:
            finite = all(math.isfinite(results.get(k, 0.0)) for k in ("loss", "masked_lm_loss"))
            return RunResult(run, "done" if finite else "diverged", results, seconds, run.steps,
                             "" if finite else "non-finite evaluation loss", True)
        return None

    def eta(self, remaining_cost):
        """Seconds for runs of `remaining_cost` at this session's seconds per unit of cost."""
        if not self.done_cost:
            return None
        return remaining_cost * self.session_seconds / self.done_cost

    def _progress(self, tag):
        def on_line(line):
            if line.startswith("step ") or line.startswith("error:"):
                self.log(f"{tag} {line} | total elapsed {format_seconds(time.time() - self.started)}")

        return on_line

    def _failed(self, run, start, message):
        self.log(f"[{run.name}] FAILED: {message}")
        return RunResult(run, "failed", {}, time.time() - start, checkpoint_step(self.run_dir(run)), message)

    def _write_config(self, run, run_dir):
        config_file = os.path.join(run_dir, "experiment_bert_config.json")
        b = self.budget
        with tf.io.gfile.GFile(config_file, "w") as f:
            json.dump(model_config(run.variant, b.model, self.vocab_size, b.max_seq_length, run.layers,
                                   b.dropout), f, indent=2, sort_keys=True)
        return config_file

    def _train(self, run, tag, run_dir, config_file, log_path):
        """Trains (or resumes) `run`; returns None, or the RunResult if it ended early."""
        from realformer_tf.errors import UserError

        start = time.time()
        try:
            diverged, seconds = train_in_process(self._train_options(run, run_dir, config_file), log_path,
                                                 self._progress(tag))
        except UserError as e:
            return self._failed(run, start, f"pretraining: {e} (see {log_path})")
        self._timing(run_dir, {"train_seconds": seconds})
        if diverged:
            with tf.io.gfile.GFile(os.path.join(run_dir, "diverged.txt"), "w") as f:
                f.write(diverged + "\n")
            self.log(f"{tag} DIVERGED: {diverged[:100]}")
            return dataclasses.replace(self.existing(run), reused=False)
        return None

    def _evaluate(self, run, run_dir, config_file, log_path):
        """Held-out evaluation of the finished run; returns its RunResult."""
        import contextlib

        start = time.time()
        try:
            # orbit prints its eval progress; it belongs in the run's log.
            with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
                evaluate_run(run_dir, config_file, self.eval_file, self.budget)
        except (RuntimeError, ValueError, tf.errors.OpError) as e:
            return self._failed(run, start, f"evaluation: {e}")
        finally:
            self._timing(run_dir, {"eval_seconds": time.time() - start})
        result = self.existing(run)
        if result is None:
            return self._failed(run, start, f"the checkpoint evaluated is not at step {run.steps}")
        return dataclasses.replace(result, reused=False)

    def run_one(self, index, total, run, remaining_cost=0):
        tag = f"[{index}/{total} {run.name}]"
        found = self.existing(run)
        if found:
            self.log(f"{tag} reusing the finished run ({found.status}) in {self.run_dir(run)}")
            return found
        run_dir = self.run_dir(run)
        tf.io.gfile.makedirs(run_dir)
        config_file = self._write_config(run, run_dir)
        log_path = os.path.join(run_dir, "reproduce.log")
        start = time.time()
        resumed = checkpoint_step(run_dir)
        self.log(f"{tag} {title(run.variant)}, {run.layers} layers, lr {format_lr(run.learning_rate)}, "
                 f"seed {run.seed}: " + (f"resuming from step {resumed} of " if resumed else "training ")
                 + f"{run.steps} steps (log: {log_path}) | elapsed {format_seconds(start - self.started)}"
                 f" | ETA {format_seconds(self.eta(remaining_cost))}")
        result = None
        trains = resumed < run.steps or not tf.io.gfile.exists(os.path.join(run_dir, "bert_model.ckpt.index"))
        if trains:
            result = self._train(run, tag, run_dir, config_file, log_path)
        if result is None:
            self.log(f"{tag} evaluating on the held-out records")
            result = self._evaluate(run, run_dir, config_file, log_path)
        if trains:  # the ETA's rate: seconds per unit of cost of what this session trained
            self.session_seconds += time.time() - start
            self.done_cost += run.cost * (run.steps - resumed) / run.steps
        if result.status == "done":
            r = result.results
            self.log(f"{tag} done: held-out MLM accuracy {r.get('masked_lm_accuracy', float('nan')):.4f}, "
                     f"MLM loss {r.get('masked_lm_loss', float('nan')):.4f} ({format_seconds(time.time() - start)})")
        if self.on_finished and result.status != "failed":
            self.on_finished(result)
        return result

    def run_all(self, runs=None):
        """Trains `runs` (default: the whole plan) one after another; returns their results."""
        self.started = time.time()
        runs = self.plan() if runs is None else list(runs)
        results = []
        for i, run in enumerate(runs):
            results.append(self.run_one(i + 1, len(runs), run, sum(r.cost for r in runs[i:])))
        return results

    def collect(self):
        """The RunResult of every planned run: finished ones from disk, others "missing"."""
        return [self.existing(run) or RunResult(run, "missing", {}, 0.0, checkpoint_step(self.run_dir(run)))
                for run in self.plan()]
