#!/usr/bin/env python
"""Train-step time of the same small RealFormer classifier on TensorFlow, JAX and
PyTorch, in one run, with ratios to TensorFlow.

    .venv/bin/python benchmarks/benchmark_backends.py
    .venv/bin/python benchmarks/benchmark_backends.py --backends jax,torch --steps 20

Each backend runs in its own subprocess (Keras picks its backend once per process) with
the same config, seed, data and optimizer: `BertClassifierModel` (residual attention,
post-LN), Adam, `model.train_on_batch` on one fixed batch. `--jit_compile auto`: XLA
on TensorFlow, jax.jit on JAX, eager on PyTorch (torch.compile takes minutes per model
on CPU). After `--warmup` steps, `--repeats`
bursts of `--steps` steps; a burst's mean step time is one sample; reported: the median
sample and the 25th-75th percentiles. The last line printed is the result as JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import time

CHILD = "--_child"


def _parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="tensorflow,jax,torch")
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq_len", type=int, default=64)
    p.add_argument("--batch_size", type=int, default=16)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--jit_compile", default="auto", choices=["auto", "on", "off"])
    p.add_argument(CHILD, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _child(args):
    """Runs in a subprocess with KERAS_BACKEND set; prints one JSON line."""
    import keras
    import numpy as np

    from realformer_tf import modeling

    keras.utils.set_random_seed(0)
    config = modeling.BertConfig(
        vocab_size=1000, hidden_size=args.hidden, num_hidden_layers=args.layers,
        num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
        max_position_embeddings=args.seq_len)
    model = modeling.BertClassifierModel(config, num_labels=2)
    jit = {"auto": keras.backend.backend() != "torch", "on": True, "off": False}[
        args.jit_compile]
    model.compile(optimizer=keras.optimizers.Adam(1e-4), jit_compile=jit,
                  loss={"logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True)})
    rng = np.random.default_rng(1)
    shape = (args.batch_size, args.seq_len)
    x = {"input_ids": rng.integers(0, 1000, shape).astype("int32"),
         "input_mask": np.ones(shape, "int32"), "segment_ids": np.zeros(shape, "int32")}
    y = {"logits": rng.integers(0, 2, args.batch_size).astype("int32")}
    for _ in range(args.warmup):
        loss = model.train_on_batch(x, y)
    samples = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = model.train_on_batch(x, y)
        samples.append((time.perf_counter() - start) / args.steps)
    q25, median, q75 = np.percentile(samples, [25, 50, 75])
    print(json.dumps({"backend": keras.backend.backend(), "jit_compile": str(model.jit_compile),
                      "median_s": median, "q25_s": q25, "q75_s": q75,
                      "final_loss": float(np.asarray(loss).ravel()[0])}))


def main():
    args = _parse()
    if args.__dict__[CHILD.lstrip("-")]:
        return _child(args)
    results = []
    for backend in args.backends.split(","):
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run([sys.executable, __file__, *sys.argv[1:], CHILD, "1"], env=env,
                             check=True, capture_output=True, text=True).stdout
        results.append(json.loads(out.strip().splitlines()[-1]))
    base = next((r["median_s"] for r in results if r["backend"] == "tensorflow"), None)
    print(f"model: hidden {args.hidden}, {args.layers} layers, {args.heads} heads, "
          f"batch {args.batch_size} x seq {args.seq_len}; train step (forward, backward, Adam)")
    print(f"{'backend':<11} {'jit_compile':<12} {'median ms':>10} {'p25-p75 ms':>15} {'vs TF':>6}")
    for r in results:
        ratio = f"{r['median_s'] / base:.2f}" if base else "-"
        spread = f"{1e3 * r['q25_s']:.1f}-{1e3 * r['q75_s']:.1f}"
        print(f"{r['backend']:<11} {r['jit_compile']:<12} {1e3 * r['median_s']:>10.1f}"
              f" {spread:>15} {ratio:>6}")
    print(json.dumps({"args": {k: v for k, v in vars(args).items() if not k.startswith("_")},
                      "results": results}))


if __name__ == "__main__":
    main()
