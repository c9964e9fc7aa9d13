#!/usr/bin/env python
"""Translation speed: the cost of residual attention on the three score paths (and of
Admin, and of both) in the training step, relative to the vanilla post-LN
encoder-decoder (issue 57, "Benchmarks": residual attention on three paths <= 1.03x).

    # a smoke run (under a minute)
    .venv/bin/python benchmarks/benchmark_translation.py --preset tiny --rounds 3
    # the full run (`make bench-translation`, on an idle machine)
    .venv/bin/python benchmarks/benchmark_translation.py --preset issue \
        --json_out benchmarks/results/translation_step.json \
        --markdown_out benchmarks/results/translation_step.md

The package's own training step, as `run_translation.py` runs it: a `Trainer`
(realformer_tf.training.trainer) of the translation task (`TranslationTask`: fairseq's
label-smoothed cross-entropy, `--label_smoothing` 0.1, over the real target tokens),
its `replica_train_step` under the default strategy in one `tf.function` (forward with
dropout, backward, global-norm clipping at 1.0, the package's Adam from
`create_optimizer` with `TranslationJob.optimizer_settings`: betas (0.9, 0.98), eps
1e-8, the inverse square-root schedule, run_translation.py's defaults for the learning
rate, warmup and weight decay), `--jit_compile` as the program's flag (auto: nothing
compiled on a CPU). Each Trainer is set up by `restore_or_initialize` as the program
sets it up, so the Admin variants' residual scales are profiled on the benchmark's
batch first (`TranslationModel.profile_admin`, as on a run's first batch).

Variants: `post_ln` (the vanilla post-LN Transformer, `transformer_wmt_en_de`; the
baseline), `admin` (Admin's profiled residual scales, residual attention off),
`realformer` (residual attention on the encoder self, decoder self and cross paths),
`admin_realformer` (both: RealFormer's Table 7 system). `--preset issue` is
`transformer_wmt_en_de`'s shape (6 + 6 layers, hidden 512, 8 heads, FFN 2048, ReLU,
dropout 0.1, one shared vocabulary of 8000) on batches of 4096 padded tokens a side
(about 3,650 real): 128 pairs of 32 tokens (`--batch_shape 64x64` for 64 pairs of 64);
`--preset tiny` a smoke shape. A batch is what `--max_tokens` bucketing gives: every row of one length
bucket (lengths drawn within 8 tokens of the longest, the rest padding), source ids
ending in </s>, target ids starting with <s>, labels shifted by one; random token ids
(seeded, the same batch for every variant).

Timing: once every variant's Trainer is built, `--warmup` steps per variant, then
`--rounds` rounds; in each round every variant runs `--steps` back-to-back steps (the
start rotated each round) and the mean of that burst is one sample; per round, each
variant's time divided by post_ln's is one paired ratio. Reported: the median step
time, the median paired ratio and the issue's target. The load average at the start
and the end is recorded, and a busy start is warned about (other processes on the
cores move every number). A markdown table, then as the last line the whole result as
one JSON object (`--json_out` saves it, `--markdown_out` the table).
"""

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_HERE), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

from bench_runtime import (  # noqa: E402
    compiled_train_step, environment, set_threads, step_table_rows, timed_rounds, warn_if_busy, write_outputs,
)

PRESETS = {
    "issue": dict(num_layers=6, num_decoder_layers=6, hidden_size=512, num_heads=8, intermediate_size=2048,
                  vocab_size=8000, batch_size=128, source_length=32, target_length=32),
    "tiny": dict(num_layers=2, num_decoder_layers=2, hidden_size=32, num_heads=2, intermediate_size=64,
                 vocab_size=256, batch_size=8, source_length=16, target_length=16),
}
# residual_attention (the encoder's path; the decoder's two follow it) and Admin.
VARIANTS = {
    "post_ln": dict(residual_attention=False, admin_residual_scale=False),
    "admin": dict(residual_attention=False, admin_residual_scale=True),
    "realformer": dict(residual_attention=True, admin_residual_scale=False),
    "admin_realformer": dict(residual_attention=True, admin_residual_scale=True),
}
BASELINE = "post_ln"
# The target (step time / post_ln's).
TARGETS = {"realformer": 1.03}
BUCKET = 8  # rows of one batch are within one length bucket (data.translation.BUCKET_WIDTH)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="issue")
    p.add_argument("--batch_shape", default=None,
                   help="PAIRSxLENGTH, e.g. 64x64 (source and target length; default: the preset's)")
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma list; post_ln is always added")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps per variant (the first traces)")
    p.add_argument("--dropout", type=float, default=0.1,
                   help="hidden and attention dropout (transformer_wmt_en_de's 0.1)")
    p.add_argument("--jit_compile", default="auto", help="as run_translation.py's flag: auto, true, false")
    p.add_argument("--threads", type=int, default=0,
                   help="TensorFlow intra- and inter-op threads (0: TensorFlow's default)")
    p.add_argument("--json_out")
    p.add_argument("--markdown_out")
    return p.parse_args(argv)


def shape_of(args):
    shape = dict(PRESETS[args.preset])
    if args.batch_shape:
        try:
            pairs, length = (int(v) for v in args.batch_shape.lower().split("x"))
        except ValueError:
            raise SystemExit(f"--batch_shape={args.batch_shape!r}: give PAIRSxLENGTH, e.g. 64x64") from None
        shape.update(batch_size=pairs, source_length=length, target_length=length)
    return shape










def translation_config(shape, variant, dropout):
    from realformer_tf.models.translation.config import TranslationConfig

    return TranslationConfig(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                             num_hidden_layers=shape["num_layers"], num_decoder_layers=shape["num_decoder_layers"],
                             num_attention_heads=shape["num_heads"], intermediate_size=shape["intermediate_size"],
                             hidden_act="relu", hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                             max_position_embeddings=max(shape["source_length"], shape["target_length"], 1024),
                             **VARIANTS[variant])


def make_batch(shape, config, seed=0):
    """{source_ids, target_ids, target_labels}: int32 [batch, length], a length bucket's
    batch as `data.translation` pads it (see the module docstring)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    rows = shape["batch_size"]
    source = np.full((rows, shape["source_length"]), config.pad_id, np.int32)
    target = np.full((rows, shape["target_length"]), config.pad_id, np.int32)
    labels = np.full_like(target, config.pad_id)
    low = max(config.pad_id, config.bos_id, config.eos_id) + 1
    for row in range(rows):
        n = int(rng.integers(max(2, shape["source_length"] - BUCKET + 1), shape["source_length"] + 1))
        m = int(rng.integers(max(2, shape["target_length"] - BUCKET + 1), shape["target_length"] + 1))
        source[row, :n] = np.concatenate([rng.integers(low, config.vocab_size, n - 1), [config.eos_id]])
        pieces = rng.integers(low, config.vocab_size, m - 1)
        target[row, :m] = np.concatenate([[config.bos_id], pieces])
        labels[row, :m] = np.concatenate([pieces, [config.eos_id]])
    return {"source_ids": source, "target_ids": target, "target_labels": labels}


def make_trainer_step(config, batch, model_dir, jit_compile):
    """One optimizer step of the package's Trainer (set up as run_translation.py sets
    it up: Admin profiled on `batch`) as a tf.function returning the batch's summed
    label-smoothed loss."""
    import keras
    import tensorflow as tf

    from realformer_tf.families import get_family
    from realformer_tf.jobs.tasks.translation import TranslationJob, TranslationOptions, TranslationTask
    from realformer_tf.training import optimization
    from realformer_tf.training.trainer import Trainer

    options = TranslationOptions()
    settings = TranslationJob().optimizer_settings(options)
    keras.utils.set_random_seed(0)
    task = TranslationTask(config, get_family("translation"), options.label_smoothing, profile_batch=batch)
    trainer = Trainer(task, tf.distribute.get_strategy(), model_dir, jit_compile=jit_compile,
                      optimizer_fn=lambda: optimization.create_optimizer(
                          options.optimizer, options.learning_rate, options.num_train_steps, options.num_warmup_steps,
                          weight_decay=options.weight_decay, **settings))
    trainer.restore_or_initialize()  # a fresh model_dir: the task's initializer (Admin's profiling)
    if trainer.init_message:
        print(f"# {trainer.init_message}", file=sys.stderr, flush=True)

    return compiled_train_step(trainer, "loss")


def measure(args):
    import tensorflow as tf

    shape = shape_of(args)
    names = [BASELINE] + [v for v in args.variants.split(",") if v and v != BASELINE]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    configs = {name: translation_config(shape, name, args.dropout) for name in names}
    arrays = make_batch(shape, configs[BASELINE])
    batch = {k: tf.constant(v) for k, v in arrays.items()}
    tmp = tempfile.mkdtemp(prefix="bench_translation_")
    steps = {name: make_trainer_step(configs[name], arrays, os.path.join(tmp, name), args.jit_compile)
             for name in names}
    # Warm up once every Trainer is built: a step's first call after another Trainer was
    # built took ~0.9 s more (tiny preset; the step was not retraced), which would land in
    # round 1.
    for name in names:
        start = time.perf_counter()
        for _ in range(args.warmup):
            loss = float(steps[name](batch))
        print(f"# {name}: {configs[name].describe()}; traced and warmed up in {time.perf_counter() - start:.1f}s "
              f"(loss sum {loss:.1f})", file=sys.stderr, flush=True)
    results = timed_rounds(steps, batch, BASELINE, args.rounds, args.steps, TARGETS)
    for name, row in results.items():
        row.update(paths=configs[name].paths(), admin=configs[name].admin_residual_scale)
    tokens = {side: int((arrays[f"{side}_ids"] != configs[BASELINE].pad_id).sum()) for side in ("source", "target")}
    return {"benchmark": "translation_step", "preset": args.preset, "shape": shape, "real_tokens": tokens,
            "dropout": args.dropout, "jit_compile": args.jit_compile, "rounds": args.rounds, "steps": args.steps,
            "results": results, "tensorflow": tf.__version__, **environment(args)}


def table(result):
    shape = result["shape"]
    lines = [f"# Translation training step (package Trainer, Adam 0.98 inverse-sqrt, label smoothing 0.1), preset "
             f"{result['preset']} ({shape['num_layers']}+{shape['num_decoder_layers']}L/{shape['hidden_size']}H/"
             f"{shape['num_heads']} heads/{shape['intermediate_size']}, vocab {shape['vocab_size']}, batch "
             f"{shape['batch_size']} x {shape['source_length']} -> {shape['target_length']} tokens, "
             f"{result['real_tokens']['target']} real target tokens), {result['rounds']} rounds x "
             f"{result['steps']} steps, load average {result['loadavg_start']:.2f} at the start"]
    return "\n".join(lines + step_table_rows(result["results"], BASELINE))


def main(argv=None):
    args = parse_args(argv)
    warn_if_busy()
    set_threads(args.threads)
    result = measure(args)
    text = table(result)
    write_outputs(result, text, args.json_out, args.markdown_out)

if __name__ == "__main__":
    main()
