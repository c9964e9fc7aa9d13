"""The numbers of a study report (`experiments.study.study_report`): mean +- std
over seeds, Welch's comparison of two variants, the context-free accuracy baselines, and
which runs of the grid answer which question.

A verdict compares two variants' means with Welch's standard error
se = sqrt(s_a^2 / n_a + s_b^2 / n_b) (s: the sample standard deviation over seeds):
"reproduced" when the difference points the way the paper says by more than 2 se, "not
reproduced" when it points the other way by more than 2 se, "inconclusive" otherwise
(or with fewer than 2 seeds a side).
"""

import dataclasses
import math

import numpy as np
import tensorflow as tf

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

    files = pretraining.check_files(eval_file, max_seq_length, max_predictions_per_seq, log=print)
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
    """The finished sweep runs of `variant` at `lr` (trained or diverged): a run not
    finished yet, or one that crashed, says nothing about stability."""
    b = repro.budget
    steps = b.sweep_train_steps or b.num_train_steps
    return [r for r in results if r.run.variant == variant and r.run.learning_rate == lr
            and r.run.steps == steps and r.run.layers == b.layer_counts[0]
            and r.run.seed in (b.sweep_seeds or b.seeds) and r.finished]


def sweep_lrs(budget):
    """The sweep's learning rates in increasing order (the base rate among them)."""
    return tuple(sorted({budget.learning_rate, *budget.sweep_learning_rates}))


def collapsed(result, baseline, margin=0.01):
    """Diverged (NaN) or back at the plateau: held-out accuracy within `margin` of the
    unigram baseline."""
    return result.status == "diverged" or (result.status == "done" and result.accuracy <= baseline + margin)


def max_stable_lr(repro, results, variant, baseline):
    """The largest sweep learning rate at which every finished seed trained (None: none did)."""
    stable = [lr for lr in sweep_lrs(repro.budget)
              if (runs := sweep_results(repro, results, variant, lr))
              and all(r.status == "done" and not collapsed(r, baseline) for r in runs)]
    return max(stable) if stable else None


def result_dict(result):
    return dict(dataclasses.asdict(result.run), name=result.name, status=result.status,
                results=result.results, seconds=result.seconds, steps_trained=result.steps,
                message=result.message)


def attention_summary(summary):
    """(mean entropy over layers, heads and tokens; mean adjacent-layer JSD) of an
    `attention_stats.summarize` dict: every layer holds the same tokens, so the mean of
    the per-layer means is the mean over all."""
    def mean(section):
        means = [layer["mean"] for layer in summary[section]["per_layer"]]
        return float(np.mean(means)) if means else float("nan")

    return mean("entropy"), mean("jsd")


# -- where a run's time went -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Pause:
    """A stretch of a training session in which no step was logged: from `start` (the
    wall time of the step logged before it) for `seconds`."""

    start: float
    seconds: float

    def overlaps(self, other):
        return self.start < other.start + other.seconds and other.start < self.start + self.seconds


def pauses(step_times, factor=10.0, floor_seconds=60.0):
    """The pauses of one training session, given its [(wall time, step), ...] in order:
    gaps between logged steps longer than `floor_seconds` and `factor` times the
    session's median gap. Steps are logged at a fixed interval, so such a gap is time in
    which the run did not train (its process held up), not a slower model."""
    gaps = [(a[0], b[0] - a[0]) for a, b in zip(step_times, step_times[1:])]
    if not gaps:
        return []
    usual = float(np.median([g for _, g in gaps]))
    return [Pause(start, gap) for start, gap in gaps if gap > max(floor_seconds, factor * usual)]


def usual_seconds_per_step(step_times):
    """The median wall time per step of one session ([(wall time, step), ...]; nan if unknown)."""
    rates = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(step_times, step_times[1:]) if b[1] > a[1]]
    return float(np.median(rates)) if rates else float("nan")
