#!/usr/bin/env python
"""Training step time of the variants through the public Keras API, as a Keras user
runs them: a Functional classifier on `modeling.BertModel`, `model.compile` with
Keras' AdamW, `model.train_on_batch` (the compiled step `model.fit` runs), nothing
set beyond the layers' defaults (the fused CPU kernels included).

    .venv/bin/python benchmarks/benchmark_keras_fit.py                  # small preset
    .venv/bin/python benchmarks/benchmark_keras_fit.py --rounds 30 --json_out /tmp/fit.json

Timing: after warm-up steps, `--rounds` rounds; in each round every variant runs
`--steps` back-to-back steps (the start rotated each round) and the mean of that burst
is one sample; per round, each variant's time divided by vanilla BERT's is one paired
ratio. Reported: median step time per variant and the median paired ratio to BERT,
which a slow spell of a shared machine moves for all variants alike.
"""

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_HERE), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from bench_inputs import bert_config, input_arrays  # noqa: E402

PRESETS = {
    "small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024,
                  seq_length=128, batch_size=8),
    "tiny": dict(num_layers=2, hidden_size=32, num_heads=2, intermediate_size=64, seq_length=16, batch_size=4),
}
VARIANTS = ("bert", "realformer", "normformer", "realformer_normformer")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=3, help="steps per variant per round")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--fused_kernels", choices=("on", "off"), default="on",
                   help="off: every layer's fused_kernels option off (TensorFlow's ops), for comparison")
    p.add_argument("--json_out")
    return p.parse_args(argv)


def build(variant, shape, dropout, fused_kernels=True):
    """A compiled Functional classifier: BertModel -> pooled output -> Dense(2)."""
    import keras

    from realformer_tf import kernels, modeling

    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
              for name in ("input_ids", "input_mask", "segment_ids")}
    bert = modeling.BertModel(bert_config(shape, variant, dropout), name=f"bert_{variant}")
    logits = keras.layers.Dense(2, name="classifier")(bert(inputs)["pooled_output"])
    model = keras.Model(inputs, logits)
    kernels.use_fused_kernels(model, fused_kernels)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=False)
    return model


def measure(args):
    import numpy as np

    shape = PRESETS[args.preset]
    ids, mask, segments = input_arrays(shape, seed=0)
    batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    labels = np.arange(shape["batch_size"]) % 2
    variants = [v for v in args.variants.split(",") if v]
    models = {v: build(v, shape, args.dropout, args.fused_kernels == "on") for v in variants}
    for model in models.values():
        for _ in range(args.warmup):
            model.train_on_batch(batch, labels)
    samples = {v: [] for v in variants}
    for r in range(args.rounds):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for v in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                models[v].train_on_batch(batch, labels)
            samples[v].append((time.perf_counter() - start) / args.steps)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{v} {samples[v][-1] * 1e3:.1f} ms" for v in variants),
              file=sys.stderr, flush=True)
    base = samples[variants[0]]
    return {
        "preset": args.preset, "shape": shape, "fused_kernels": args.fused_kernels, "rounds": args.rounds, "steps": args.steps,
        "baseline": variants[0],
        "results": {v: {"median_ms": statistics.median(s) * 1e3,
                        "paired_ratio": statistics.median(a / b for a, b in zip(s, base))}
                    for v, s in samples.items()},
    }


def main(argv=None):
    args = parse_args(argv)
    result = measure(args)
    print(f"# model.fit step (train_on_batch), preset {args.preset}, fused kernels {args.fused_kernels}, "
          f"{args.rounds} rounds x {args.steps} steps")
    print("| variant | step (median) | / BERT (paired) |")
    print("|---|---|---|")
    for name, row in result["results"].items():
        print(f"| {name} | {row['median_ms']:.1f} ms | {row['paired_ratio']:.3f}x |")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
