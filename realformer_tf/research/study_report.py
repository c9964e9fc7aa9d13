"""The report of a reproduction grid (realformer_tf.research.experiments): tables of mean +- std
over seeds, plots, the attention analysis and a verdict for each of the papers' claims,
judged against the seed spread.

A verdict compares two variants' means with Welch's standard error
se = sqrt(s_a^2 / n_a + s_b^2 / n_b) (s: the sample standard deviation over seeds):
"reproduced" when the difference points the way the paper says by more than 2 se, "not
reproduced" when it points the other way by more than 2 se, "inconclusive" otherwise
(or with fewer than 2 seeds a side).
"""

import dataclasses
import io
import json
import math
import os
import time

import numpy as np
import tensorflow as tf

from realformer_tf.research import experiments
from realformer_tf.research.experiments import VARIANTS, format_lr, format_seconds

Z_THRESHOLD = 2.0


# -- numbers ---------------------------------------------------------------------------------

def mean_std(values):
    """(mean, sample std, n) of the finite values; std is nan below 2 values."""
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return float("nan"), float("nan"), 0
    std = float(np.std(values, ddof=1)) if len(values) > 1 else float("nan")
    return float(np.mean(values)), std, len(values)


def _verdict(diff, se, direction):
    """(verdict, diff, se, z) for a difference `diff` with standard error `se`."""
    z = direction * diff / se if se > 0 else math.copysign(math.inf, direction * diff) if diff else 0.0
    verdict = "reproduced" if z > Z_THRESHOLD else "not reproduced" if z < -Z_THRESHOLD else "inconclusive"
    return verdict, diff, se, z


def compare(a, b, direction=1):
    """Verdict that mean(a) - mean(b) has the sign `direction`: (verdict, diff, se, z)."""
    (ma, sa, na), (mb, sb, nb) = mean_std(a), mean_std(b)
    if na < 2 or nb < 2:
        return "inconclusive", ma - mb, float("nan"), float("nan")
    return _verdict(ma - mb, math.sqrt(sa ** 2 / na + sb ** 2 / nb), direction)


def compare_gaps(deep, shallow, direction=1):
    """Verdict that the gap (a - b) is larger at depth than shallow: each argument is the
    pair (a values, b values)."""
    stats = [mean_std(values) for values in (*deep, *shallow)]
    (da, _, _), (db, _, _), (sa, _, _), (sb, _, _) = stats
    diff = (da - db) - (sa - sb)
    if min(n for _, _, n in stats) < 2:
        return "inconclusive", diff, float("nan"), float("nan")
    return _verdict(diff, math.sqrt(sum(s ** 2 / n for _, s, n in stats)), direction)


def plateau_baselines(eval_file, max_seq_length, max_predictions_per_seq):
    """Held-out masked-LM accuracies of two context-free predictors, the plateaus a model
    sits on before it uses context: (unigram: always the most frequent masked token,
    copy + unigram: the input token where the masking left it unchanged, BERT's 10%
    "keep" case plus random replacements that hit the same token, else the most frequent
    one)."""
    from realformer_tf.data import pretraining

    files = pretraining.check_files(eval_file, max_seq_length, max_predictions_per_seq)
    spec = {"input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
            "masked_lm_positions": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
            "masked_lm_ids": tf.io.FixedLenFeature([max_predictions_per_seq], tf.int64),
            "masked_lm_weights": tf.io.FixedLenFeature([max_predictions_per_seq], tf.float32)}
    labels, kept = [], []
    for record in tf.data.TFRecordDataset(files).map(lambda r: tf.io.parse_single_example(r, spec)):
        real = record["masked_lm_weights"].numpy() > 0
        ids = record["masked_lm_ids"].numpy()[real]
        shown = record["input_ids"].numpy()[record["masked_lm_positions"].numpy()[real]]
        labels.append(ids)
        kept.append(shown == ids)
    labels, kept = np.concatenate(labels), np.concatenate(kept)
    if not labels.size:
        return float("nan"), float("nan")
    most_frequent = np.bincount(labels).argmax()
    unigram = labels == most_frequent
    return float(unigram.mean()), float((kept | unigram).mean())


# -- which runs answer which question -------------------------------------------------------------

def depth_results(repro, results, variant, layers):
    b = repro.budget
    return [r for r in results if r.run.variant == variant and r.run.layers == layers
            and r.run.steps == b.num_train_steps and r.run.learning_rate == b.learning_rate]


def sweep_results(repro, results, variant, lr):
    b = repro.budget
    steps = b.sweep_train_steps or b.num_train_steps
    return [r for r in results if r.run.variant == variant and r.run.learning_rate == lr
            and r.run.steps == steps and r.run.layers == b.layer_counts[0]
            and r.run.seed in (b.sweep_seeds or b.seeds)]


def sweep_lrs(budget):
    return (budget.learning_rate,) + tuple(budget.sweep_learning_rates)


def collapsed(result, baseline, margin=0.01):
    """Diverged (NaN) or back at the plateau: held-out accuracy within `margin` of the
    unigram baseline."""
    return result.status == "diverged" or (result.status == "done" and result.accuracy <= baseline + margin)


def max_stable_lr(repro, results, variant, baseline):
    """The largest sweep learning rate at which every seed trained (None: none did)."""
    stable = [lr for lr in sweep_lrs(repro.budget)
              if (runs := sweep_results(repro, results, variant, lr))
              and all(r.status == "done" and not collapsed(r, baseline) for r in runs)]
    return max(stable) if stable else None


def result_dict(result):
    return dict(dataclasses.asdict(result.run), name=result.name, status=result.status,
                results=result.results, seconds=result.seconds, steps_trained=result.steps,
                message=result.message)


# -- tables ----------------------------------------------------------------------------------------

def fmt(mean, std, n, digits=4):
    if not n:
        return "-"
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if n > 1 else f"{mean:.{digits}f}"


def depth_table(repro, results):
    lines = ["| variant | layers | seeds done | held-out MLM accuracy | held-out MLM loss | diverged |",
             "|---|---|---|---|---|---|"]
    for layers in repro.budget.layer_counts:
        for v in repro.variants:
            runs = depth_results(repro, results, v, layers)
            done = [r for r in runs if r.status == "done"]
            acc = mean_std([r.accuracy for r in done])
            loss = mean_std([r.results.get("masked_lm_loss") for r in done])
            diverged = sum(r.status == "diverged" for r in runs)
            lines.append(f"| {VARIANTS[v].title} | {layers} | {len(done)}/{len(runs)} | {fmt(*acc)} | "
                         f"{fmt(*loss)} | {diverged} |")
    return lines


def sweep_table(repro, results, baseline):
    lrs = sweep_lrs(repro.budget)
    lines = ["| variant | " + " | ".join(f"lr {format_lr(lr)}" for lr in lrs) + " | largest stable lr |",
             "|---|" + "---|" * (len(lrs) + 1)]
    for v in repro.probe_variants:
        cells = []
        for lr in lrs:
            runs = sweep_results(repro, results, v, lr)
            bad = sum(collapsed(r, baseline) for r in runs)
            acc = mean_std([r.accuracy for r in runs if r.status == "done"])
            cells.append(f"{fmt(*acc)}" + (f" ({bad}/{len(runs)} diverged)" if bad else "") if runs else "-")
        stable = max_stable_lr(repro, results, v, baseline)
        lines.append(f"| {VARIANTS[v].title} | " + " | ".join(cells) + f" | {format_lr(stable) if stable else 'none'} |")
    return lines


# -- plots -----------------------------------------------------------------------------------------

def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, plt, path):
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=110)
    plt.close(fig)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def plot_depth(repro, results, baselines, path):
    from realformer_tf.research.analysis import series_color

    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    depths = repro.budget.layer_counts
    for i, v in enumerate(repro.variants):
        stats = [mean_std([r.accuracy for r in depth_results(repro, results, v, d) if r.status == "done"])
                 for d in depths]
        offset = (i - len(repro.variants) / 2) * 0.08
        ax.errorbar([d + offset for d in depths], [s[0] for s in stats], yerr=[s[1] if s[2] > 1 else 0 for s in stats],
                    marker="o", capsize=3, color=series_color(i), label=VARIANTS[v].title)
    ax.axhline(baselines[0], color="gray", linestyle=":", label="unigram baseline")
    ax.axhline(baselines[1], color="gray", linestyle="--", label="copy + unigram baseline")
    ax.set_xticks(depths)
    ax.set_xlabel("layers")
    ax.set_ylabel("held-out MLM accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


def plot_sweep(repro, results, baseline, path):
    from realformer_tf.research.analysis import series_color

    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    lrs = sweep_lrs(repro.budget)
    for i, v in enumerate(repro.probe_variants):
        for lr in lrs:
            for r in sweep_results(repro, results, v, lr):
                y = r.accuracy if r.status == "done" else baseline
                ax.scatter([lr * (1 + 0.04 * (i - 2.5))], [y], color=series_color(i),
                           marker="x" if collapsed(r, baseline) else "o", s=25)
        means = [mean_std([r.accuracy for r in sweep_results(repro, results, v, lr) if r.status == "done"])[0]
                 for lr in lrs]
        ax.plot(lrs, means, color=series_color(i), label=VARIANTS[v].title)
    ax.axhline(baseline, color="gray", linestyle=":", label="unigram baseline")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("held-out MLM accuracy (x: diverged)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


def plot_curves(repro, results, path):
    """Training MLM accuracy vs step at the largest depth, mean and range over seeds."""
    from realformer_tf.research.analysis import series_color

    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    layers = repro.budget.layer_counts[-1]
    for i, v in enumerate(repro.variants):
        curves = {}
        for r in depth_results(repro, results, v, layers):
            points = experiments.read_scalars(os.path.join(repro.run_dir(r.run), "summaries", "train"))
            for step, value in points.get("masked_lm_accuracy", []):
                if math.isfinite(value):
                    curves.setdefault(step, []).append(value)
        if curves:
            steps = sorted(curves)
            ax.plot(steps, [np.mean(curves[s]) for s in steps], color=series_color(i), label=VARIANTS[v].title)
            ax.fill_between(steps, [min(curves[s]) for s in steps], [max(curves[s]) for s in steps],
                            color=series_color(i), alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training MLM accuracy, {layers} layers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


# -- attention (the papers' Figures 4-6) ----------------------------------------------------------------

def attention_statistics(repro, results, output_dir, log_fn=print):
    """{run name: AttentionStatistics} of the finished base-lr runs at the largest depth.
    The first seed's runs also get the analysis plots (one line per variant)."""
    from realformer_tf.research import analysis

    b = repro.budget
    layers = b.layer_counts[-1]
    runs = [r for v in repro.variants for r in depth_results(repro, results, v, layers) if r.status == "done"]
    if not runs:
        log_fn("attention analysis skipped: no finished run at the largest depth")
        return {}

    def dataset_fn():
        return analysis.records_dataset(repro.eval_file, b.max_seq_length, 32)

    def checkpoint(r):
        return os.path.join(repro.run_dir(r.run), "bert_model.ckpt")

    first_seed = min(r.run.seed for r in runs)
    plotted = [r for r in runs if r.run.seed == first_seed]
    stats = analysis.analyze_checkpoints([checkpoint(r) for r in plotted],
                                         [VARIANTS[r.run.variant].title for r in plotted], None, dataset_fn,
                                         b.analysis_examples, output_dir, log_fn=log_fn)
    by_name = {r.name: s for r, s in zip(plotted, stats)}
    for r in runs:
        if r.name not in by_name:
            model, _ = analysis.load_model(checkpoint(r))
            by_name[r.name] = analysis.collect_statistics(model, dataset_fn(), b.analysis_examples, label=r.name)
            log_fn(f"attention statistics of {r.name}: {by_name[r.name].num_tokens} tokens")
    return by_name


def attention_summary(stats):
    """(mean entropy over layers, heads and tokens; mean adjacent-layer JSD)."""
    return float(np.mean(stats.entropy)), float(np.mean(stats.jsd)) if stats.jsd.size else float("nan")


def attention_table(repro, results, stats):
    layers = repro.budget.layer_counts[-1]
    unit = next(iter(stats.values())).entropy_unit if stats else "nats"
    lines = [f"| variant ({layers} layers) | attention entropy ({unit}) | adjacent-layer JSD (bits) |",
             "|---|---|---|"]
    for v in repro.variants:
        summaries = [attention_summary(stats[r.name]) for r in depth_results(repro, results, v, layers)
                     if r.name in stats]
        lines.append(f"| {VARIANTS[v].title} | {fmt(*mean_std([s[0] for s in summaries]), digits=3)} | "
                     f"{fmt(*mean_std([s[1] for s in summaries]), digits=4)} |")
    return lines


# -- verdicts ----------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Claim:
    source: str
    text: str
    verdict: str
    evidence: str


def _accuracies(repro, results, variant, layers):
    return [r.accuracy for r in depth_results(repro, results, variant, layers) if r.status == "done"]


def _losses(repro, results, variant, layers):
    return [r.results.get("masked_lm_loss") for r in depth_results(repro, results, variant, layers)
            if r.status == "done"]


def _evidence(diff, se, z, unit=""):
    if not math.isfinite(se):
        return f"difference {diff:+.4f}{unit} (fewer than 2 seeds a side)"
    return f"difference {diff:+.4f}{unit}, se {se:.4f}, z = {z:+.1f}"


def _realformer_claims(repro, results, metric, values, direction):
    """Table 2 of the RealFormer paper in one metric: RealFormer vs Post-LN and Pre-LN at
    every depth, and the Post-LN gap growing with depth."""
    claims = []
    depths = repro.budget.layer_counts
    better = "higher MLM accuracy" if direction > 0 else "lower MLM loss"
    for other in ("post", "pre"):
        for layers in depths:
            verdict, diff, se, z = compare(values(repro, results, "realformer", layers),
                                           values(repro, results, other, layers), direction)
            claims.append(Claim("RealFormer Table 2", f"RealFormer has {better} than {VARIANTS[other].title} "
                                f"at {layers} layers", verdict, _evidence(diff, se, z)))
    if len(depths) > 1:
        gaps = [(values(repro, results, "realformer", d), values(repro, results, "post", d))
                for d in (depths[-1], depths[0])]
        verdict, diff, se, z = compare_gaps(*gaps, direction=direction)
        claims.append(Claim("RealFormer Table 2", f"the RealFormer - Post-LN {metric} gap grows from "
                            f"{depths[0]} to {depths[-1]} layers", verdict, _evidence(diff, se, z)))
    return claims


def accuracy_claims(repro, results):
    claims = (_realformer_claims(repro, results, "accuracy", _accuracies, 1)
              + _realformer_claims(repro, results, "loss", _losses, -1))
    for layers in repro.budget.layer_counts:
        verdict, diff, se, z = compare(_losses(repro, results, "normformer", layers),
                                       _losses(repro, results, "pre", layers), direction=-1)
        claims.append(Claim("NormFormer", f"NormFormer has lower MLM loss than Pre-LN at equal steps "
                            f"({layers} layers)", verdict, _evidence(diff, se, z)))
    return claims


def stability_claims(repro, results, baseline):
    claims = []
    for variant, other, source in (("realformer", "post", "RealFormer Table 6"), ("normformer", "pre", "NormFormer")):
        if not {variant, other} <= set(repro.probe_variants) or not repro.budget.sweep_learning_rates:
            continue
        a, b = (max_stable_lr(repro, results, v, baseline) for v in (variant, other))
        if a == b:
            verdict = "inconclusive"
        else:
            verdict = "reproduced" if (a or 0) > (b or 0) else "not reproduced"
        claims.append(Claim(source, f"{VARIANTS[variant].title} trains at larger learning rates than "
                            f"{VARIANTS[other].title}", verdict,
                            f"largest stable lr {format_lr(a) if a else 'none'} vs {format_lr(b) if b else 'none'} "
                            f"(every sweep seed trained, accuracy above the unigram baseline + 0.01)"))
    return claims


def attention_claims(repro, results, stats):
    layers = repro.budget.layer_counts[-1]

    def values(variant, index):
        return [attention_summary(stats[r.name])[index] for r in depth_results(repro, results, variant, layers)
                if r.name in stats]

    claims = []
    for index, what in ((0, "sparser attention (lower entropy)"), (1, "more similar adjacent layers (lower JSD)")):
        verdict, diff, se, z = compare(values("realformer", index), values("post", index), direction=-1)
        claims.append(Claim("RealFormer Figs 4-6", f"RealFormer has {what} than Post-LN at {layers} layers",
                            verdict, _evidence(diff, se, z)))
    return claims


# -- the whole report ------------------------------------------------------------------------------------

def header_lines(repro, budget_name, data_note, baseline, copy_baseline):
    b = repro.budget
    size = dict(experiments.MODEL_PRESETS[b.model])
    return [
        "# RealFormer and NormFormer at CPU scale: a seeded study",
        "",
        f"Budget `{budget_name}` ({b.note}). Models: hidden {size['hidden_size']}, "
        f"{size['num_attention_heads']} heads, intermediate {size['intermediate_size']}, depths "
        f"{', '.join(map(str, b.layer_counts))}, dropout {b.dropout:g}, vocab {repro.vocab_size}. Every run: "
        f"batch {b.train_batch_size} of sequence length {b.max_seq_length} ({b.max_predictions_per_seq} "
        f"masked predictions each), AdamW, linear warmup then linear decay. Depth comparison: "
        f"{b.num_train_steps} steps ({b.num_warmup_steps} warmup) at lr {format_lr(b.learning_rate)}, seeds "
        f"{', '.join(map(str, b.seeds))}. Learning-rate sweep: {b.layer_counts[0]} layers, "
        f"{b.sweep_train_steps or b.num_train_steps} steps ({b.sweep_warmup_steps or b.num_warmup_steps} "
        f"warmup), seeds {', '.join(map(str, b.sweep_seeds or b.seeds))}. A seed fixes the weights, the "
        f"dropout and the data order.",
        f"Training records: `{repro.train_file}`; held-out: `{repro.eval_file}` (all of it). {data_note}".rstrip(),
        f"Context-free baselines on the held-out set: unigram (always the most frequent masked token) "
        f"{baseline:.4f}; copy + unigram (the input token where masking left it unchanged, else the "
        f"most frequent) {copy_baseline:.4f}. A model above the second uses context.",
        "",
        f"Verdicts compare means over seeds with Welch's standard error: reproduced when the paper's "
        f"direction wins by more than {Z_THRESHOLD:g} se, not reproduced when the opposite does, "
        f"inconclusive otherwise.",
    ]


def write_all(repro, results, budget_name, data_note="", analysis=True, log_fn=print):
    """Writes results.md and its plots into repro.output_dir; returns the report's path."""
    out = repro.output_dir
    b = repro.budget
    baseline, copy_baseline = plateau_baselines(repro.eval_file, b.max_seq_length, b.max_predictions_per_seq)
    plot_depth(repro, results, (baseline, copy_baseline), os.path.join(out, "depth.png"))
    plot_curves(repro, results, os.path.join(out, "learning_curves.png"))
    claims = accuracy_claims(repro, results)
    lines = header_lines(repro, budget_name, data_note, baseline, copy_baseline)
    lines += ["", "## Depth: held-out masked-LM accuracy (mean ± std over seeds)", ""] + depth_table(repro, results)
    lines += ["", "![depth](depth.png)", "", "![learning curves](learning_curves.png)"]
    if b.sweep_learning_rates:
        plot_sweep(repro, results, baseline, os.path.join(out, "sweep.png"))
        claims += stability_claims(repro, results, baseline)
        lines += ["", "## Learning-rate sweep: held-out MLM accuracy (mean ± std over seeds)", ""]
        lines += sweep_table(repro, results, baseline) + ["", "![sweep](sweep.png)"]
    stats = attention_statistics(repro, results, out, log_fn) if analysis else {}
    if stats:
        claims += attention_claims(repro, results, stats)
        lines += ["", "## Attention at the largest depth (mean ± std over seeds)", ""]
        lines += attention_table(repro, results, stats)
        lines += ["", "![entropy](entropy.png)", "", "![JSD](jsd.png)"]
    lines += ["", "## The papers' claims", "", "| source | claim | verdict | evidence |", "|---|---|---|---|"]
    lines += [f"| {c.source} | {c.text} | **{c.verdict}** | {c.evidence} |" for c in claims]
    lines += _run_lines(results)
    with tf.io.gfile.GFile(os.path.join(out, "claims.json"), "w") as f:
        json.dump([dataclasses.asdict(c) for c in claims], f, indent=2)
    path = os.path.join(out, "results.md")
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _run_lines(results):
    lines = ["", "## Every run", "", "| run | status | held-out MLM acc | MLM loss | steps | time |",
             "|---|---|---|---|---|---|"]
    for r in results:
        loss = r.results.get("masked_lm_loss", float("nan"))
        lines.append(f"| {r.name} | {r.status} | {r.accuracy:.4f} | {loss:.4f} | {r.steps} | "
                     f"{format_seconds(r.seconds)} |")
    missing = [r.name for r in results if r.status in ("missing", "failed")]
    if missing:
        lines += ["", f"Not finished: {', '.join(missing)}."]
    lines += ["", f"Written {time.strftime('%Y-%m-%d %H:%M')} by experiments/reproduce.py; the same "
              "command reuses finished runs and resumes the others."]
    return lines
