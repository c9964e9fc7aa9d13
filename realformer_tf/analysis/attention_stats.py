"""Attention statistics as in the RealFormer paper (§4.1.3, appendix A.4-A.5, Figures 4-6):
the distribution of per-token attention entropies per layer and head, and of the
Jensen-Shannon divergence between each head and the same head one layer up, over
held-out examples.

    stats = attention_stats.collect_statistics(model, dataset, num_examples=8192, label="RealFormer")
    summary = attention_stats.summarize(stats)                # JSON-able
    attention_stats.save_points("run/attention_points.npz", stats)  # a sample, for plots

The plots are in `realformer_tf.analysis.attention_plots`; loading checkpoints and
inputs, and the whole analysis of several checkpoints, in `realformer_tf.analysis.analyze`.

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

from realformer_tf.errors import InputError
from realformer_tf.layers import masking
from realformer_tf.layers import scores as scores_lib

ENTROPY_UNITS = {None: "nats", 2: "bits", 10: "hartleys"}


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
        use_running_mean=config.uses_residual_attention and config.use_running_mean,
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


# -- a run's statistics kept on disk ---------------------------------------------------------

def thin(stats, max_tokens, seed=0):
    """`stats` with at most `max_tokens` query tokens, the same ones in every layer and head
    (drawn at random with `seed`, kept in their order): enough points for the plots."""
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if stats.num_tokens <= max_tokens:
        return stats
    keep = np.sort(np.random.default_rng(seed).choice(stats.num_tokens, max_tokens, replace=False))
    return dataclasses.replace(stats, entropy=stats.entropy[..., keep], jsd=stats.jsd[..., keep])


def save_points(path, stats, max_tokens=2000):
    """Writes `thin(stats, max_tokens)` to `path` (compressed .npz, values in float16),
    for the plots. Exact numbers come from `summarize(stats)`, kept beside it."""
    small = thin(stats, max_tokens)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, entropy=small.entropy.astype(np.float16), jsd=small.jsd.astype(np.float16),
                        meta=np.array(json.dumps({"num_examples": int(stats.num_examples), "label": stats.label,
                                                  "description": stats.description,
                                                  "entropy_unit": stats.entropy_unit})))
    with tf.io.gfile.GFile(path, "wb") as f:
        f.write(buffer.getvalue())
    return path


def load_points(path):
    """The AttentionStatistics `save_points` wrote (float32 again)."""
    with tf.io.gfile.GFile(path, "rb") as f:
        data = np.load(io.BytesIO(f.read()))
        meta = json.loads(str(data["meta"]))
        return AttentionStatistics(entropy=data["entropy"].astype(np.float32),
                                   jsd=data["jsd"].astype(np.float32), **meta)
