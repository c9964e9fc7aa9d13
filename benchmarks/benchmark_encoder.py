#!/usr/bin/env python
"""Forward+backward step time and peak step memory of `modeling.BertModel` variants,
side by side in one process, against Model Garden's `BertEncoderV2`.

    .venv/bin/python benchmarks/benchmark_encoder.py                    # small preset
    .venv/bin/python benchmarks/benchmark_encoder.py --preset base --repeats 5
    .venv/bin/python benchmarks/benchmark_encoder.py --variants bert,realformer \
        --jit_compile off --json_out /tmp/bench.json

One step = a `tf.function` (optionally `jit_compile=True`) that runs the encoder in
training mode (dropout on) under a `GradientTape`, takes
`loss = mean(sequence_output**2) + mean(pooled_output**2)` and returns the gradients of
every trainable variable. No optimizer update. Every variant gets the same inputs.

Timing: after `--warmup` calls per (variant, jit) function, `--repeats` rounds; in each
round every function runs `--steps` back-to-back steps and the mean step time of that
burst is one sample. Rounds are round-robin over the functions, with the starting
function rotated each round, so a slow period of a shared machine hits all variants
alike. Reported: median of the samples, their 25th-75th percentiles, the ratio of the
medians to our post-LN BERT (variant `bert`, the "vanilla" of the result fields) at the
same jit setting, and that BERT / Model Garden. Variant names: `realformer_tf.models.variants`
(older names such as vanilla are accepted).

Memory: `tf.config.experimental.get_memory_info("CPU:0")` (or GPU:0). TF 2.20's CPU
allocator keeps allocation statistics, so `peak - current` after
`reset_memory_stats` is the high-water mark of the tensors one step allocates
(activations kept for the backward pass, gradients, temporaries) on top of what already
lives (the weights of every model built). A self-check at start-up verifies that a tensor
of known size shows up in the statistics. Reported per variant: that step peak, and the
step peak plus the variant's own parameter bytes ("footprint"), the memory a training
process of that variant alone would need, minus optimizer slots. Median of
`--memory_repeats` measurements (the parallel executor makes the peak vary slightly).

The last line printed is the whole result as one JSON object.
"""

import argparse
import gc
import json
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (_ROOT, _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.get_logger().setLevel("ERROR")  # one tf.function per (variant, jit) is intended, not retracing

PRESETS = {
    "small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                  seq_length=128, batch_size=8),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072,
                 seq_length=128, batch_size=8),
}
from bench_inputs import MAX_POSITIONS, TYPE_VOCAB_SIZE, VOCAB_SIZE, bert_config, input_arrays  # noqa: E402

from realformer_tf.models import variants as variants_lib  # noqa: E402

MODEL_GARDEN = "model_garden"  # Model Garden's BertEncoderV2
# The variant table's names, and Model Garden's encoder.
VARIANTS = (*variants_lib.VARIANTS, MODEL_GARDEN)
# Measured unless --variants says otherwise (NormFormer's optional residual scale only on request).
DEFAULT_VARIANTS = tuple(v for v in VARIANTS if v != "normformer_residual_scale")
BASELINE = "bert"

# Targets (variant -> max ratio to vanilla) of the performance issue, measured side by
# side on the path the scripts take (--jit_compile auto). Vanilla <= 0.95 x Model Garden.
TIME_TARGETS = {"realformer": 1.03, "normformer": 1.05, "realformer_normformer": 1.06}
MEMORY_TARGETS = {"normformer": 1.15}
MODEL_GARDEN_TARGET = 0.95


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--batch_size", type=int, help="override the preset's batch size")
    p.add_argument("--seq_length", type=int, help="override the preset's sequence length")
    p.add_argument("--variants", default=",".join(DEFAULT_VARIANTS),
                   help=f"comma-separated subset of {', '.join(VARIANTS)} "
                        f"('{BASELINE}' is always added)")
    p.add_argument("--repeats", type=int, default=10, help="timed rounds (samples) per function")
    p.add_argument("--steps", type=int, default=3, help="steps per timed burst (one sample)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per function (>=1: tracing)")
    p.add_argument("--jit_compile", choices=("auto", "off", "on", "both"), default="auto",
                   help="auto: as Trainer resolves it for the forward+backward on this machine "
                        "(off on CPUs, on with a GPU)")
    p.add_argument("--mixed_precision", choices=("none", "bfloat16"), default="none")
    p.add_argument("--dropout", type=float, default=0.1,
                   help="hidden and attention dropout of every model (BERT: 0.1)")
    p.add_argument("--memory_repeats", type=int, default=3,
                   help="single-step memory measurements per function (0: skip)")
    p.add_argument("--threads", type=int, default=0,
                   help="intra- and inter-op threads (0: TensorFlow's default)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json_out", help="also write the JSON result (indented) to this path")
    p.add_argument("--markdown_out", help="also write the table as markdown to this path")
    args = p.parse_args(argv)
    names = [canonical(v.strip()) for v in args.variants.split(",") if v.strip()]
    from patches import PATCHES

    unknown = sorted({n for n in names if split_variant(n)[0] not in VARIANTS}
                     | {pt for n in names for pt in split_variant(n)[1] if pt not in PATCHES}
                     | {n for n in names if n.startswith(MODEL_GARDEN + "+")})
    if unknown:
        p.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}, "
                f"optionally with +PATCH ({', '.join(PATCHES)}) for our models")
    if BASELINE not in names:
        names.insert(0, BASELINE)
    order = list(VARIANTS)
    args.variant_names = sorted(dict.fromkeys(names),
                                key=lambda n: (order.index(split_variant(n)[0]), n))
    if args.warmup < 1:
        p.error("--warmup must be >= 1 (the first call traces and compiles)")
    if args.jit_compile == "auto":
        from realformer_tf.training.distribution import resolve_jit_compile

        args.jit_modes = [resolve_jit_compile("auto")[0]]
    else:
        args.jit_modes = {"off": [False], "on": [True], "both": [False, True]}[args.jit_compile]
    return args


# -- models -------------------------------------------------------------------------------

def canonical(name):
    """`name` with its variant part's old name (vanilla, realformer_running_mean) mapped to
    the table's name: 'vanilla+tf_ops' -> 'bert+tf_ops'."""
    base, *patch_names = name.split("+")
    base = variants_lib.ALIASES.get(base, base)
    return "+".join([base, *patch_names])


def split_variant(name):
    """'normformer+keras_ln' -> ('normformer', ['keras_ln']): a variant and the
    benchmarks/patches.py patches applied while building it."""
    base, *patch_names = name.split("+")
    return base, patch_names


def shape_config(args):
    shape = dict(PRESETS[args.preset])
    if args.batch_size:
        shape["batch_size"] = args.batch_size
    if args.seq_length:
        shape["seq_length"] = args.seq_length
    return shape


def make_inputs(shape, seed):
    """benchmarks/bench_inputs.py's arrays as tf.constant tensors."""
    return tuple(tf.constant(a) for a in input_arrays(shape, seed))


class Candidate:
    """One model and its forward function `forward(ids, mask, seg) -> (seq, pooled)`."""

    def __init__(self, name, model, forward, description, params_bytes):
        self.name = name
        self.model = model
        self.forward = forward
        self.description = description
        self.params_bytes = params_bytes
        self.variables = list(model.trainable_variables)


def _param_bytes(variables):
    return int(sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables))


def build_ours(name, shape, args, inputs):
    import patches
    from realformer_tf import kernels, modeling

    base, patch_names = split_variant(name)
    config = bert_config(shape, base, args.dropout)
    model = modeling.BertModel(config, name="bert_" + name.replace("+", "_"))
    model({"input_ids": inputs[0], "input_mask": inputs[1], "segment_ids": inputs[2]},
          training=False)  # build the variables eagerly
    patches.apply_to(model, patch_names)
    kernels.use_fused_kernels(model, "tf_ops" not in patch_names)  # on: the layers' default

    def forward(ids, mask, seg):
        out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg}, training=True)
        return out["sequence_output"], out["pooled_output"]

    desc = config.describe() + "".join(f"; patch {p}: {patches.PATCHES[p]}" for p in patch_names)
    return Candidate(name, model, forward, desc, _param_bytes(model.weights))


def build_model_garden(shape, args, inputs):
    import tf_keras
    from official.nlp.modeling import networks

    if args.mixed_precision == "bfloat16":
        tf_keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = networks.BertEncoderV2(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape["hidden_size"],
        num_layers=shape["num_layers"],
        num_attention_heads=shape["num_heads"],
        max_sequence_length=MAX_POSITIONS,
        type_vocab_size=TYPE_VOCAB_SIZE,
        inner_dim=shape["intermediate_size"],
        output_dropout=args.dropout,
        attention_dropout=args.dropout,
    )  # inner_activation defaults to the tanh-approximate gelu, like BERT's "gelu"

    def forward(ids, mask, seg):
        out = model({"input_word_ids": ids, "input_mask": mask, "input_type_ids": seg},
                    training=True)
        return out["sequence_output"], out["pooled_output"]

    model({"input_word_ids": inputs[0], "input_mask": inputs[1], "input_type_ids": inputs[2]},
          training=False)
    desc = (f"Model Garden BertEncoderV2 (tf_keras {tf_keras.__version__}), post-LN, "
            f"[{shape['num_layers']}L/{shape['num_heads']}H/{shape['hidden_size']}"
            f"/{shape['intermediate_size']}, vocab {VOCAB_SIZE}]")
    return Candidate(MODEL_GARDEN, model, forward, desc, _param_bytes(model.weights))


def make_step(candidate, jit_compile):
    variables = candidate.variables
    forward = candidate.forward

    @tf.function(jit_compile=jit_compile)
    def step(ids, mask, seg):
        with tf.GradientTape() as tape:
            seq, pooled = forward(ids, mask, seg)
            loss = (tf.reduce_mean(tf.square(tf.cast(seq, tf.float32)))
                    + tf.reduce_mean(tf.square(tf.cast(pooled, tf.float32))))
        grads = tape.gradient(loss, variables)
        return loss, grads

    return step


# -- measurement ----------------------------------------------------------------------------

def memory_device():
    return "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"


def check_memory_accounting(device):
    """Returns (ok, message): does a fresh 4 MiB tensor show up in get_memory_info?"""
    try:
        tf.config.experimental.reset_memory_stats(device)
        before = tf.config.experimental.get_memory_info(device)
        with tf.device(device):
            t = tf.fill([1024, 1024], tf.constant(1.0, tf.float32)) + 1.0
        after = tf.config.experimental.get_memory_info(device)
        grown = after["peak"] - before["current"]
        del t
    except Exception as e:  # noqa: BLE001  (report, don't crash the timing)
        return False, f"get_memory_info({device!r}) unavailable: {type(e).__name__}: {e}"
    ok = grown >= 4 * 2**20
    return ok, (f"get_memory_info({device!r}): a 4 MiB tensor raised the peak by "
                f"{grown / 2**20:.2f} MiB ({'ok' if ok else 'NOT TRACKED'})")


def measure_peak(fn, inputs, device, repeats):
    peaks = []
    for _ in range(repeats):
        gc.collect()
        tf.config.experimental.reset_memory_stats(device)
        base = tf.config.experimental.get_memory_info(device)["current"]
        out = fn(*inputs)
        float(out[0])
        peaks.append(tf.config.experimental.get_memory_info(device)["peak"] - base)
        del out
    return int(statistics.median(peaks)), peaks


def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def run(args):
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras

    if args.mixed_precision == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    tf.random.set_seed(args.seed)
    keras.utils.set_random_seed(args.seed)
    shape = shape_config(args)
    inputs = make_inputs(shape, args.seed)
    device = memory_device()
    mem_ok, mem_msg = check_memory_accounting(device) if args.memory_repeats else (False, "skipped")
    load_before = os.getloadavg()

    print(f"# preset {args.preset}: {shape}; dropout {args.dropout}; "
          f"mixed precision {args.mixed_precision}; jit {args.jit_compile}", flush=True)
    print(f"# TF {tf.__version__}, Keras {keras.__version__}, {platform.processor() or platform.machine()},"
          f" {os.cpu_count()} CPUs, load average {load_before[0]:.2f}", flush=True)
    print(f"# memory accounting: {mem_msg}", flush=True)

    candidates = []
    for name in args.variant_names:
        t0 = time.perf_counter()
        if name == MODEL_GARDEN:
            cand = build_model_garden(shape, args, inputs)
        else:
            cand = build_ours(name, shape, args, inputs)
        candidates.append(cand)
        print(f"# built {name:<24} {cand.params_bytes / 2**20:7.1f} MiB params "
              f"({time.perf_counter() - t0:.1f}s): {cand.description}", flush=True)

    keys, fns = [], {}
    for jit in args.jit_modes:
        for cand in candidates:
            key = (cand.name, jit)
            keys.append(key)
            fns[key] = make_step(cand, jit)

    compile_s = {}
    for key in keys:
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            float(fns[key](*inputs)[0])
        compile_s[key] = time.perf_counter() - t0
        print(f"# warmed {key[0]:<24} jit={'on' if key[1] else 'off'} "
              f"({compile_s[key]:.1f}s for {args.warmup} call(s))", flush=True)

    samples = {key: [] for key in keys}
    cpu_samples = {key: [] for key in keys}
    t_start = time.perf_counter()
    for r in range(args.repeats):
        order = keys[r % len(keys):] + keys[:r % len(keys)]
        for key in order:
            fn = fns[key]
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                out = fn(*inputs)
            float(out[0])  # wait for the last step
            samples[key].append((time.perf_counter() - t0) / args.steps)
            cpu_samples[key].append((time.process_time() - c0) / args.steps)
            del out
        print(f"# round {r + 1}/{args.repeats} done ({time.perf_counter() - t_start:.0f}s)",
              flush=True)

    memory = {}
    if args.memory_repeats and mem_ok:
        for key in keys:
            memory[key] = measure_peak(fns[key], inputs, device, args.memory_repeats)
    load_after = os.getloadavg()

    params = {c.name: c.params_bytes for c in candidates}
    rows = []
    for key in keys:
        name, jit = key
        med = statistics.median(samples[key])
        base_med = statistics.median(samples[(BASELINE, jit)])
        row = {
            "variant": name,
            "jit_compile": jit,
            "median_ms": med * 1e3,
            "p25_ms": percentile(samples[key], 25) * 1e3,
            "p75_ms": percentile(samples[key], 75) * 1e3,
            "min_ms": min(samples[key]) * 1e3,
            "examples_per_s": shape["batch_size"] / med,
            "ratio_to_vanilla": med / base_med,
            # Median over rounds of (this sample / vanilla's sample in the same round):
            # samples taken seconds apart share the machine's load, so this ratio is
            # steadier than the ratio of the overall medians on a shared machine.
            "paired_ratio_to_vanilla": statistics.median(
                a / b for a, b in zip(samples[key], samples[(BASELINE, jit)])),
            "min_ratio_to_vanilla": min(samples[key]) / min(samples[(BASELINE, jit)]),
            "cpu_median_ms": statistics.median(cpu_samples[key]) * 1e3,
            "cpu_ratio_to_vanilla": (statistics.median(cpu_samples[key])
                                     / statistics.median(cpu_samples[(BASELINE, jit)])),
            "warmup_s": compile_s[key],
            "params_mib": params[name] / 2**20,
            "samples_ms": [s * 1e3 for s in samples[key]],
        }
        if key in memory:
            peak, peaks = memory[key]
            base_peak = memory[(BASELINE, jit)][0]
            row.update(
                step_peak_mib=peak / 2**20,
                step_peak_samples_mib=[p / 2**20 for p in peaks],
                footprint_mib=(peak + params[name]) / 2**20,
                memory_ratio_to_vanilla=peak / base_peak,
                footprint_ratio_to_vanilla=(peak + params[name]) / (base_peak + params[BASELINE]),
            )
        base, patch_names = split_variant(name)
        if patch_names and (base, jit) in samples:
            row["patched_from"] = base
            row["time_ratio_to_unpatched"] = med / statistics.median(samples[(base, jit)])
            if key in memory and (base, jit) in memory:
                row["memory_ratio_to_unpatched"] = memory[key][0] / memory[(base, jit)][0]
        target = TIME_TARGETS.get(name)  # patched variants are suggestions, not graded
        if target is not None:
            row["time_target"] = target
            row["time_target_met"] = bool(row["ratio_to_vanilla"] <= target)
            row["time_target_met_paired"] = bool(row["paired_ratio_to_vanilla"] <= target)
            row["time_target_met_cpu"] = bool(row["cpu_ratio_to_vanilla"] <= target)
        if name in MEMORY_TARGETS and "memory_ratio_to_vanilla" in row:
            row["memory_target"] = MEMORY_TARGETS[name]
            row["memory_target_met"] = bool(row["memory_ratio_to_vanilla"] <= MEMORY_TARGETS[name])
        rows.append(row)

    garden = {}
    for jit in args.jit_modes:
        if (MODEL_GARDEN, jit) in samples:
            ratio = (statistics.median(samples[(BASELINE, jit)])
                     / statistics.median(samples[(MODEL_GARDEN, jit)]))
            paired = statistics.median(a / b for a, b in zip(samples[(BASELINE, jit)],
                                                             samples[(MODEL_GARDEN, jit)]))
            cpu = (statistics.median(cpu_samples[(BASELINE, jit)])
                   / statistics.median(cpu_samples[(MODEL_GARDEN, jit)]))
            entry = {"vanilla_over_model_garden": ratio, "paired": paired, "cpu": cpu,
                     "target": MODEL_GARDEN_TARGET,
                     "target_met": bool(ratio <= MODEL_GARDEN_TARGET),
                     "target_met_paired": bool(paired <= MODEL_GARDEN_TARGET),
                     "target_met_cpu": bool(cpu <= MODEL_GARDEN_TARGET)}
            if (MODEL_GARDEN, jit) in memory:
                entry["vanilla_over_model_garden_memory"] = (
                    memory[(BASELINE, jit)][0] / memory[(MODEL_GARDEN, jit)][0])
            garden["on" if jit else "off"] = entry

    return {
        "benchmark": "encoder_fwd_bwd",
        "preset": args.preset,
        "shape": shape,
        "dropout": args.dropout,
        "mixed_precision": args.mixed_precision,
        "jit_compile": args.jit_compile,
        "repeats": args.repeats,
        "steps_per_sample": args.steps,
        "warmup": args.warmup,
        "memory_method": (f"tf.config.experimental.get_memory_info('{device}') peak - current "
                          "after reset_memory_stats, one step, median of "
                          f"{args.memory_repeats}" if memory else "not measured"),
        "memory_check": mem_msg,
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "cpu_count": os.cpu_count(),
        "threads": args.threads or "default",
        "loadavg_before": load_before[0],
        "loadavg_after": load_after[0],
        "timed_seconds": time.perf_counter() - t_start,
        "descriptions": {c.name: c.description for c in candidates},
        "results": rows,
        "model_garden": garden,
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }


# -- reporting ----------------------------------------------------------------------------

def _mark(met):
    return "" if met is None else (" ok" if met else " MISS")


def format_table(result, markdown=False):
    head = ["variant", "jit", "median ms", "p25-p75 ms", "ex/s", f"time/{BASELINE}", "paired",
            f"CPU-s/{BASELINE}", "step peak MiB",
            f"mem/{BASELINE}", "footprint MiB"]
    lines = []
    for row in result["results"]:
        mem = row.get("step_peak_mib")
        lines.append([
            row["variant"],
            "on" if row["jit_compile"] else "off",
            f"{row['median_ms']:.1f}",
            f"{row['p25_ms']:.1f}-{row['p75_ms']:.1f}",
            f"{row['examples_per_s']:.1f}",
            f"{row['ratio_to_vanilla']:.3f}"
            + (f" (<= {row['time_target']}{_mark(row['time_target_met'])})" if "time_target" in row else ""),
            f"{row['paired_ratio_to_vanilla']:.3f}" + (_mark(row["time_target_met_paired"]) if "time_target" in row else ""),
            f"{row['cpu_ratio_to_vanilla']:.3f}" + (_mark(row["time_target_met_cpu"]) if "time_target" in row else ""),
            "-" if mem is None else f"{mem:.1f}",
            "-" if mem is None else f"{row['memory_ratio_to_vanilla']:.3f}"
            + (f"{_mark(row.get('memory_target_met'))}" if "memory_target" in row else ""),
            "-" if mem is None else f"{row['footprint_mib']:.1f}",
        ])
    patched = [f"{r['variant']} (jit {'on' if r['jit_compile'] else 'off'}) / {r['patched_from']}: "
               f"time {r['time_ratio_to_unpatched']:.3f}"
               + (f", step memory {r['memory_ratio_to_unpatched']:.3f}"
                  if "memory_ratio_to_unpatched" in r else "")
               for r in result["results"] if "patched_from" in r]
    garden = patched + [f"{BASELINE} / Model Garden BertEncoderV2 (jit {jit}): time {g['vanilla_over_model_garden']:.3f}"
              f"{_mark(g['target_met'])}, paired {g['paired']:.3f}{_mark(g['target_met_paired'])}, "
              f"CPU-s {g['cpu']:.3f}{_mark(g['target_met_cpu'])} (target <= {g['target']})"
              + (f", step memory {g['vanilla_over_model_garden_memory']:.3f}"
                 if "vanilla_over_model_garden_memory" in g else "")
              for jit, g in result["model_garden"].items()]
    if markdown:
        out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        out += ["| " + " | ".join(line) + " |" for line in lines]
        return "\n".join(out + [""] + [f"- {g}" for g in garden])
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*line) for line in lines]
    return "\n".join(out + [""] + garden)


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print()
    print(format_table(result))
    print(f"\nload average before/after: {result['loadavg_before']:.2f} / "
          f"{result['loadavg_after']:.2f} on {result['cpu_count']} CPUs "
          "(a load above the CPU count means other processes competed for the cores)")
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    if args.markdown_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.markdown_out)), exist_ok=True)
        with open(args.markdown_out, "w") as f:
            f.write(markdown_report(result))
    print(json.dumps(result, separators=(",", ":")))
    return result


def markdown_report(result):
    shape = result["shape"]
    return "\n".join([
        f"# Encoder forward+backward benchmark: preset `{result['preset']}`",
        "",
        f"{shape['num_layers']} layers, hidden {shape['hidden_size']}, {shape['num_heads']} heads, "
        f"intermediate {shape['intermediate_size']}, seq {shape['seq_length']}, batch "
        f"{shape['batch_size']}; dropout {result['dropout']}; mixed precision "
        f"{result['mixed_precision']}. TF {result['tensorflow']}, Keras {result['keras']}, "
        f"{result['cpu_count']} CPUs, load average {result['loadavg_before']:.2f} before / "
        f"{result['loadavg_after']:.2f} after.",
        "",
        f"Median of {result['repeats']} interleaved samples of {result['steps_per_sample']} steps. "
        f"Memory: {result['memory_method']} ({result['memory_check']}).",
        "",
        f"Command: `{result['command']}`",
        "",
        format_table(result, markdown=True),
        "",
    ])


if __name__ == "__main__":
    main()
