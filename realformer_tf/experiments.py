"""A small-scale reproduction of the RealFormer paper's pretraining comparisons (§4.1,
Table 6's learning-rate stability probe, Figures 4-6's attention analysis), driven by
experiments/reproduce.py.

Every variant is pretrained in this process by the pretraining job run_pretraining.py
runs (`realformer_tf.tasks.pretraining.run_pretraining`), trained on the training records
and then evaluated on the held-out records in the same output_dir, so a run is
resumable: a rerun reuses finished runs (eval_results.txt at the requested step) and
resumes interrupted ones from their checkpoints.
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
    "mini": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512),
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
}


@dataclasses.dataclass(frozen=True)
class Budget:
    """Everything a preset fixes; reproduce.py's flags override single fields."""

    model: str
    num_train_steps: int
    train_batch_size: int
    num_warmup_steps: int
    learning_rate: float
    high_learning_rate: float
    eval_batch_size: int
    max_eval_steps: int
    iterations_per_loop: int
    save_checkpoints_steps: int
    analysis_examples: int
    max_seq_length: int
    max_predictions_per_seq: int
    note: str = ""


BUDGETS = {
    # Seconds per run: for the tests and for trying the pipeline.
    "toy": Budget(model="tiny", num_train_steps=5, train_batch_size=8, num_warmup_steps=1,
                  learning_rate=1e-3, high_learning_rate=1e-2, eval_batch_size=8, max_eval_steps=2,
                  iterations_per_loop=1, save_checkpoints_steps=5, analysis_examples=8,
                  max_seq_length=32, max_predictions_per_seq=5,
                  note="plumbing only; the numbers mean nothing"),
    # All 12 runs (6 variants x 2 learning rates) in about 40 minutes on 2 CPU cores; see
    # experiments/reproduce.py for the measurement this is sized from.
    "small": Budget(model="small", num_train_steps=180, train_batch_size=16, num_warmup_steps=18,
                    learning_rate=5e-4, high_learning_rate=2e-3, eval_batch_size=32, max_eval_steps=8,
                    iterations_per_loop=10, save_checkpoints_steps=60, analysis_examples=256,
                    max_seq_length=128, max_predictions_per_seq=20,
                    note="a few minutes of training per run: shows early-training trends only"),
}


def model_config(variant, preset, vocab_size, max_seq_length):
    """The bert_config dict of `variant` at size `preset`."""
    config = dict(
        vocab_size=int(vocab_size), hidden_act="gelu", hidden_dropout_prob=0.1,
        attention_probs_dropout_prob=0.1, max_position_embeddings=max(int(max_seq_length), 16),
        type_vocab_size=2, initializer_range=0.02, use_running_mean=False,
    )
    config.update(MODEL_PRESETS[preset])
    config.update(VARIANTS[variant].config)
    return config


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


def run_name(variant, lr):
    return f"{variant}_lr{format_lr(lr)}"


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

    from realformer_tf.tasks.pretraining import run_pretraining
    from realformer_tf.training import NonFiniteLossError

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
    from realformer_tf.config import BertConfig
    from realformer_tf.data import pretraining as data
    from realformer_tf.data import records
    from realformer_tf.tasks.pretraining import PretrainingTask
    from realformer_tf.training import Trainer, write_results

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
    variant: str
    learning_rate: float
    status: str            # "done", "diverged" or "failed"
    results: dict          # eval_results.txt
    seconds: float         # training + evaluation wall time (all sessions)
    steps: int
    message: str = ""
    reused: bool = False

    @property
    def name(self):
        return run_name(self.variant, self.learning_rate)


class Reproduction:
    """Runs the variants x learning rates grid into `output_dir` and reports on it."""

    def __init__(self, output_dir, variants, learning_rates, budget, train_file, eval_file,
                 vocab_size, seed=1, probe_variants=None, log_fn=print):
        self.output_dir = output_dir
        self.variants = list(variants)
        self.learning_rates = list(learning_rates)
        self.probe_variants = list(self.variants if probe_variants is None else
                                   [v for v in self.variants if v in probe_variants])
        self.budget = budget
        self.train_file = train_file
        self.eval_file = eval_file
        self.vocab_size = vocab_size
        self.seed = seed
        self.log = log_fn
        self.started = None
        self.session_seconds = []  # wall time of the runs executed (not reused) now

    # -- paths -----------------------------------------------------------------------------
    def run_dir(self, variant, lr):
        return os.path.join(self.output_dir, run_name(variant, lr))

    def plan(self):
        """(variant, lr) pairs: every variant at the base lr, then the probe variants at
        each higher lr."""
        plan = [(v, self.learning_rates[0]) for v in self.variants]
        for lr in self.learning_rates[1:]:
            plan += [(v, lr) for v in self.probe_variants]
        return plan

    # -- running ---------------------------------------------------------------------------
    def _train_flags(self, lr, run_dir, config_file):
        b = self.budget
        return dict(
            input_file=self.train_file, output_dir=run_dir, bert_config_file=config_file,
            do_train=True, do_eval=False, train_batch_size=b.train_batch_size,
            max_seq_length=b.max_seq_length, max_predictions_per_seq=b.max_predictions_per_seq,
            num_train_steps=b.num_train_steps, num_warmup_steps=b.num_warmup_steps,
            learning_rate=lr, iterations_per_loop=b.iterations_per_loop,
            save_checkpoints_steps=b.save_checkpoints_steps, seed=self.seed, keep_checkpoint_max=2,
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

    def existing(self, variant, lr):
        """The RunResult of a finished (or diverged) run, else None."""
        run_dir = self.run_dir(variant, lr)
        steps = self.budget.num_train_steps
        seconds = sum(self._timing(run_dir).values())
        diverged = os.path.join(run_dir, "diverged.txt")
        if tf.io.gfile.exists(diverged):
            with tf.io.gfile.GFile(diverged) as f:
                message = f.read().strip()
            match = re.search(r"global step (\d+)", message)
            return RunResult(variant, lr, "diverged", {}, seconds,
                             int(match.group(1)) if match else checkpoint_step(run_dir), message, True)
        results = read_eval_results(os.path.join(run_dir, "eval_results.txt"))
        if results and int(results.get("global_step", -1)) == steps:
            finite = all(math.isfinite(results.get(k, 0.0)) for k in ("loss", "masked_lm_loss"))
            return RunResult(variant, lr, "done" if finite else "diverged", results, seconds, steps,
                             "" if finite else "non-finite evaluation loss", True)
        return None

    def _tag(self, index, total, variant, lr):
        return f"[{index}/{total} {variant} lr={format_lr(lr)}]"

    def _progress(self, tag):
        def on_line(line):
            if line.startswith("step ") or line.startswith("error:"):
                self.log(f"{tag} {line} | total elapsed {format_seconds(time.time() - self.started)}")

        return on_line

    def eta(self, remaining):
        """Seconds for `remaining` runs at the mean wall time of this session's runs."""
        if not self.session_seconds:
            return None
        return remaining * sum(self.session_seconds) / len(self.session_seconds)

    def _failed(self, variant, lr, start, message):
        self.log(f"[{variant} lr={format_lr(lr)}] FAILED: {message}")
        return RunResult(variant, lr, "failed", {}, time.time() - start,
                         checkpoint_step(self.run_dir(variant, lr)), message)

    def run_one(self, index, total, variant, lr):
        tag = self._tag(index, total, variant, lr)
        found = self.existing(variant, lr)
        if found:
            self.log(f"{tag} reusing the finished run ({found.status}) in {self.run_dir(variant, lr)}")
            return found
        run_dir = self.run_dir(variant, lr)
        tf.io.gfile.makedirs(run_dir)
        config_file = os.path.join(run_dir, "experiment_bert_config.json")
        with tf.io.gfile.GFile(config_file, "w") as f:
            json.dump(model_config(variant, self.budget.model, self.vocab_size,
                                   self.budget.max_seq_length), f, indent=2, sort_keys=True)
        log_path = os.path.join(run_dir, "reproduce.log")
        start = time.time()
        steps = self.budget.num_train_steps
        resumed = checkpoint_step(run_dir)
        self.log(f"{tag} {VARIANTS[variant].title}: "
                 + (f"resuming from step {resumed} of " if resumed else "training ")
                 + f"{steps} steps (log: {log_path}) | elapsed {format_seconds(start - self.started)}"
                 f" | ETA {format_seconds(self.eta(total - index + 1))}")
        if resumed < steps or not tf.io.gfile.exists(os.path.join(run_dir, "bert_model.ckpt.index")):
            from realformer_tf.errors import UserError
            from realformer_tf.tasks.pretraining import PretrainingOptions

            options = PretrainingOptions(**self._train_flags(lr, run_dir, config_file))
            try:
                diverged, seconds = train_in_process(options, log_path, self._progress(tag))
            except UserError as e:
                return self._failed(variant, lr, start, f"pretraining: {e} (see {log_path})")
            self._timing(run_dir, {"train_seconds": seconds})
            if diverged:
                with tf.io.gfile.GFile(os.path.join(run_dir, "diverged.txt"), "w") as f:
                    f.write(diverged + "\n")
                self.session_seconds.append(time.time() - start)
                self.log(f"{tag} DIVERGED: {diverged[:100]}")
                return dataclasses.replace(self.existing(variant, lr), reused=False)
        self.log(f"{tag} evaluating on the held-out records")
        eval_start = time.time()
        try:
            import contextlib

            # orbit prints its eval progress; it belongs in the run's log.
            with open(log_path, "a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
                evaluate_run(run_dir, config_file, self.eval_file, self.budget)
        except (RuntimeError, ValueError, tf.errors.OpError) as e:
            return self._failed(variant, lr, start, f"evaluation: {e}")
        finally:
            self._timing(run_dir, {"eval_seconds": time.time() - eval_start})
        self.session_seconds.append(time.time() - start)
        result = self.existing(variant, lr)
        if result is None:
            return self._failed(variant, lr, start, f"the checkpoint evaluated is not at step {steps}")
        result = dataclasses.replace(result, reused=False)
        r = result.results
        self.log(f"{tag} {result.status}: MLM accuracy {r.get('masked_lm_accuracy', float('nan')):.4f}, "
                 f"MLM loss {r.get('masked_lm_loss', float('nan')):.4f}, NSP accuracy "
                 f"{r.get('next_sentence_accuracy', float('nan')):.4f} ({format_seconds(time.time() - start)})")
        return result

    def run_all(self):
        self.started = time.time()
        plan = self.plan()
        return [self.run_one(i + 1, len(plan), v, lr) for i, (v, lr) in enumerate(plan)]

    # -- reporting -------------------------------------------------------------------------
    def learning_curves(self, results, path):
        """Train loss and MLM accuracy vs step, one line per variant, a column per lr."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from realformer_tf.analysis import series_color as _color

        lrs = self.learning_rates
        fig, axes = plt.subplots(2, len(lrs), squeeze=False, figsize=(5.5 * len(lrs), 7), sharex=True)
        for c, lr in enumerate(lrs):
            for r, (tag, ylabel) in enumerate((("loss", "train loss (MLM + NSP)"),
                                               ("masked_lm_accuracy", "train MLM accuracy"))):
                ax = axes[r][c]
                for i, variant in enumerate(self.variants):
                    if (variant, lr) not in self.plan():
                        continue
                    points = read_scalars(os.path.join(self.run_dir(variant, lr), "summaries", "train")).get(tag, [])
                    points = [(s, v) for s, v in points if math.isfinite(v)]
                    result = next((x for x in results if x.variant == variant and x.learning_rate == lr), None)
                    label = VARIANTS[variant].title + (" (diverged)" if result and result.status == "diverged" else "")
                    if points:
                        steps, values = zip(*points)
                        ax.plot(steps, values, marker="." if len(points) < 30 else None, color=_color(i),
                                label=label)
                    else:
                        ax.plot([], [], color=_color(i), label=label + " (no data)")
                ax.grid(alpha=0.3)
                ax.set_ylabel(ylabel)
                values = [y for line in ax.get_lines() for y in line.get_ydata()]
                if tag == "loss" and values and min(values) > 0 and max(values) / min(values) > 100:
                    ax.set_yscale("log")  # a diverging run would flatten the others
                if r == 0:
                    ax.set_title(f"learning rate {format_lr(lr)}")
                else:
                    ax.set_xlabel("step")
        for ax in axes[0]:
            ax.legend(fontsize="small")
        fig.tight_layout()
        import io

        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=110)
        plt.close(fig)
        with tf.io.gfile.GFile(path, "wb") as f:
            f.write(buffer.getvalue())
        return path

    def analyze(self, results, analysis_dir, log_fn=print):
        """Attention analysis of the finished base-learning-rate checkpoints."""
        from realformer_tf import analysis

        lr = self.learning_rates[0]
        chosen = [r for r in results if r.learning_rate == lr and r.status == "done"]
        if not chosen:
            log_fn("attention analysis skipped: no finished run at the base learning rate")
            return []
        checkpoints = [os.path.join(self.run_dir(r.variant, lr), "bert_model.ckpt") for r in chosen]
        b = self.budget

        def dataset_fn():
            return analysis.records_dataset(self.eval_file, b.max_seq_length, 32)

        return analysis.analyze_checkpoints(
            checkpoints, [VARIANTS[r.variant].title for r in chosen], None, dataset_fn,
            b.analysis_examples, analysis_dir, log_fn=log_fn)

    def write_report(self, results, path, curves=None, stats=(), budget_name="", data_note=""):
        b = self.budget
        size = MODEL_PRESETS[b.model]
        lines = [
            "# RealFormer: a small-scale reproduction",
            "",
            f"Budget `{budget_name}` ({b.note}). Model `{b.model}`: {size['num_hidden_layers']} layers, "
            f"hidden {size['hidden_size']}, {size['num_attention_heads']} heads, intermediate "
            f"{size['intermediate_size']}, vocab {self.vocab_size}. Every variant: the same data, "
            f"seed {self.seed}, {b.num_train_steps} steps of batch {b.train_batch_size} (sequence "
            f"length {b.max_seq_length}), {b.num_warmup_steps} warmup steps then linear decay, AdamW.",
            f"Training records: `{self.train_file}`; held-out evaluation: `{self.eval_file}` "
            f"(up to {b.max_eval_steps} batches of {b.eval_batch_size}). {data_note}".rstrip(),
            "",
            "| variant | lr | MLM acc | MLM loss | NSP acc | steps | time |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in results:
            if r.status == "done":
                cells = [f"{r.results.get('masked_lm_accuracy', float('nan')):.4f}",
                         f"{r.results.get('masked_lm_loss', float('nan')):.4f}",
                         f"{r.results.get('next_sentence_accuracy', float('nan')):.4f}"]
            else:
                cells = [r.status, r.status, "-"]
            lines.append(f"| {VARIANTS[r.variant].title} | {format_lr(r.learning_rate)} | "
                         + " | ".join(cells) + f" | {r.steps} | {format_seconds(r.seconds)} |")
        lines += self._stability_lines(results)
        if curves:
            lines += ["", "## Learning curves", "", f"![learning curves]({os.path.basename(curves)})"]
        if stats:
            lines += self._attention_lines(stats)
        failed = [r for r in results if r.status == "failed"]
        if failed:
            lines += ["", "## Failed runs", ""] + [f"- {r.name}: {r.message}" for r in failed]
        lines += ["", f"Written {time.strftime('%Y-%m-%d %H:%M')} by experiments/reproduce.py; rerun "
                  "it with the same flags to resume or reuse these runs.", ""]
        with tf.io.gfile.GFile(path, "w") as f:
            f.write("\n".join(lines))
        return path

    def _stability_lines(self, results):
        if len(self.learning_rates) < 2:
            return []
        low, high = self.learning_rates[0], self.learning_rates[1]
        lines = ["", f"## Learning-rate stability probe (the paper's Table 6: {format_lr(low)} -> "
                 f"{format_lr(high)})", "",
                 f"| variant | MLM acc @ {format_lr(low)} | MLM acc @ {format_lr(high)} | outcome |",
                 "|---|---|---|---|"]
        by_key = {(r.variant, r.learning_rate): r for r in results}

        def cell(r):
            if r is None:
                return "-"
            return f"{r.results['masked_lm_accuracy']:.4f}" if r.status == "done" else r.status

        for variant in self.probe_variants:
            a, b = by_key.get((variant, low)), by_key.get((variant, high))
            if b is not None and b.status == "diverged":
                outcome = "diverged"
            elif a is not None and b is not None and a.status == b.status == "done":
                delta = b.results["masked_lm_accuracy"] - a.results["masked_lm_accuracy"]
                outcome = ("improves" if delta > 0 else "worse" if delta < 0 else "no change") + f" ({delta:+.4f})"
            else:
                outcome = "-"
            lines.append(f"| {VARIANTS[variant].title} | {cell(a)} | {cell(b)} | {outcome} |")
        return lines

    def _attention_lines(self, stats):
        layers = max(s.num_layers for s in stats)
        unit = stats[0].entropy_unit
        lines = ["", "## Attention (base learning rate)", "",
                 f"Per-token attention entropy ({unit}) and JSD (bits) between each head and the same "
                 f"head one layer up, over {stats[0].num_examples} held-out examples (medians, heads "
                 "pooled); see attention_summary.json for quartiles and per-head values.", "",
                 "| variant | " + " | ".join(f"H layer {i}" for i in range(layers)) + " | "
                 + " | ".join(f"JSD {i}-{i + 1}" for i in range(layers - 1)) + " |",
                 "|---|" + "---|" * (2 * layers - 1)]
        import numpy as np

        for s in stats:
            ent = [f"{np.median(s.entropy[i]):.3f}" if i < s.num_layers else "-" for i in range(layers)]
            jsd = [f"{np.median(s.jsd[i]):.3f}" if i < s.num_layers - 1 else "-" for i in range(layers - 1)]
            lines.append(f"| {s.label} | " + " | ".join(ent + jsd) + " |")
        lines += ["", "![entropy](entropy.png)", "", "![JSD](jsd.png)", "",
                  "Per head: [entropy_heads.png](entropy_heads.png), [jsd_heads.png](jsd_heads.png)."]
        return lines
