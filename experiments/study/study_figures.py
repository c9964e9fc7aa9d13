"""The figures of a study report (`experiments.study.study_report`): accuracy by
depth, the learning-rate sweep, learning curves, and the attention analysis of the
deepest runs (the papers' Figures 4-6, `realformer_tf.analysis.analyze`)."""

import io
import json
import math
import os

import numpy as np
import tensorflow as tf

from experiments.study.grid import title
from experiments.study.study_files import read_scalars
from experiments.study.study_stats import collapsed, depth_results, mean_std, sweep_lrs, sweep_results
from realformer_tf.analysis import analyze
from realformer_tf.analysis.attention_plots import series_color
from realformer_tf.analysis.attention_stats import collect_statistics, load_points, save_points, summarize


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
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    depths = repro.budget.layer_counts
    for i, v in enumerate(repro.variants):
        stats = [mean_std([r.accuracy for r in depth_results(repro, results, v, d) if r.status == "done"])
                 for d in depths]
        offset = (i - len(repro.variants) / 2) * 0.08
        ax.errorbar([d + offset for d in depths], [s[0] for s in stats], yerr=[s[1] if s[2] > 1 else 0 for s in stats],
                    marker="o", capsize=3, color=series_color(i), label=title(v))
    ax.axhline(baselines[0], color="gray", linestyle=":", label="unigram baseline")
    ax.axhline(baselines[1], color="gray", linestyle="--", label="copy + unigram baseline")
    ax.set_xticks(depths)
    ax.set_xlabel("layers")
    ax.set_ylabel("held-out MLM accuracy (mean ± std over seeds)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


def plot_sweep(repro, results, baseline, path):
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
        ax.plot(lrs, means, color=series_color(i), label=title(v))
    ax.axhline(baseline, color="gray", linestyle=":", label="unigram baseline")
    ax.set_xscale("log")
    ax.set_xlim(min(lrs) / 1.5, max(lrs) * 1.5)  # also before any sweep run has finished
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("held-out MLM accuracy (x: diverged)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


def plot_curves(repro, results, path):
    """Training MLM accuracy vs step at the largest depth, mean and range over seeds."""
    plt = _figure()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    layers = repro.budget.layer_counts[-1]
    for i, v in enumerate(repro.variants):
        curves = {}
        for r in depth_results(repro, results, v, layers):
            points = read_scalars(os.path.join(repro.run_dir(r.run), "summaries", "train"))
            for step, value in points.get("masked_lm_accuracy", []):
                if math.isfinite(value):
                    curves.setdefault(step, []).append(value)
        if curves:
            steps = sorted(curves)
            ax.plot(steps, [np.mean(curves[s]) for s in steps], color=series_color(i), label=title(v))
            ax.fill_between(steps, [min(curves[s]) for s in steps], [max(curves[s]) for s in steps],
                            color=series_color(i), alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel(f"training MLM accuracy, {layers} layers")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, plt, path)


# -- attention (the papers' Figures 4-6) ----------------------------------------------------------------

ATTENTION_SUMMARY = "attention_summary.json"   # summarize() over every analyzed token
ATTENTION_POINTS = "attention_points.npz"      # a sample of them, for the plots
# The sample's tokens per run (the same in every layer and head): enough for the violins,
# and small enough that the plotted runs' samples fit in the repository's archive.
POINT_TOKENS = 500
# The per-head figures hold a panel per layer and variant: at this resolution two of them
# take about 1 MB for six 12-layer variants (the package's default would take 2 MB).
PER_HEAD_DPI = 60


def analyzed_runs(repro, results):
    """The finished base-lr runs at the largest depth: those the attention section covers."""
    layers = repro.budget.layer_counts[-1]
    return [r for v in repro.variants for r in depth_results(repro, results, v, layers) if r.status == "done"]


def is_analyzed(repro, result):
    return result in analyzed_runs(repro, [result])


def plotted_seed(repro):
    """The seed whose runs the attention plots show, one per variant: the grid's first.
    Only these runs keep a sample of their statistics; the others keep the summary."""
    return min(repro.budget.seeds)


def run_attention(repro, run, log_fn=print):
    """(summary, sampled AttentionStatistics or None) of one run, kept in its folder: read
    from there when an earlier call (or an archived run) left them, else collected from
    the run's bert_model.ckpt on the held-out records and written there. The sample is
    kept for the runs of `plotted_seed` only. None when neither the kept files nor the
    checkpoint exist."""
    run_dir = repro.run_dir(run)
    summary_path, points_path = (os.path.join(run_dir, name) for name in (ATTENTION_SUMMARY, ATTENTION_POINTS))
    sampled = run.seed == plotted_seed(repro)
    checkpoint = os.path.join(run_dir, "bert_model.ckpt")
    kept = tf.io.gfile.exists(summary_path) and (tf.io.gfile.exists(points_path) or not sampled)
    if not kept and tf.io.gfile.exists(checkpoint + ".index"):
        b = repro.budget
        model, _ = analyze.load_model(checkpoint)
        stats = collect_statistics(
            model, analyze.records_dataset(repro.eval_file, b.max_seq_length, 32), b.analysis_examples,
            label=title(run.variant))
        if sampled:
            save_points(points_path, stats, max_tokens=POINT_TOKENS)
        with tf.io.gfile.GFile(summary_path, "w") as f:
            json.dump(summarize(stats), f, indent=2)
        log_fn(f"attention statistics of {run.name}: {stats.num_tokens} tokens")
    if not tf.io.gfile.exists(summary_path):
        return None
    with tf.io.gfile.GFile(summary_path) as f:
        summary = json.load(f)
    return summary, load_points(points_path) if sampled and tf.io.gfile.exists(points_path) else None


def attention_statistics(repro, results, output_dir, log_fn=print):
    """({run name: attention summary} of the analyzed runs (`analyzed_runs`) that have
    their statistics or a checkpoint, whether the plots were written). Writes
    attention_summary.json and the analysis plots of the `plotted_seed` runs (one line
    per variant) to `output_dir`."""
    kept = {}
    for r in analyzed_runs(repro, results):
        found = run_attention(repro, r.run, log_fn)
        if found is None:
            log_fn(f"attention analysis of {r.name} skipped: neither its statistics nor its checkpoint "
                   f"are in {repro.run_dir(r.run)}")
        else:
            kept[r.name] = found
    if not kept:
        log_fn("attention analysis skipped: no analyzed run at the largest depth")
        return {}, False
    summaries = {name: summary for name, (summary, _) in kept.items()}
    plotted = [(summary, stats) for summary, stats in kept.values() if stats is not None]
    if not plotted:
        log_fn(f"attention plots skipped: no analyzed run of seed {plotted_seed(repro)} has its sample")
        return summaries, False
    analyze.write_analysis([stats for _, stats in plotted], [summary for summary, _ in plotted], output_dir,
                           log_fn=log_fn, per_head_dpi=PER_HEAD_DPI)
    return summaries, True
