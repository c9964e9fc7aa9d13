"""The grid of pretraining runs behind experiments/reproduce.py: the papers' variants
(Post-LN, Pre-LN, RealFormer, RealFormer running mean, NormFormer, RealFormer +
NormFormer) at several depths and seeds, plus a learning-rate sweep (the RealFormer
paper's Table 2 and Table 6, NormFormer's stability claim).

A `Budget` defines the grid, `plan_runs` lists its `Run`s, and `Reproduction` trains and
evaluates each one with the pretraining job run_pretraining.py runs
(`realformer_tf.jobs.tasks.pretraining.run_pretraining`, in this process), into its own
output_dir: finished runs (eval_results.txt at the run's step) are reused and
interrupted ones resume from their checkpoints. `share_of` splits the runs among
parallel worker processes. realformer_tf/study_report.py writes the report.
"""

import dataclasses
import json
import math
import os
import re
import time

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    title: str
    config: dict


VARIANTS = {v.name: v for v in (
    Variant("post", "Post-LN (vanilla BERT)", dict(residual_attention=False, layer_norm_type="post")),
    Variant("pre", "Pre-LN", dict(residual_attention=False, layer_norm_type="pre")),
    Variant("realformer", "RealFormer (Post-LN + residual attention)",
            dict(residual_attention=True, layer_norm_type="post")),
    Variant("realformer_mean", "RealFormer, running mean",
            dict(residual_attention=True, use_running_mean=True, layer_norm_type="post")),
    Variant("normformer", "NormFormer", dict(residual_attention=False, layer_norm_type="normformer")),
    Variant("realformer_normformer", "RealFormer + NormFormer",
            dict(residual_attention=True, layer_norm_type="normformer")),
)}

MODEL_PRESETS = {
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
    "narrow": dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, intermediate_size=256),
    "mini": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
}


@dataclasses.dataclass(frozen=True)
class Budget:
    """Everything a preset fixes; reproduce.py's flags override single fields.

    The grid it defines: every variant at every depth in `depths` (empty: the model
    preset's) with every seed in `seeds`, `num_train_steps` at `learning_rate`; and the
    learning-rate sweep: the probe variants at the first depth, at `learning_rate` and
    each of `sweep_learning_rates`, `sweep_train_steps` each (0: num_train_steps), with
    the seeds in `sweep_seeds` (empty: `seeds`). A sweep run identical to a depth run is
    trained once."""

    model: str
    num_train_steps: int
    train_batch_size: int
    num_warmup_steps: int
    learning_rate: float
    eval_batch_size: int
    max_eval_steps: int
    iterations_per_loop: int
    save_checkpoints_steps: int
    analysis_examples: int
    max_seq_length: int
    max_predictions_per_seq: int
    sweep_learning_rates: tuple = ()
    sweep_train_steps: int = 0
    sweep_warmup_steps: int = 0
    depths: tuple = ()
    seeds: tuple = (1,)
    sweep_seeds: tuple = ()
    dropout: float = 0.1
    note: str = ""

    @property
    def layer_counts(self):
        return tuple(self.depths) or (MODEL_PRESETS[self.model]["num_hidden_layers"],)


BUDGETS = {
    # Seconds per run: for the tests and for trying the pipeline.
    "toy": Budget(model="tiny", num_train_steps=5, train_batch_size=8, num_warmup_steps=1,
                  learning_rate=1e-3, sweep_learning_rates=(1e-2,), eval_batch_size=8, max_eval_steps=2,
                  iterations_per_loop=1, save_checkpoints_steps=5, analysis_examples=8,
                  max_seq_length=32, max_predictions_per_seq=5,
                  note="plumbing only; the numbers mean nothing"),
    # All 12 runs (6 variants x 2 learning rates) in about 40 minutes on 2 CPU cores; see
    # experiments/reproduce.py for the measurement this is sized from.
    "small": Budget(model="small", num_train_steps=180, train_batch_size=16, num_warmup_steps=18,
                    learning_rate=5e-4, sweep_learning_rates=(2e-3,), eval_batch_size=32, max_eval_steps=8,
                    iterations_per_loop=10, save_checkpoints_steps=60, analysis_examples=256,
                    max_seq_length=128, max_predictions_per_seq=20,
                    note="a few minutes of training per run: shows early-training trends only"),
    # The seeded study (experiments/README.md): deep-and-narrow models, 2 depths x 6
    # variants x 3 seeds, and a 4-point learning-rate sweep x 2 seeds; sized from
    # measured step times for about 100 minutes on 2 CPU cores (2 single-threaded workers).
    "study": Budget(model="narrow", num_train_steps=2500, train_batch_size=32, num_warmup_steps=250,
                    learning_rate=1e-3, sweep_learning_rates=(3e-3, 1e-2, 3e-2), sweep_train_steps=800,
                    sweep_warmup_steps=40, depths=(4, 12), seeds=(1, 2, 3), sweep_seeds=(1, 2),
                    dropout=0.0, eval_batch_size=64, max_eval_steps=0, iterations_per_loop=100,
                    save_checkpoints_steps=500, analysis_examples=512, max_seq_length=64,
                    max_predictions_per_seq=10,
                    note="deep-and-narrow models, 3 seeds, and a learning-rate sweep"),
}


@dataclasses.dataclass(frozen=True)
class Run:
    """One pretraining run of the grid: everything that differs between runs."""

    variant: str
    learning_rate: float
    seed: int
    layers: int
    steps: int
    warmup: int

    @property
    def name(self):
        return f"{self.variant}_L{self.layers}_lr{format_lr(self.learning_rate)}_s{self.seed}_n{self.steps}"

    @property
    def cost(self):
        """Relative compute (steps x layers): for sharing runs among workers and the ETA."""
        return self.steps * self.layers


def model_config(variant, preset, vocab_size, max_seq_length, layers=0, dropout=0.1):
    """The bert_config dict of `variant` at size `preset` (`layers`: a depth other than
    the preset's)."""
    config = dict(
        vocab_size=int(vocab_size), hidden_act="gelu", hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout, max_position_embeddings=max(int(max_seq_length), 16),
        type_vocab_size=2, initializer_range=0.02, use_running_mean=False,
    )
    config.update(MODEL_PRESETS[preset])
    if layers:
        config["num_hidden_layers"] = int(layers)
    config.update(VARIANTS[variant].config)
    return config


def plan_runs(budget, variants, probe_variants):
    """The grid's runs, seed by seed (a study stopped early holds whole seeds), each once."""
    sweep_seeds = budget.sweep_seeds or budget.seeds
    sweep_lrs = (budget.learning_rate,) + tuple(budget.sweep_learning_rates)
    runs = []
    for seed in budget.seeds:
        for layers in budget.layer_counts:
            runs += [Run(v, budget.learning_rate, seed, layers, budget.num_train_steps,
                         budget.num_warmup_steps) for v in variants]
        if seed in sweep_seeds and budget.sweep_learning_rates:
            steps = budget.sweep_train_steps or budget.num_train_steps
            warmup = budget.sweep_warmup_steps or budget.num_warmup_steps
            runs += [Run(v, lr, seed, budget.layer_counts[0], steps, warmup)
                     for lr in sweep_lrs for v in probe_variants]
    return list(dict.fromkeys(runs))


def share_of(runs, worker, workers):
    """The runs worker `worker` of `workers` trains: longest first to the least loaded
    worker. A fixed function of the plan, so the workers agree without talking."""
    loads, shares = [0] * workers, [[] for _ in range(workers)]
    for run in sorted(runs, key=lambda r: -r.cost):
        w = loads.index(min(loads))
        loads[w] += run.cost
        shares[w].append(run)
    order = {run: i for i, run in enumerate(runs)}
    return sorted(shares[worker], key=order.get)


def parse_variants(text):
    names = [v.strip() for v in text.split(",") if v.strip()]
    if names == ["all"]:
        return list(VARIANTS)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown or not names:
        raise ValueError(f"unknown variant(s) {', '.join(unknown) or '(none given)'}; choose from "
                         f"{', '.join(VARIANTS)} or 'all'")
    return names


def format_lr(lr):
    return f"{lr:g}"


def format_seconds(seconds):
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


# -- reading what run_pretraining.py wrote ---------------------------------------------------

def read_eval_results(path):
    """eval_results.txt ("key = value" lines) -> {key: float}; None if absent."""
    if not tf.io.gfile.exists(path):
        return None
    results = {}
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            if " = " in line:
                key, value = line.split(" = ", 1)
                try:
                    results[key.strip()] = float(value)
                except ValueError:
                    pass
    return results


def read_scalars(summary_dir):
    """{tag: [(step, value), ...]} (sorted by step, last value per step) from the event
    files of `summary_dir` (what orbit's summary manager writes)."""
    series = {}
    if not tf.io.gfile.isdir(summary_dir):
        return {}
    for path in sorted(tf.io.gfile.glob(os.path.join(summary_dir, "events.out.tfevents.*"))):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = tf.compat.v1.Event.FromString(record.numpy())
                for value in event.summary.value:
                    if value.HasField("tensor"):
                        number = float(tf.make_ndarray(value.tensor).reshape(-1)[0])
                    else:
                        number = float(value.simple_value)
                    series.setdefault(value.tag, {})[int(event.step)] = number
        except tf.errors.DataLossError:
            continue  # a file being written, or truncated by a crash: keep what was read
    return {tag: sorted(points.items()) for tag, points in series.items()}


def checkpoint_step(run_dir):
    """Global step of the latest training checkpoint in run_dir (0 if none)."""
    latest = tf.train.latest_checkpoint(run_dir) if tf.io.gfile.isdir(run_dir) else None
    match = re.search(r"ckpt-(\d+)$", latest or "")
    return int(match.group(1)) if match else 0


# -- data --------------------------------------------------------------------------------------

def split_documents(text, eval_every):
    """Raw create_pretraining_data text (blank lines between documents) -> (train, eval)
    texts, every `eval_every`-th document held out (at least one each way)."""
    documents = [d.strip("\n") for d in re.split(r"\n\s*\n", text) if d.strip()]
    if len(documents) < 2:
        raise ValueError("the text needs at least two documents (separated by blank lines) to "
                         "hold one out; or give --eval_text_file")
    held_out = {i for i in range(len(documents)) if i % eval_every == eval_every - 1} or {len(documents) - 1}
    train = [d for i, d in enumerate(documents) if i not in held_out]
    evaluation = [d for i, d in enumerate(documents) if i in held_out]
    return "\n\n".join(train) + "\n", "\n\n".join(evaluation) + "\n"


def count_vocab(vocab_file):
    from realformer_tf.data.vocab import check_vocab

    return len(check_vocab(vocab_file))


# -- training ------------------------------------------------------------------------------

def train_in_process(options, log_path, on_line=None):
    """Runs the pretraining job (`options`: PretrainingOptions) in this process, its
    output appended to `log_path` and each line passed to `on_line`. Returns (None or
    the divergence message, seconds)."""
    import contextlib
    import sys

    import keras

    from realformer_tf.jobs.tasks.pretraining import run_pretraining
    from realformer_tf.training.trainer import NonFiniteLossError

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
    from realformer_tf.training.trainer import Trainer, write_results

    files = data.check_files(eval_file, budget.max_seq_length, budget.max_predictions_per_seq)
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
    def accuracy(self):
        return self.results.get("masked_lm_accuracy", float("nan")) if self.status == "done" else float("nan")


class Reproduction:
    """Trains the runs of a `Budget`'s grid into `output_dir`, each resumable on its own."""

    def __init__(self, output_dir, variants, budget, train_file, eval_file, vocab_size,
                 probe_variants=None, log_fn=print):
        self.output_dir = output_dir
        self.variants = list(variants)
        self.probe_variants = list(self.variants if probe_variants is None else
                                   [v for v in self.variants if v in probe_variants])
        self.budget = budget
        self.train_file = train_file
        self.eval_file = eval_file
        self.vocab_size = vocab_size
        self.log = log_fn
        self.started = None
        self.done_cost = 0          # compute of the runs trained (not reused) in this session
        self.session_seconds = 0.0

    def plan(self):
        return plan_runs(self.budget, self.variants, self.probe_variants)

    def run_dir(self, run):
        return os.path.join(self.output_dir, run.name)

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
        self.log(f"{tag} {VARIANTS[run.variant].title}, {run.layers} layers, lr {format_lr(run.learning_rate)}, "
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
