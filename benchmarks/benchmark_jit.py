#!/usr/bin/env python
"""Which parts of a training step to compile with XLA on this machine: the evidence for
`Trainer(jit_compile="auto")` (`realformer_tf.training.distribution.resolve_jit_compile`).

    .venv/bin/python benchmarks/benchmark_jit.py                 # small preset, pretraining
    .venv/bin/python benchmarks/benchmark_jit.py --variant normformer --repeats 10

Times the real `Trainer` step (`Trainer.replica_train_step` under the default strategy:
BERT pretraining task, forward, masked-LM + next-sentence loss, backward, clipping,
AdamW update), one `tf.function` per setting, interleaved round by round:

- `false`: nothing compiled;
- `update`: only the optimizer update (unscale, clip, AdamW) compiled, as `auto` does
  on CPUs;
- `true`: the forward+backward and the update compiled, as `auto` does on GPUs/TPUs.

Reports median ms per step, the paired (same-round) ratio to `false` and the ratio of
process CPU time per step (which other processes' load does not inflate). The last line
printed is the whole result as one JSON object.
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

SETTINGS = {"false": (False, False), "update": (False, True), "true": (True, True)}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(be.PRESETS), default="small")
    p.add_argument("--variant", choices=[v for v in be.VARIANTS if v != be.MODEL_GARDEN], default=be.BASELINE)
    p.add_argument("--max_predictions", type=int, default=20)
    p.add_argument("--repeats", type=int, default=8)
    p.add_argument("--steps", type=int, default=2, help="steps per timed sample")
    p.add_argument("--json_out")
    return p.parse_args(argv)


def pretraining_batch(shape, max_predictions, seed=0):
    rng = np.random.default_rng(seed)
    ids, mask, seg = (t.numpy() for t in be.make_inputs(shape, seed))
    b = shape["batch_size"]
    positions = np.sort(rng.choice(np.arange(1, shape["seq_length"] // 2), size=(b, max_predictions)), axis=1)
    return {k: tf.constant(v) for k, v in dict(
        input_ids=ids, input_mask=mask, segment_ids=seg, masked_lm_positions=positions.astype(np.int32),
        masked_lm_ids=np.take_along_axis(ids, positions, 1).astype(np.int32),
        masked_lm_weights=np.ones((b, max_predictions), np.float32),
        next_sentence_labels=rng.integers(0, 2, size=(b, 1)).astype(np.int32)).items()}


def make_trainer_step(setting, config, model_dir):
    import keras

    from realformer_tf import optimization
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(0)
    trainer = Trainer(PretrainingTask(config), tf.distribute.get_strategy(), model_dir,
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-4, 10000, 100),
                      jit_compile=SETTINGS[setting][0])
    trainer.jit_compile, trainer.jit_compile_update = SETTINGS[setting]

    @tf.function
    def step(batch):
        sums = trainer.strategy.run(trainer.replica_train_step, ((batch,),))
        return sums["masked_lm_loss"][0], sums["next_sentence_loss"][0]

    return step


def main(argv=None):
    import tempfile

    args = parse_args(argv)
    shape = dict(be.PRESETS[args.preset])
    config = be.bert_config(shape, args.variant, 0.1)
    batch = pretraining_batch(shape, args.max_predictions)
    tmp = tempfile.mkdtemp()
    steps = {s: make_trainer_step(s, config, os.path.join(tmp, s)) for s in SETTINGS}
    for name, fn in steps.items():
        t0 = time.perf_counter()
        float(fn(batch)[0])
        print(f"# traced/compiled {name} ({time.perf_counter() - t0:.1f}s)", flush=True)
    samples = {s: [] for s in SETTINGS}
    cpu = {s: [] for s in SETTINGS}
    names = list(SETTINGS)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(args.steps):
                out = steps[name](batch)
            float(out[0])
            samples[name].append((time.perf_counter() - t0) / args.steps)
            cpu[name].append((time.process_time() - c0) / args.steps)
    rows = {s: dict(median_ms=statistics.median(v) * 1e3,
                    paired_ratio_to_false=statistics.median(a / b for a, b in zip(v, samples["false"])),
                    cpu_ratio_to_false=statistics.median(cpu[s]) / statistics.median(cpu["false"]))
            for s, v in samples.items()}
    print(f"\nTrainer step, {args.variant}, preset {args.preset} ({shape}), pretraining, AdamW:")
    for s, row in rows.items():
        print(f"  jit {s:<7} {row['median_ms']:8.1f} ms/step   paired ratio to no XLA {row['paired_ratio_to_false']:.3f}"
              f"   CPU-time ratio {row['cpu_ratio_to_false']:.3f}")
    result = {"benchmark": "trainer_step_jit", "variant": args.variant, "shape": shape, "rows": rows,
              "repeats": args.repeats, "loadavg": os.getloadavg()[0],
              "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
