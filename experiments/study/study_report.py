"""The report of a reproduction grid (experiments.study.grid): tables of mean +- std
over seeds, plots, the attention analysis and a verdict for each of the papers' claims,
judged against the seed spread.

A verdict compares two variants' means with Welch's standard error
se = sqrt(s_a^2 / n_a + s_b^2 / n_b) (s: the sample standard deviation over seeds):
"reproduced" when the difference points the way the paper says by more than 2 se, "not
reproduced" when it points the other way by more than 2 se, "inconclusive" otherwise
(or with fewer than 2 seeds a side).

The numbers are in `experiments.study.study_stats`, the figures in
`experiments.study.study_figures`.
"""

import dataclasses
import json
import math
import os
import time

import tensorflow as tf

from experiments.study.grid import MODEL_PRESETS, format_lr, format_seconds, title
from experiments.study.study_files import last_session_step_times
from experiments.study.study_figures import attention_statistics, plot_curves, plot_depth, plot_sweep
from experiments.study.study_stats import (
    Z_THRESHOLD, attention_summary, collapsed, compare, compare_gaps, depth_results, max_stable_lr,
    mean_std, pauses, sweep_lrs, sweep_results, usual_seconds_per_step)

# The widths of the RealFormer paper's models (BERT-Small to BERT-xLarge: hidden 512 to
# 1,536), against which the report puts the study's width in scale.
PAPER_HIDDEN_SIZES = (512, 1536)


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
            lines.append(f"| {title(v)} | {layers} | {len(done)}/{len(runs)} | {fmt(*acc)} | "
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
        lines.append(f"| {title(v)} | " + " | ".join(cells) + f" | {format_lr(stable) if stable else 'none'} |")
    return lines


def attention_table(repro, results, stats):
    layers = repro.budget.layer_counts[-1]
    unit = next(iter(stats.values()))["entropy_unit"] if stats else "nats"
    lines = [f"| variant ({layers} layers) | attention entropy ({unit}) | adjacent-layer JSD (bits) |",
             "|---|---|---|"]
    for v in repro.variants:
        summaries = [attention_summary(stats[r.name]) for r in depth_results(repro, results, v, layers)
                     if r.name in stats]
        lines.append(f"| {title(v)} | {fmt(*mean_std([s[0] for s in summaries]), digits=3)} | "
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
    for other in ("bert", "pre_ln"):
        for layers in depths:
            verdict, diff, se, z = compare(values(repro, results, "realformer", layers),
                                           values(repro, results, other, layers), direction)
            claims.append(Claim("RealFormer Table 2", f"RealFormer has {better} than {title(other)} "
                                f"at {layers} layers", verdict, _evidence(diff, se, z)))
    if len(depths) > 1:
        gaps = [(values(repro, results, "realformer", d), values(repro, results, "bert", d))
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
                                       _losses(repro, results, "pre_ln", layers), direction=-1)
        claims.append(Claim("NormFormer", f"NormFormer has lower MLM loss than Pre-LN at equal steps "
                            f"({layers} layers)", verdict, _evidence(diff, se, z)))
    return claims


def stability_claims(repro, results, baseline):
    claims = []
    for variant, other, source in (("realformer", "bert", "RealFormer Table 6"), ("normformer", "pre_ln", "NormFormer")):
        if not {variant, other} <= set(repro.probe_variants) or not repro.budget.sweep_learning_rates:
            continue
        a, b = (max_stable_lr(repro, results, v, baseline) for v in (variant, other))
        if a == b:
            verdict = "inconclusive"
        else:
            verdict = "reproduced" if (a or 0) > (b or 0) else "not reproduced"
        claims.append(Claim(source, f"{title(variant)} trains at larger learning rates than "
                            f"{title(other)}", verdict,
                            f"largest stable lr {format_lr(a) if a else 'none'} vs {format_lr(b) if b else 'none'} "
                            f"(every finished sweep seed trained, accuracy above the unigram baseline + 0.01)"))
    return claims


def attention_claims(repro, results, stats):
    layers = repro.budget.layer_counts[-1]

    def values(variant, index):
        return [attention_summary(stats[r.name])[index] for r in depth_results(repro, results, variant, layers)
                if r.name in stats]

    claims = []
    for index, what in ((0, "sparser attention (lower entropy)"), (1, "more similar adjacent layers (lower JSD)")):
        verdict, diff, se, z = compare(values("realformer", index), values("bert", index), direction=-1)
        claims.append(Claim("RealFormer Figs 4-6", f"RealFormer has {what} than Post-LN at {layers} layers",
                            verdict, _evidence(diff, se, z)))
    return claims


# -- the whole report ------------------------------------------------------------------------------------

def header_lines(repro, budget_name, data):
    """The report's opening: the grid, the data (`data`: a study_files.StudyData) and
    the two baselines."""
    b = repro.budget
    size = dict(MODEL_PRESETS[b.model])
    records = f"Training records: `{data.train_records}`; held-out: `{data.eval_records}` (all of it)." \
        if data.train_records else ""
    return [
        "# RealFormer and NormFormer at CPU scale: a seeded study",
        "",
        f"Budget `{budget_name}` ({b.note}). Models: hidden {size['hidden_size']}, "
        f"{size['num_attention_heads']} heads, intermediate {size['intermediate_size']}, depths "
        f"{', '.join(map(str, b.layer_counts))}, dropout {b.dropout:g}, vocab {data.vocab_size}. Every run: "
        f"batch {b.train_batch_size} of sequence length {b.max_seq_length} ({b.max_predictions_per_seq} "
        f"masked predictions each), AdamW, linear warmup then linear decay. Depth comparison: "
        f"{b.num_train_steps} steps ({b.num_warmup_steps} warmup) at lr {format_lr(b.learning_rate)}, seeds "
        f"{', '.join(map(str, b.seeds))}. Learning-rate sweep: {b.layer_counts[0]} layers, "
        f"{b.sweep_train_steps or b.num_train_steps} steps ({b.sweep_warmup_steps or b.num_warmup_steps} "
        f"warmup), seeds {', '.join(map(str, b.sweep_seeds or b.seeds))}. A seed fixes the weights, the "
        f"dropout and the data order.",
        f"{records} {data.data_note}".strip(),
        f"Context-free baselines on the held-out set: unigram (always the most frequent masked token) "
        f"{data.unigram_baseline:.4f}; copy + unigram (the input token where masking left it unchanged, else "
        f"the most frequent) {data.copy_unigram_baseline:.4f}. A model above the second uses context.",
        "",
        f"Verdicts compare means over seeds with Welch's standard error: reproduced when the paper's "
        f"direction wins by more than {Z_THRESHOLD:g} se, not reproduced when the opposite does, "
        f"inconclusive otherwise.",
    ]


def caveat_lines(repro, data):
    """What a reader needs before the tables: the scale against the papers', and what a
    final accuracy measures this early in training."""
    hidden = dict(MODEL_PRESETS[repro.budget.model])["hidden_size"]
    narrow, wide = (round(h / hidden) for h in PAPER_HIDDEN_SIZES)
    return [
        "", "## Before the tables", "",
        f"- **Scale.** The RealFormer paper's models are {narrow}-{wide}x wider (hidden "
        f"{PAPER_HIDDEN_SIZES[0]:,}-{PAPER_HIDDEN_SIZES[1]:,} against {hidden} here) and trained for a million "
        f"steps; this study measures the first {repro.budget.num_train_steps:,} steps of width-{hidden} models. "
        "A verdict says what holds at this scale, not whether the paper is right at its own.",
        f"- **A run's final accuracy mostly says when it left the plateau.** Every run first sits on the "
        f"copy + unigram plateau ({data.copy_unigram_baseline:.3f}), then leaves it within a few hundred steps "
        "and climbs steeply (the learning curves). Seeds of one variant leave it at different steps, so their "
        "final accuracies spread widely; differences smaller than that spread give an inconclusive verdict, "
        "not evidence that two variants are alike.",
        "- **The sweep** stops around where the plateau ends, so its accuracies measure stability at each "
        "learning rate (\"diverged\": the loss became NaN or the run ended back within 0.01 of the unigram "
        "baseline), not how much a variant learns.",
        "- docs/study.md in the repository discusses each verdict.",
    ]


def write_all(repro, results, budget_name, data, analysis=True, log_fn=print):
    """Writes results.md and its plots into repro.output_dir, labelled with `data` (a
    study_files.StudyData: vocab size, baselines, input names); returns the report's path."""
    out = repro.output_dir
    b = repro.budget
    baseline = data.unigram_baseline
    plot_depth(repro, results, (baseline, data.copy_unigram_baseline), os.path.join(out, "depth.png"))
    plot_curves(repro, results, os.path.join(out, "learning_curves.png"))
    claims = accuracy_claims(repro, results)
    lines = header_lines(repro, budget_name, data) + caveat_lines(repro, data)
    lines += ["", "## Depth: held-out masked-LM accuracy (mean ± std over seeds)", ""] + depth_table(repro, results)
    lines += ["", "![depth](depth.png)", "", "![learning curves](learning_curves.png)"]
    if b.sweep_learning_rates:
        plot_sweep(repro, results, baseline, os.path.join(out, "sweep.png"))
        claims += stability_claims(repro, results, baseline)
        lines += ["", "## Learning-rate sweep: held-out MLM accuracy (mean ± std over seeds)", ""]
        lines += sweep_table(repro, results, baseline) + ["", "![sweep](sweep.png)"]
    stats, plotted = attention_statistics(repro, results, out, log_fn) if analysis else ({}, False)
    if stats:
        claims += attention_claims(repro, results, stats)
        lines += ["", "## Attention at the largest depth (mean ± std over seeds)", ""]
        lines += attention_table(repro, results, stats)
        lines += ["", "![entropy](entropy.png)", "", "![JSD](jsd.png)"] if plotted else []
    lines += ["", "## The papers' claims", "", "| source | claim | verdict | evidence |", "|---|---|---|---|"]
    lines += [f"| {c.source} | {c.text} | **{c.verdict}** | {c.evidence} |" for c in claims]
    lines += _run_lines(repro, results)
    with tf.io.gfile.GFile(os.path.join(out, "claims.json"), "w") as f:
        json.dump([dataclasses.asdict(c) for c in claims], f, indent=2)
    path = os.path.join(out, "results.md")
    with tf.io.gfile.GFile(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _run_lines(repro, results):
    """The table of every run, its time split into training and pauses, and what the
    pauses were."""
    lines = ["", "## Every run", "",
             "| run | status | held-out MLM acc | MLM loss | steps | time | of which paused |",
             "|---|---|---|---|---|---|---|"]
    paused = {r.name: _session(repro, r) for r in results if r.finished}
    for r in results:
        loss = r.results.get("masked_lm_loss", float("nan"))
        stalls = paused.get(r.name, ([], None))[0]
        lines.append(f"| {r.name} | {r.status} | {r.accuracy:.4f} | {loss:.4f} | {r.steps} | "
                     f"{format_seconds(r.seconds)} | {format_seconds(sum(p.seconds for p in stalls)) if stalls else ''} |")
    lines += pause_lines(paused)
    missing = [r.name for r in results if not r.finished]
    if missing:
        lines += ["", f"Not finished: {', '.join(missing)}."]
    lines += ["", f"Written {time.strftime('%Y-%m-%d %H:%M')} by experiments/reproduce.py; the same "
              "command reuses finished runs and resumes the others."]
    return lines


def _session(repro, result):
    """(pauses, usual seconds per step) of the training session that finished `result`."""
    steps = last_session_step_times(os.path.join(repro.run_dir(result.run), "summaries", "train"))
    return pauses(steps), usual_seconds_per_step(steps)


def pause_lines(sessions):
    """What the time column means, and the pauses where there are any (`sessions`: run
    name -> (pauses, usual seconds per step))."""
    lines = ["", "Time: wall-clock training and held-out evaluation of the session that finished the run "
             "(a run's numbers follow from its seed and thread count, not from its speed)."]
    stalled = {name: found for name, (found, _) in sessions.items() if found}
    if not stalled:
        return lines
    every = [p for found in stalled.values() for p in found]
    shared = sum(any(p.overlaps(q) for other, found in stalled.items() if other != name for q in found)
                 for name, found in stalled.items() for p in found)
    pace = [100 * sessions[name][1] for name in stalled if math.isfinite(sessions[name][1])]
    usual = f"{min(pace):.0f}-{max(pace):.0f} s" if pace else "seconds"
    lines[-1] += (
        f" {len(stalled)} run(s) include pauses (the last column): {len(every)} stretch(es) of "
        f"{_span(min(p.seconds for p in every), max(p.seconds for p in every))} in which the run "
        f"logged no step, where these runs otherwise took {usual} per 100 steps. Between the pauses they "
        "trained at their usual pace: their extra time is time they did not run, not a slower model.")
    if shared:
        lines[-1] += (
            f" {shared} of the {len(every)} pauses overlap a pause of another run: runs trained side by side "
            "stopped at the same moments, held up together by something outside the runs (the archived files "
            "do not record what).")
    return lines


def _span(shortest, longest):
    """"1-38 min" (or seconds, for pauses under a minute)."""
    if shortest >= 60:
        return f"{shortest / 60:.0f}-{longest / 60:.0f} min"
    return f"{shortest:.0f} s-{longest / 60:.0f} min"
