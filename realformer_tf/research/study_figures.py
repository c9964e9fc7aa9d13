"""The figures of a study report (`realformer_tf.research.study_report`): accuracy by
depth, the learning-rate sweep, learning curves, and the attention analysis of the
deepest runs (the papers' Figures 4-6, `realformer_tf.research.analysis`)."""

import io
import math
import os

import numpy as np
import tensorflow as tf

from realformer_tf.research import analysis
from realformer_tf.research.attention_plots import series_color
from realformer_tf.research.grid import title
from realformer_tf.research.study_files import read_scalars
from realformer_tf.research.study_stats import collapsed, depth_results, mean_std, sweep_lrs, sweep_results


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

def attention_statistics(repro, results, output_dir, log_fn=print):
    """{run name: AttentionStatistics} of the finished base-lr runs at the largest depth.
    The first seed's runs also get the analysis plots (one line per variant)."""
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
                                         [title(r.run.variant) for r in plotted], None, dataset_fn,
                                         b.analysis_examples, output_dir, log_fn=log_fn)
    by_name = {r.name: s for r, s in zip(plotted, stats)}
    for r in runs:
        if r.name not in by_name:
            model, _ = analysis.load_model(checkpoint(r))
            by_name[r.name] = analysis.collect_statistics(model, dataset_fn(), b.analysis_examples, label=r.name)
            log_fn(f"attention statistics of {r.name}: {by_name[r.name].num_tokens} tokens")
    return by_name
