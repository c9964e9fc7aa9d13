"""Violin plots of attention statistics (`realformer_tf.analysis.attention_stats`), as
the RealFormer paper's Figures 4-6: entropy per layer (or per head), and the JSD between
each head and the same head one layer up.

    attention_plots.plot_entropy([stats_a, stats_b], "entropy.png")  # violins, one per layer
    attention_plots.plot_jsd([stats_a, stats_b], "jsd.png", per_head=True)
"""

import io

import numpy as np
import tensorflow as tf

from realformer_tf.analysis.attention_stats import AttentionStatistics

# Figure 6's colors for a head pair's median JSD: < 0.25, 0.25-0.75, > 0.75.
JSD_BINS = (("#4c72b0", "median JSD < 0.25"),
            ("#e5c34b", "0.25 <= median JSD <= 0.75"),
            ("#c44e52", "median JSD > 0.75"))
# Points fed to each violin's kernel density estimate (the summaries use every point).
MAX_VIOLIN_POINTS = 20000
# Pixels per inch of the PNGs. A per-head figure has a panel per layer and checkpoint, so
# at this resolution it takes about 1 MB for six 12-layer checkpoints; pass a lower `dpi`
# where the files are kept (a study's report in git).
DPI = 110


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _as_list(statistics):
    return [statistics] if isinstance(statistics, AttentionStatistics) else list(statistics)


def _subsample(values, limit=MAX_VIOLIN_POINTS, seed=0):
    values = np.asarray(values, np.float64).ravel()
    values = values[np.isfinite(values)]
    if values.size > limit:
        values = np.random.default_rng(seed).choice(values, size=limit, replace=False)
    if values.size == 0:
        values = np.zeros([1])
    if np.ptp(values) == 0:
        # gaussian_kde fails on a constant sample; a negligible jitter draws it flat.
        values = values + np.linspace(-1e-6, 1e-6, values.size)
    return values


def series_color(i):
    """The i-th color of the plots' palette."""
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
               "#da8bc3", "#8c8c8c", "#ccb974", "#64b5cd")
    return palette[i % len(palette)]


def _violins(ax, data, positions, width, facecolors):
    parts = ax.violinplot([_subsample(d) for d in data], positions=positions, widths=width,
                          showmedians=True, showextrema=False)
    for body, color in zip(parts["bodies"], facecolors):
        body.set_facecolor(color)
        body.set_edgecolor("black")
        body.set_linewidth(0.5)
        body.set_alpha(0.8)
    parts["cmedians"].set_color("black")
    parts["cmedians"].set_linewidth(0.8)


def _save(fig, path, dpi):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    _pyplot().close(fig)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def _pooled_plot(statistics, field, path, ylabel, title, xlabel, tick_labels, dpi):
    plt = _pyplot()
    from matplotlib.patches import Patch

    stats = _as_list(statistics)
    n_groups = max(getattr(s, field).shape[0] for s in stats)
    width = 0.8 / len(stats)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * n_groups * max(1, len(stats)) ** 0.5 + 2), 4.2))
    for c, s in enumerate(stats):
        values = getattr(s, field)
        if values.shape[0] == 0:
            continue
        positions = np.arange(values.shape[0]) - 0.4 + width * (c + 0.5)
        _violins(ax, [v.ravel() for v in values], positions, width * 0.9, [series_color(c)] * values.shape[0])
    ax.set_xticks(np.arange(n_groups))
    ax.set_xticklabels(tick_labels(n_groups))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(handles=[Patch(facecolor=series_color(c), edgecolor="black", label=s.label or f"model {c}")
                       for c, s in enumerate(stats)], loc="best", fontsize="small")
    return _save(fig, path, dpi)


def jsd_bin_color(median):
    """Figure 6's color of a head pair with this median JSD."""
    if median < 0.25:
        return JSD_BINS[0][0]
    return JSD_BINS[1][0] if median <= 0.75 else JSD_BINS[2][0]


def _per_head_plot(statistics, field, path, ylabel, title, panel_title, jsd_colors, dpi,
                   max_columns=4):
    """A panel per layer (or layer pair), at most `max_columns` to a row, one block of
    rows per checkpoint; in each panel one violin per head, heads ordered by median (as
    in the paper's figures)."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    stats = _as_list(statistics)
    n_panels = max(getattr(s, field).shape[0] for s in stats)
    if n_panels == 0:
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.text(0.5, 0.5, "nothing to plot (one layer)", ha="center", va="center")
        ax.set_axis_off()
        return _save(fig, path, dpi)
    n_cols = min(n_panels, max_columns)
    rows_per_model = -(-n_panels // n_cols)
    n_heads = max(s.num_heads for s in stats)
    fig, axes = plt.subplots(len(stats) * rows_per_model, n_cols, squeeze=False, sharey=True,
                             figsize=(max(3.0, 0.3 * n_heads + 1.2) * n_cols,
                                      2.4 * len(stats) * rows_per_model + 0.8))
    for r, s in enumerate(stats):
        values = getattr(s, field)
        for l in range(rows_per_model * n_cols):
            ax = axes[r * rows_per_model + l // n_cols][l % n_cols]
            if l >= values.shape[0]:
                ax.set_axis_off()
                continue
            heads = sorted(values[l], key=lambda v: float(np.median(v)) if v.size else 0.0)
            medians = [float(np.median(v)) if v.size else 0.0 for v in heads]
            colors = ([jsd_bin_color(m) for m in medians] if jsd_colors
                      else [series_color(r)] * len(heads))
            _violins(ax, heads, np.arange(len(heads)), 0.8, colors)
            ax.set_xticks([])
            ax.grid(axis="y", alpha=0.3)
            ax.set_title(f"{s.label}: {panel_title(l)}" if len(stats) > 1 else panel_title(l),
                         fontsize="small")
            if l % n_cols == 0:
                ax.set_ylabel(ylabel, fontsize="small")
    handles = ([Patch(facecolor=color, edgecolor="black", label=name) for color, name in JSD_BINS]
               if jsd_colors else
               [Patch(facecolor=series_color(r), edgecolor="black", label=s.label) for r, s in enumerate(stats)])
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 6), fontsize="small",
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title + "; heads ordered by median")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return _save(fig, path, dpi)


def _counts(stats):
    stats = _as_list(stats)
    return f"{stats[0].num_examples} held-out examples" if stats else ""


def plot_entropy(statistics, path, per_head=False, dpi=DPI):
    """Violin plots of the per-token attention entropies (the paper's Figures 4-5).

    `statistics`: one AttentionStatistics or a list (several checkpoints, side by side,
    with a legend of their labels). Pooled (default): one violin per layer per
    checkpoint, heads pooled. `per_head`: a panel per layer (columns) and checkpoint
    (rows), one violin per head ordered by median. Writes a PNG of `dpi` to `path`."""
    stats = _as_list(statistics)
    unit = stats[0].entropy_unit if stats else "nats"
    title = f"Attention entropy per token ({_counts(stats)})"
    if per_head:
        return _per_head_plot(stats, "entropy", path, f"entropy ({unit})", title,
                              lambda l: f"layer {l}", jsd_colors=False, dpi=dpi)
    return _pooled_plot(stats, "entropy", path, f"entropy ({unit})", title, "layer",
                        lambda n: [str(i) for i in range(n)], dpi)


def plot_jsd(statistics, path, per_head=False, dpi=DPI):
    """Violin plots of the per-token JSD between each head and the same head one layer up
    (the paper's Figure 6). Pooled (default): one violin per adjacent-layer pair per
    checkpoint. `per_head`: a panel per layer pair and checkpoint, one violin per head,
    colored by median as in the paper (blue < 0.25 <= yellow <= 0.75 < red)."""
    stats = _as_list(statistics)
    title = f"JSD between same heads of adjacent layers ({_counts(stats)})"
    if per_head:
        return _per_head_plot(stats, "jsd", path, "JSD (bits)", title,
                              lambda l: f"layers {l}-{l + 1}", jsd_colors=True, dpi=dpi)
    return _pooled_plot(stats, "jsd", path, "JSD (bits)", title, "layer pair",
                        lambda n: [f"{i}-{i + 1}" for i in range(n)], dpi)
