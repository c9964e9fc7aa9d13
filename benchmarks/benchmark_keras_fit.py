#!/usr/bin/env python
"""Training step time of the variants through the public Keras API, as a Keras user
runs them: a Functional classifier on `modeling.BertModel`, `model.compile` with
Keras' AdamW, `model.train_on_batch` (the compiled step `model.fit` runs), nothing
set beyond the layers' defaults (the fused CPU kernels included).

    .venv/bin/python benchmarks/benchmark_keras_fit.py                  # small preset
    .venv/bin/python benchmarks/benchmark_keras_fit.py --rounds 30 --json_out /tmp/fit.json
    .venv/bin/python benchmarks/benchmark_keras_fit.py --mode predict   # predict_on_batch

`--mode predict` times `model.predict_on_batch` instead, each variant twice: as the
layers run it (TensorFlow's ops: the fused kernels run in training calls only, so that
exported inference graphs load without the package) and as `VARIANT+inference_kernels`,
with the LayerNorm kernels forced on in inference too (how the layers ran predict before
that rule), and as `VARIANT+xla`, compiled with `jit_compile=True` (XLA fuses the
LayerNorms' elementwise ops itself); the paired ratio is then to the same variant with
the kernels.

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
    p.add_argument("--mode", choices=("fit", "predict"), default="fit",
                   help="predict: predict_on_batch, each variant without and with the kernels in inference")
    p.add_argument("--json_out")
    return p.parse_args(argv)


def inference_kernels(build_model):
    """`build_model()` with the LayerNorms using the fused kernels in inference calls
    too (unfolded, as inference is), while the model traces its predict function
    (patched on the class for that long): how the layers ran predict before inference
    calls kept to TensorFlow's ops."""
    from keras import ops

    from realformer_tf.layers import folding, normalization

    cls = normalization.LayerNorm
    own = {name: getattr(cls, name) for name in ("call", "split_affine", "activate_normalize_and_project")}

    def activate_normalize_and_project(self, x, hidden_act, dense, training=False):
        if hidden_act != "gelu":
            return own["activate_normalize_and_project"](self, x, hidden_act, dense, training)
        xhat = normalization._gelu_standardize(x, self.epsilon, self._stats_dtype(x), self.fused_kernels)
        return folding.project(dense, ops.cast(xhat, dense.compute_dtype), (self.gamma, self.beta), bool(training))

    cls.call = lambda self, inputs, training=False: own["call"](self, inputs, True)
    cls.split_affine = lambda self, inputs, training=False: own["split_affine"](self, inputs, True)
    cls.activate_normalize_and_project = activate_normalize_and_project
    try:
        return build_model()
    finally:
        for name, method in own.items():
            setattr(cls, name, method)


def build(variant, shape, dropout, fused_kernels=True, jit_compile=False):
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
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=jit_compile)
    return model


def steppers(args, batch, labels):
    """({name: one step of that model, already warmed up}, {name: its ratio's baseline})."""
    shape = PRESETS[args.preset]
    variants = [v for v in args.variants.split(",") if v]
    fused = args.fused_kernels == "on"

    def warmed(step):
        for _ in range(args.warmup):  # in predict mode the first call traces the function
            step()
        return step

    def fit_step(variant):
        model = build(variant, shape, args.dropout, fused)
        return warmed(lambda: model.train_on_batch(batch, labels))

    def predict_step(variant, jit_compile=False):
        model = build(variant, shape, args.dropout, fused, jit_compile)
        return warmed(lambda: model.predict_on_batch(batch))

    if args.mode == "fit":
        return {v: fit_step(v) for v in variants}, {v: variants[0] for v in variants}
    steps, baselines = {}, {}
    for v in variants:
        steps[f"{v}+inference_kernels"] = inference_kernels(lambda: predict_step(v))
        steps[v] = predict_step(v)
        steps[f"{v}+xla"] = predict_step(v, jit_compile=True)
        for name in (v, f"{v}+inference_kernels", f"{v}+xla"):
            baselines[name] = f"{v}+inference_kernels"
    return steps, baselines


def measure(args):
    import numpy as np

    shape = PRESETS[args.preset]
    ids, mask, segments = input_arrays(shape, seed=0)
    batch = {"input_ids": ids, "input_mask": mask, "segment_ids": segments}
    steps, baselines = steppers(args, batch, np.arange(shape["batch_size"]) % 2)
    names = list(steps)
    samples = {name: [] for name in names}
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # the start rotates
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[name]()
            samples[name].append((time.perf_counter() - start) / args.steps)
        print(f"round {r + 1}/{args.rounds}: " + ", ".join(f"{n} {samples[n][-1] * 1e3:.1f} ms" for n in names),
              file=sys.stderr, flush=True)
    return {
        "mode": args.mode, "preset": args.preset, "shape": shape, "fused_kernels": args.fused_kernels,
        "rounds": args.rounds, "steps": args.steps,
        "results": {name: {"median_ms": statistics.median(s) * 1e3, "baseline": baselines[name],
                           "paired_ratio": statistics.median(a / b for a, b in zip(s, samples[baselines[name]]))}
                    for name, s in samples.items()},
    }


def main(argv=None):
    args = parse_args(argv)
    result = measure(args)
    step = "model.fit step (train_on_batch)" if args.mode == "fit" else "predict_on_batch"
    print(f"# {step}, preset {args.preset}, fused kernels {args.fused_kernels}, "
          f"{args.rounds} rounds x {args.steps} steps")
    print("| variant | step (median) | / baseline (paired) | baseline |")
    print("|---|---|---|---|")
    for name, row in result["results"].items():
        print(f"| {name} | {row['median_ms']:.1f} ms | {row['paired_ratio']:.3f}x | {row['baseline']} |")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
