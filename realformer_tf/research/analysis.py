"""Attention analysis as in the RealFormer paper (§4.1.3, appendix A.4-A.5, Figures 4-6):
the distribution of per-token attention entropies per layer and head, and of the
Jensen-Shannon divergence between each head and the same head one layer up, over
held-out examples.

    stats = analysis.collect_statistics(model, dataset, num_examples=8192, label="RealFormer")
    summary = analysis.summarize(stats)                       # JSON-able
    analysis.plot_entropy([stats_a, stats_b], "entropy.png")  # violins, one per layer
    analysis.plot_jsd([stats_a, stats_b], "jsd.png")

Conventions:
- Entropy is in **nats** (natural log) unless `base` is given (`base=2`: bits). A
  uniform distribution over n real keys has entropy log(n).
- JSD is **base 2**, so it lies in [0, 1] (0: identical, 1: disjoint supports).
- Only real tokens count: padding keys are removed from every distribution (which is
  renormalized over the real keys), and padding queries contribute no data point.
- `BertModel` returns the *carried* scores (RealFormer's running sum, before the mask);
  a layer's attention probabilities are `softmax(scores / (l + 1) + mask_bias)` with the
  running-mean option and `softmax(scores + mask_bias)` otherwise
  (`attention_probabilities`).
"""

import dataclasses
import io
import json

import numpy as np
import tensorflow as tf

from realformer_tf.layers import masking
from realformer_tf.layers import scores as scores_lib

ENTROPY_UNITS = {None: "nats", 2: "bits", 10: "hartleys"}
# Figure 6's colors for a head pair's median JSD: < 0.25, 0.25-0.75, > 0.75.
JSD_BINS = (("#4c72b0", "median JSD < 0.25"),
            ("#e5c34b", "0.25 <= median JSD <= 0.75"),
            ("#c44e52", "median JSD > 0.75"))
# Points fed to each violin's kernel density estimate (the summaries use every point).
MAX_VIOLIN_POINTS = 20000


# -- pure functions ----------------------------------------------------------------------

def _real_key_distribution(probs, key_mask):
    """Zeroes padding keys and renormalizes over the real ones. probs [B, ..., Lq, Lk],
    key_mask [B, Lk] (1 = real)."""
    probs = tf.convert_to_tensor(probs)
    key_mask = tf.cast(key_mask, probs.dtype)
    for _ in range(probs.shape.rank - 2):
        key_mask = tf.expand_dims(key_mask, 1)  # [B, 1..., Lk]
    probs = probs * key_mask
    total = tf.reduce_sum(probs, axis=-1, keepdims=True)
    return probs / tf.maximum(total, tf.cast(1e-30, probs.dtype))


def token_entropy(probs, key_mask, base=None):
    """Entropy of every query's distribution over the real keys: [B, ..., Lq, Lk] ->
    [B, ..., Lq] (padding queries included; see `attention_entropy`)."""
    p = _real_key_distribution(probs, key_mask)
    entropy = -tf.reduce_sum(tf.math.xlogy(p, p), axis=-1)
    if base is not None:
        entropy = entropy / tf.math.log(tf.cast(base, entropy.dtype))
    return tf.maximum(entropy, tf.zeros_like(entropy))


def token_jensen_shannon(p, q, axis=-1):
    """Base-2 JSD along `axis` (tensors of the same shape); safe with zeros."""
    p, q = tf.convert_to_tensor(p), tf.convert_to_tensor(q)
    q = tf.cast(q, p.dtype)
    m = 0.5 * (p + q)
    # KL(p || m) = sum p log p - p log m; xlogy(0, .) = 0 and m > 0 wherever p > 0.
    kl_pm = tf.reduce_sum(tf.math.xlogy(p, p) - tf.math.xlogy(p, m), axis=axis)
    kl_qm = tf.reduce_sum(tf.math.xlogy(q, q) - tf.math.xlogy(q, m), axis=axis)
    jsd = 0.5 * (kl_pm + kl_qm) / tf.math.log(tf.cast(2.0, p.dtype))
    return tf.clip_by_value(jsd, 0.0, 1.0)


def _gather_real_queries(per_query, query_mask):
    """[B, *heads, Lq] -> [*heads, N] keeping the real queries of every example."""
    per_query = np.asarray(per_query)
    query_mask = np.asarray(query_mask).astype(bool)
    return np.moveaxis(per_query, 0, -2)[..., query_mask]


def attention_entropy(probs, mask, base=None):
    """Per-token attention entropy over real tokens only.

    Args:
      probs: attention probabilities [B, Lq, Lk] or [B, heads..., Lq, Lk].
      mask: [B, L] input mask (1 = real token), for the keys and (self-attention) the
        queries.
      base: None for nats (natural log, the default), 2 for bits.
    Returns:
      [heads..., N] float64: one entropy per real query token (N over the whole batch),
      each of the query's distribution restricted to, and renormalized over, the real
      keys. Padding queries are dropped.
    """
    probs = tf.cast(tf.convert_to_tensor(probs), tf.float64)
    return _gather_real_queries(token_entropy(probs, mask, base).numpy(), mask)


def jensen_shannon(p, q, axis=-1):
    """Jensen-Shannon divergence, base 2 (in [0, 1]), of the distributions along `axis`
    of `p` and `q`; symmetric, 0 for identical and 1 for disjoint distributions, safe with
    zero probabilities. Returns a float64 array of the other dims."""
    p = tf.cast(tf.convert_to_tensor(p), tf.float64)
    return token_jensen_shannon(p, tf.cast(q, tf.float64), axis=axis).numpy()


def _layer_probabilities(config, layer_index, scores, input_mask):
    """The softmax the attention layer computed (before dropout), in float32."""
    mask = None
    if input_mask is not None:
        mask = masking.to_attention_mask_4d(tf.cast(input_mask, tf.int32), name="input_mask")
    return scores_lib.attention_probabilities(
        tf.cast(scores, tf.float32), mask, layer_index,
        use_running_mean=config.residual_attention and config.use_running_mean,
    )


def attention_probabilities(config, attention_scores, input_mask=None):
    """Each layer's attention probabilities from `BertModel`'s carried scores.

    Args:
      config: the model's BertConfig (residual_attention, use_running_mean).
      attention_scores: list of [B, heads, L, L] carried scores, one per layer (the
        model output `attention_scores`).
      input_mask: [B, L] (1 = real token) or None.
    Returns:
      list of [B, heads, L, L] float32 numpy arrays: softmax(scores / (l + 1) + bias)
      with the running mean, softmax(scores + bias) without, bias = -10000 at padding
      keys, exactly as the attention layers compute them (before dropout).
    """
    return [_layer_probabilities(config, i, s, input_mask).numpy()
            for i, s in enumerate(attention_scores)]


# -- collection over a data set ------------------------------------------------------------

@dataclasses.dataclass
class AttentionStatistics:
    """Per-token attention statistics of one model.

    entropy: [layers, heads, N] entropies of the N real query tokens.
    jsd: [layers - 1, heads, N]; jsd[l, h] = JSD(layer l head h, layer l+1 head h).
    """

    entropy: np.ndarray
    jsd: np.ndarray
    num_examples: int
    label: str = ""
    description: str = ""
    entropy_unit: str = "nats"

    @property
    def num_layers(self):
        return self.entropy.shape[0]

    @property
    def num_heads(self):
        return self.entropy.shape[1]

    @property
    def num_tokens(self):
        return self.entropy.shape[2]


def _features(batch):
    missing = [k for k in ("input_ids", "input_mask") if k not in batch]
    if missing:
        raise ValueError(f"the dataset's elements lack {', '.join(missing)}; give dicts with "
                         "input_ids, input_mask and optionally segment_ids")
    features = {k: tf.convert_to_tensor(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")
                if k in batch}
    return features


def collect_statistics(model, dataset, num_examples, label="", base=None):
    """Runs `model` (a BertModel, or a model with a `.bert` BertModel) over batches of
    `dataset` (dicts with input_ids, input_mask, optional segment_ids) until
    `num_examples` examples were seen (fewer if the data ends first), in inference mode.

    Returns AttentionStatistics over the real tokens only (see the module docstring).
    """
    bert = getattr(model, "bert", model)
    config = bert.config
    if num_examples <= 0:
        raise ValueError(f"num_examples must be positive, got {num_examples}")

    @tf.function(reduce_retracing=True)
    def batch_statistics(features):
        scores = bert(features, training=False)["attention_scores"]
        mask = features["input_mask"]
        probs = [_layer_probabilities(config, i, s, mask) for i, s in enumerate(scores)]
        entropy = tf.stack([token_entropy(p, mask, base) for p in probs])  # [layers, B, H, L]
        real = [_real_key_distribution(p, mask) for p in probs]
        if len(real) > 1:
            jsd = tf.stack([token_jensen_shannon(a, b) for a, b in zip(real[:-1], real[1:])])
        else:
            jsd = tf.zeros_like(entropy[:0])
        return entropy, jsd

    entropies, divergences, seen = [], [], 0
    for batch in dataset:
        if seen >= num_examples:
            break
        features = _features(batch)
        take = min(num_examples - seen, int(features["input_ids"].shape[0]))
        features = {k: v[:take] for k, v in features.items()}
        entropy, jsd = batch_statistics(features)
        query_mask = features["input_mask"].numpy().astype(bool)
        # [layers, B, H, L] -> [layers, H, N_batch]
        entropies.append(np.moveaxis(entropy.numpy(), 1, -2)[..., query_mask].astype(np.float32))
        divergences.append(np.moveaxis(jsd.numpy(), 1, -2)[..., query_mask].astype(np.float32))
        seen += take
    if not seen:
        from realformer_tf.data.records import InputError

        raise InputError("the input yielded no examples to analyze")
    unit = ENTROPY_UNITS.get(base, f"log base {base}")
    return AttentionStatistics(
        entropy=np.concatenate(entropies, axis=-1), jsd=np.concatenate(divergences, axis=-1),
        num_examples=seen, label=label or config.describe().split(":")[0],
        description=config.describe(), entropy_unit=unit,
    )


# -- summaries -------------------------------------------------------------------------------

def _describe(values):
    values = np.asarray(values, np.float64).ravel()
    if values.size == 0:
        return {"count": 0, "mean": None, "median": None, "q1": None, "q3": None,
                "min": None, "max": None}
    q1, median, q3 = np.percentile(values, [25, 50, 75])
    return {"count": int(values.size), "mean": float(values.mean()), "median": float(median),
            "q1": float(q1), "q3": float(q3), "min": float(values.min()), "max": float(values.max())}


def summarize(stats):
    """AttentionStatistics -> JSON-able dict: for entropy (per layer) and JSD (per pair of
    adjacent layers) the mean, median, quartiles, min and max with heads pooled
    (`per_layer`) and for every head (`per_head[layer][head]`)."""
    def section(values, layer_name):
        return {
            "per_layer": [dict(_describe(v), **{layer_name: i}) for i, v in enumerate(values)],
            "per_head": [[dict(_describe(h), head=j) for j, h in enumerate(v)] for v in values],
        }

    return {
        "label": stats.label,
        "description": stats.description,
        "num_examples": int(stats.num_examples),
        "num_tokens": int(stats.num_tokens),
        "num_layers": int(stats.num_layers),
        "num_heads": int(stats.num_heads),
        "entropy_unit": stats.entropy_unit,
        "jsd_unit": "bits (base 2, in [0, 1]); pair l compares layer l with layer l+1, same head",
        "entropy": section(stats.entropy, "layer"),
        "jsd": section(stats.jsd, "layers"),
    }


def write_summary(path, summaries):
    """Writes {"checkpoints": [summary, ...]} as JSON (through tf.io.gfile)."""
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump({"checkpoints": list(summaries)}, f, indent=2)
    return path


# -- plots ------------------------------------------------------------------------------------

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


def _save(fig, path):
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def _pooled_plot(statistics, field, path, ylabel, title, xlabel, tick_labels):
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
    return _save(fig, path)


def jsd_bin_color(median):
    """Figure 6's color of a head pair with this median JSD."""
    if median < 0.25:
        return JSD_BINS[0][0]
    return JSD_BINS[1][0] if median <= 0.75 else JSD_BINS[2][0]


def _per_head_plot(statistics, field, path, ylabel, title, panel_title, jsd_colors,
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
        return _save(fig, path)
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
    return _save(fig, path)


def _counts(stats):
    stats = _as_list(stats)
    return f"{stats[0].num_examples} held-out examples" if stats else ""


def plot_entropy(statistics, path, per_head=False):
    """Violin plots of the per-token attention entropies (the paper's Figures 4-5).

    `statistics`: one AttentionStatistics or a list (several checkpoints, side by side,
    with a legend of their labels). Pooled (default): one violin per layer per
    checkpoint, heads pooled. `per_head`: a panel per layer (columns) and checkpoint
    (rows), one violin per head ordered by median. Writes a PNG to `path`."""
    stats = _as_list(statistics)
    unit = stats[0].entropy_unit if stats else "nats"
    title = f"Attention entropy per token ({_counts(stats)})"
    if per_head:
        return _per_head_plot(stats, "entropy", path, f"entropy ({unit})", title,
                              lambda l: f"layer {l}", jsd_colors=False)
    return _pooled_plot(stats, "entropy", path, f"entropy ({unit})", title, "layer",
                        lambda n: [str(i) for i in range(n)])


def plot_jsd(statistics, path, per_head=False):
    """Violin plots of the per-token JSD between each head and the same head one layer up
    (the paper's Figure 6). Pooled (default): one violin per adjacent-layer pair per
    checkpoint. `per_head`: a panel per layer pair and checkpoint, one violin per head,
    colored by median as in the paper (blue < 0.25 <= yellow <= 0.75 < red)."""
    stats = _as_list(statistics)
    title = f"JSD between same heads of adjacent layers ({_counts(stats)})"
    if per_head:
        return _per_head_plot(stats, "jsd", path, "JSD (bits)", title,
                              lambda l: f"layers {l}-{l + 1}", jsd_colors=True)
    return _pooled_plot(stats, "jsd", path, "JSD (bits)", title, "layer pair",
                        lambda n: [f"{i}-{i + 1}" for i in range(n)])


# -- models and inputs -----------------------------------------------------------------------

def find_config(checkpoint_prefix):
    """bert_config.json beside the checkpoint (or in its directory)."""
    import os

    return os.path.join(os.path.dirname(checkpoint_prefix), "bert_config.json")


def resolve(checkpoint):
    """A checkpoint prefix, or a directory: its latest training checkpoint, else the
    bert_model.ckpt in it (a downloaded BERT / RealFormer model directory)."""
    import os

    from realformer_tf.checkpoints import tf_checkpoint as ckpt

    if tf.io.gfile.isdir(checkpoint) and tf.train.latest_checkpoint(checkpoint) is None:
        exported = os.path.join(checkpoint, "bert_model.ckpt")
        if tf.io.gfile.exists(exported + ".index"):
            return exported
        raise ckpt.CheckpointError(f"{checkpoint} is a directory without a checkpoint (no "
                                   "'checkpoint' index and no bert_model.ckpt)")
    return ckpt.resolve_checkpoint(checkpoint)


def load_model(checkpoint, config_file=None):
    """Builds a BertModel from `config_file` (default: bert_config.json beside the
    checkpoint) and loads an original-named checkpoint or one of our training
    checkpoints (a prefix or a directory). Returns (model, resolved prefix)."""
    from realformer_tf.models.bert.model import BertConfig, BertModel

    prefix = resolve(checkpoint)
    config_file = config_file or find_config(prefix)
    config = BertConfig.from_json_file(config_file)
    model = BertModel(config)
    model.load_bert_checkpoint(prefix)
    return model, prefix


def records_dataset(input_file, max_seq_length, batch_size):
    """Batches of {input_ids, input_mask, segment_ids} from pretraining (or any) TFRecords
    with those features, in file order, once."""
    from realformer_tf.data import records

    files = records.expand_input_files(input_file)
    records.check_record_lengths(files[0], {"input_ids": max_seq_length, "input_mask": max_seq_length})
    spec = {k: tf.io.FixedLenFeature([max_seq_length], tf.int64)
            for k in ("input_ids", "input_mask", "segment_ids")}
    d = tf.data.TFRecordDataset(files)
    d = d.map(lambda r: records.decode_record(r, spec), num_parallel_calls=tf.data.AUTOTUNE)
    return d.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def text_examples(text_file, vocab_file, max_seq_length, do_lower_case=True, max_examples=None):
    """Raw text, one sentence (or passage) per non-empty line -> numpy features:
    "[CLS] tokens [SEP]" (Model Garden's FullTokenizer, truncated to fit), padded with
    zeros to `max_seq_length`. Returns {input_ids, input_mask, segment_ids} [N, L]."""
    from official.nlp.tools import tokenization

    from realformer_tf.data.records import InputError
    from realformer_tf.data.vocab import check_vocab

    check_vocab(vocab_file)
    if not tf.io.gfile.exists(text_file):
        raise InputError(f"--text_file {text_file} does not exist")
    if max_seq_length < 3:
        raise InputError(f"max_seq_length must be at least 3, got {max_seq_length}")
    tokenizer = tokenization.FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case)
    rows = []
    with tf.io.gfile.GFile(text_file, "r") as f:
        for line in f:
            if max_examples is not None and len(rows) >= max_examples:
                break
            tokens = tokenizer.tokenize(tokenization.convert_to_unicode(line.strip()))
            if not tokens:
                continue
            tokens = ["[CLS]"] + tokens[:max_seq_length - 2] + ["[SEP]"]
            rows.append(tokenizer.convert_tokens_to_ids(tokens))
    if not rows:
        raise InputError(f"--text_file {text_file} holds no text")
    ids = np.zeros([len(rows), max_seq_length], np.int32)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


def text_dataset(text_file, vocab_file, max_seq_length, batch_size, do_lower_case=True,
                 max_examples=None):
    examples = text_examples(text_file, vocab_file, max_seq_length, do_lower_case, max_examples)
    return tf.data.Dataset.from_tensor_slices(examples).batch(batch_size)


def analyze_checkpoints(checkpoints, labels, config_files, dataset_fn, num_examples, output_dir,
                        per_head_plots=True, log_fn=print):
    """Loads each checkpoint, collects its statistics over `dataset_fn()` and writes
    attention_summary.json, entropy.png and jsd.png (plus entropy_heads.png and
    jsd_heads.png with `per_head_plots`) to `output_dir`. Returns the statistics."""
    import os
    import time

    tf.io.gfile.makedirs(output_dir)
    config_files = list(config_files or [None] * len(checkpoints))
    all_stats = []
    for i, (checkpoint, label, config_file) in enumerate(zip(checkpoints, labels, config_files)):
        start = time.time()
        model, prefix = load_model(checkpoint, config_file)
        stats = collect_statistics(model, dataset_fn(), num_examples, label=label)
        all_stats.append(stats)
        log_fn(f"[{i + 1}/{len(checkpoints)}] {label}: {stats.description}; {prefix}; "
               f"{stats.num_examples} examples, {stats.num_tokens} tokens ({time.time() - start:.0f}s)")
    written = {
        "summary": write_summary(os.path.join(output_dir, "attention_summary.json"),
                                 [summarize(s) for s in all_stats]),
        "entropy": plot_entropy(all_stats, os.path.join(output_dir, "entropy.png")),
        "jsd": plot_jsd(all_stats, os.path.join(output_dir, "jsd.png")),
    }
    if per_head_plots:
        written["entropy_heads"] = plot_entropy(all_stats, os.path.join(output_dir, "entropy_heads.png"),
                                                per_head=True)
        written["jsd_heads"] = plot_jsd(all_stats, os.path.join(output_dir, "jsd_heads.png"), per_head=True)
    for path in written.values():
        log_fn(f"wrote {path}")
    return all_stats
