#!/usr/bin/env python
"""Distance to the limit: the model FLOP/s of an encoder training step as a fraction of
what a bare loop of the same matmuls reaches on this machine.

    .venv/bin/python benchmarks/benchmark_limit.py                          # small and base
    .venv/bin/python benchmarks/benchmark_limit.py --presets base --batch_size 2 \
        --precisions float32,bfloat16 --json_out /tmp/limit.json

Model FLOPs count only the matmuls and einsums of the step (the convention of the
scaling-law and MFU literature): per layer and token, the Q/K/V/output projections
(4 H^2 multiply-adds), the feed-forward (2 H I), the attention scores and context
(2 L H); plus the pooler; x2 for FLOPs, x3 for forward + backward (the backward of each
matmul is two matmuls of the same size). Embedding lookups, softmax, LayerNorm, gelu and
dropout are real work but add no model FLOPs: that is where a step loses to the limit.

Functions timed, interleaved round by round (a busy spell of a shared machine hits all):

- `bare`: the same matmul/einsum shapes (projections as [B*L, H] x [H, O] matmuls, the
  attention as the library's two einsums), chained layer after layer, forward and
  backward under one `GradientTape`, nothing else; one `tf.function`, with and without
  XLA; the faster is the limit.
- `fwd+bwd`: `benchmark_encoder.py`'s step (our vanilla BERT, dropout 0.1, loss on the
  sequence and pooled outputs, gradients of every weight), on the path the scripts take
  on this machine (`--jit_compile auto` as `Trainer` resolves it).
- `train`: the same plus the `Trainer`'s update of every weight (clipping to global
  norm 1.0 and BERT's AdamW; the task head is left out).

The fraction is limit time / step time (both do the same model FLOPs): 1.0 would mean the
step spends no time outside its matmuls. Reported per preset and precision (bfloat16:
Keras' `mixed_bfloat16` policy; the bare loop in bfloat16).

The last line printed is the whole result as one JSON object.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark_encoder as be  # noqa: E402  (sets up TF env and sys.path)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

# BERT-Base at a batch that keeps a run within minutes on 2 CPU cores.
DEFAULT_BATCH = {"small": 8, "base": 8}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--presets", default="small,base", help="comma list of " + ", ".join(be.PRESETS))
    p.add_argument("--batch_size", type=int, help="override every preset's batch (default: small 8, base 8)")
    p.add_argument("--precisions", default="float32,bfloat16", help="comma list of float32, bfloat16")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per function")
    p.add_argument("--steps", type=int, default=2, help="steps per timed sample")
    p.add_argument("--jit_compile", choices=("auto", "true", "false"), default="auto",
                   help="for the model steps (the bare loop runs both ways)")
    p.add_argument("--json_out")
    args = p.parse_args(argv)
    args.presets = [x for x in args.presets.split(",") if x]
    args.precisions = [x for x in args.precisions.split(",") if x]
    for name in args.presets:
        if name not in be.PRESETS:
            p.error(f"--presets: unknown preset {name!r}; use {', '.join(be.PRESETS)}")
    for name in args.precisions:
        if name not in ("float32", "bfloat16"):
            p.error(f"--precisions: unknown {name!r}; use float32, bfloat16")
    return args


def model_flops(shape):
    """Matmul FLOPs of one forward+backward step of the encoder (see the docstring)."""
    b, l, h, i = shape["batch_size"], shape["seq_length"], shape["hidden_size"], shape["intermediate_size"]
    tokens = b * l
    per_layer = tokens * (4 * h * h + 2 * h * i + 2 * l * h)
    macs = shape["num_layers"] * per_layer + b * h * h  # + pooler
    return 3 * 2 * macs


def make_bare(shape, dtype, jit_compile, seed=0):
    """The step's matmuls alone, forward and backward, as one tf.function."""
    b, l, h, i, n = (shape[k] for k in ("batch_size", "seq_length", "hidden_size", "intermediate_size",
                                        "num_heads"))
    rng = np.random.default_rng(seed)

    def weight(*dims):
        return tf.Variable(rng.normal(0, dims[0] ** -0.5, size=dims).astype(np.float32), dtype=tf.float32)

    layers = [dict(q=weight(h, h), k=weight(h, h), v=weight(h, h), o=weight(h, h), w1=weight(h, i), w2=weight(i, h))
              for _ in range(shape["num_layers"])]
    pooler = weight(h, h)
    variables = [w for layer in layers for w in layer.values()] + [pooler]
    x = tf.constant(rng.normal(size=(b * l, h)).astype(np.float32) * 0.1, dtype)

    @tf.function(jit_compile=jit_compile)
    def bare():
        with tf.GradientTape() as tape:
            y = x
            for layer in layers:
                w = {k: tf.cast(v, dtype) for k, v in layer.items()}
                q, k, v = (tf.reshape(tf.matmul(y, w[name]), [b, l, n, h // n]) for name in "qkv")
                scores = tf.einsum("bfnd,btnd->bnft", q, k)
                context = tf.reshape(tf.einsum("bnft,btnd->bfnd", scores, v), [b * l, h])
                y = tf.matmul(tf.matmul(tf.matmul(context, w["o"]), w["w1"]), w["w2"])
            first = tf.reshape(y, [b, l, h])[:, 0]
            loss = tf.reduce_sum(tf.cast(y, tf.float32)) + tf.reduce_sum(
                tf.cast(tf.matmul(first, tf.cast(pooler, dtype)), tf.float32))
        return loss, tape.gradient(loss, variables)

    return bare


def make_train_step(candidate, jit_compile):
    """benchmark_encoder's step plus the training loop's update of every weight: BERT's
    AdamW after clipping to global norm 1.0 (`training.gradients.clip_and_apply`)."""
    from realformer_tf import optimization
    from realformer_tf.training import gradients

    optimizer = optimization.create_optimizer("adamw", 1e-4, 10000, 100)
    optimizer.build(candidate.variables)
    variables, forward = candidate.variables, candidate.forward

    @tf.function(jit_compile=jit_compile)
    def train(ids, mask, seg):
        with tf.GradientTape() as tape:
            seq, pooled = forward(ids, mask, seg)
            loss = (tf.reduce_mean(tf.square(tf.cast(seq, tf.float32)))
                    + tf.reduce_mean(tf.square(tf.cast(pooled, tf.float32))))
        grads = tape.gradient(loss, variables)
        gradients.clip_and_apply(optimizer, grads, variables, clip_norm=1.0)
        return loss, grads[0]

    return train


def time_interleaved(fns, args, inputs):
    """{name: [seconds per step, one per round]}, rounds round-robin over the functions."""
    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, call_args = fns[name], inputs[name]
            t0 = time.perf_counter()
            for _ in range(args.steps):
                out = fn(*call_args)
            float(out[0])
            samples[name].append((time.perf_counter() - t0) / args.steps)
    return samples


def measure(preset, precision, args):
    import keras

    from realformer_tf.training.distribution import resolve_jit_compile

    keras.mixed_precision.set_dtype_policy("mixed_bfloat16" if precision == "bfloat16" else "float32")
    shape = dict(be.PRESETS[preset], batch_size=args.batch_size or DEFAULT_BATCH[preset])
    jit = resolve_jit_compile(args.jit_compile)[0]  # (step, update): the model step's
    bench_args = argparse.Namespace(dropout=0.1, mixed_precision="bfloat16" if precision == "bfloat16" else "none")
    inputs = be.make_inputs(shape, 1234)
    model = be.build_ours(be.BASELINE, shape, bench_args, inputs)
    dtype = tf.bfloat16 if precision == "bfloat16" else tf.float32
    fns = {"bare_xla": make_bare(shape, dtype, True), "bare_no_xla": make_bare(shape, dtype, False),
           "fwd+bwd": be.make_step(model, jit), "train": make_train_step(model, jit)}
    call_inputs = {"bare_xla": (), "bare_no_xla": (), "fwd+bwd": inputs, "train": inputs}
    for name, fn in fns.items():  # trace / compile
        float(fn(*call_inputs[name])[0])
    samples = time_interleaved(fns, args, call_inputs)
    keras.mixed_precision.set_dtype_policy("float32")
    med = {k: statistics.median(v) for k, v in samples.items()}
    limit_name = min(("bare_xla", "bare_no_xla"), key=med.get)
    flops = model_flops(shape)
    row = dict(preset=preset, precision=precision, shape=shape, jit_compile=jit, model_gflop=flops / 1e9,
               median_ms={k: v * 1e3 for k, v in med.items()}, limit=limit_name,
               limit_gflops=flops / med[limit_name] / 1e9)
    for step in ("fwd+bwd", "train"):
        row[f"{step}_gflops"] = flops / med[step] / 1e9
        row[f"{step}_fraction_of_limit"] = med[limit_name] / med[step]
        # Paired: per round, that round's limit sample / the step's sample.
        limit_samples = [min(a, b) for a, b in zip(samples["bare_xla"], samples["bare_no_xla"])]
        row[f"{step}_fraction_paired"] = statistics.median(a / b for a, b in zip(limit_samples, samples[step]))
    return row


def format_rows(rows):
    lines = [f"{'preset':<6} {'precision':<9} {'batch':>5} {'GFLOP':>7} {'bare XLA ms':>11} {'bare TF ms':>10} "
             f"{'fwd+bwd ms':>10} {'train ms':>9} {'limit GFLOP/s':>13} {'fwd+bwd/limit':>13} {'train/limit':>11}"]
    for r in rows:
        m = r["median_ms"]
        lines.append(
            f"{r['preset']:<6} {r['precision']:<9} {r['shape']['batch_size']:>5} {r['model_gflop']:>7.1f} "
            f"{m['bare_xla']:>11.1f} {m['bare_no_xla']:>10.1f} {m['fwd+bwd']:>10.1f} {m['train']:>9.1f} "
            f"{r['limit_gflops']:>13.1f} {r['fwd+bwd_fraction_of_limit']:>13.3f} {r['train_fraction_of_limit']:>11.3f}")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    load_before = os.getloadavg()[0]
    rows = []
    for preset in args.presets:
        for precision in args.precisions:
            t0 = time.perf_counter()
            rows.append(measure(preset, precision, args))
            print(f"# {preset} {precision}: {time.perf_counter() - t0:.0f}s", flush=True)
    result = {"benchmark": "distance_to_matmul_limit", "rows": rows, "repeats": args.repeats,
              "steps_per_sample": args.steps, "loadavg_before": load_before, "loadavg_after": os.getloadavg()[0],
              "cpu_count": os.cpu_count(), "tensorflow": tf.__version__,
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    print()
    print(format_rows(rows))
    bf16 = {(r["preset"], r["precision"]): r for r in rows}
    for preset in args.presets:
        if (preset, "float32") in bf16 and (preset, "bfloat16") in bf16:
            a, b = bf16[(preset, "float32")], bf16[(preset, "bfloat16")]
            print(f"bfloat16 / float32 time, {preset}: bare limit "
                  f"{b['median_ms'][b['limit']] / a['median_ms'][a['limit']]:.2f}, fwd+bwd "
                  f"{b['median_ms']['fwd+bwd'] / a['median_ms']['fwd+bwd']:.2f}, train "
                  f"{b['median_ms']['train'] / a['median_ms']['train']:.2f} (below 1: bfloat16 pays)")
    print(f"load average before/after: {result['loadavg_before']:.2f} / {result['loadavg_after']:.2f} "
          f"on {result['cpu_count']} CPUs")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(result, separators=(",", ":")))
    return result


if __name__ == "__main__":
    main()
