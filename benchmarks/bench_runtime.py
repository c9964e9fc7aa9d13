"""What the step benchmarks share: thread pools, the machine's load, interleaved timed
rounds with paired ratios, and writing the table and the JSON."""

import json
import os
import statistics
import sys
import time

LOADAVG_START = os.getloadavg()[0]


def set_threads(threads):
    """TensorFlow's intra- and inter-op thread pools (0: its default); before any op runs."""
    import tensorflow as tf

    if threads:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)


def rotated(names, r):
    """`names` starting at round `r`'s position, so no variant always runs first."""
    return names[r % len(names):] + names[:r % len(names)]


def environment(args):
    """The run's threads, load averages, cores and command line, for its JSON."""
    return {"threads": args.threads, "loadavg_start": LOADAVG_START, "loadavg": os.getloadavg()[0],
            "cpus": os.cpu_count(), "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}


def warn_if_busy():
    if LOADAVG_START >= 0.5:
        print(f"# warning: load average {LOADAVG_START:.2f} at the start: other processes use the cores and the "
              "timings move with them; run on an idle machine for results", file=sys.stderr, flush=True)


def timed_rounds(steps, batch, baseline, rounds, steps_per_round, targets=None):
    """Times `steps[name](batch)` (each returning a tensor to wait on) over `rounds`
    interleaved rounds (rotated start), `steps_per_round` calls each. Returns {name:
    {median_ms, baseline, paired_ratio (median over rounds of name / baseline), target}}."""
    names = list(steps)
    samples = {name: [] for name in names}
    for r in range(rounds):
        for name in rotated(names, r):
            start = time.perf_counter()
            for _ in range(steps_per_round):
                out = steps[name](batch)
            float(out)  # waits for the last step
            samples[name].append((time.perf_counter() - start) / steps_per_round)
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {samples[n][-1] * 1e3:.1f} ms" for n in names),
              file=sys.stderr, flush=True)
    return {name: {"median_ms": statistics.median(s) * 1e3, "baseline": baseline,
                   "paired_ratio": statistics.median(a / b for a, b in zip(s, samples[baseline])),
                   "target": (targets or {}).get(name)} for name, s in samples.items()}


def compiled_train_step(trainer, loss_key):
    """A tf.function running one of `trainer`'s replica train steps on a batch and
    returning its summed `loss_key` (what the step benchmarks time)."""
    import tensorflow as tf

    @tf.function
    def step(batch):
        sums = trainer.strategy.run(trainer.replica_train_step, ((batch,),))
        return sums[loss_key][0]

    return step


def step_table_rows(results, baseline):
    """The markdown rows of a `timed_rounds` result: each variant's median step, its
    paired ratio to `baseline` and its target."""
    lines = ["", f"| variant | step (median) | / {baseline} (paired) | target |", "|---|---|---|---|"]
    for name, row in results.items():
        target = f"<= {row['target']:.2f}x" if row["target"] else "-"
        lines.append(f"| {name} | {row['median_ms']:.1f} ms | {row['paired_ratio']:.3f}x | {target} |")
    return lines


def write_outputs(result, table, json_out=None, markdown_out=None):
    """Prints the table, writes it and the JSON where asked, and prints the JSON last."""
    print(table)
    if markdown_out:
        with open(markdown_out, "w") as f:
            f.write(table + "\n")
    if json_out:
        with open(json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(result))
