#!/usr/bin/env python
"""Input pipeline throughput (pretraining TFRecords) vs. the training step's.

    .venv/bin/python benchmarks/benchmark_input.py                 # small preset, batch 8
    .venv/bin/python benchmarks/benchmark_input.py --batch_size 32 --json_out /tmp/in.json

1. Writes `--num_files` x `--records_per_file` random pretraining examples in the original
   create_pretraining_data.py layout (input_ids, input_mask, segment_ids,
   masked_lm_positions/ids/weights, next_sentence_labels) to a temp dir.
2. Pipeline alone: `realformer_tf.data.pretraining.make_dataset_fn(..., is_training=True)`
   (file interleave, repeat, shuffle, parse, batch, prefetch), iterated for `--batches`
   batches after a warm-up; examples/s, median of `--repeats`.
3. Training step alone (constant batch) and fed from the pipeline, interleaved:
   `encoder`: BertModel (default config, i.e. RealFormer, post-LN) fwd+bwd as in
   benchmark_encoder.py; `pretraining`: BertPretrainingModel with the masked-LM +
   next-sentence loss (the run_pretraining objective), fwd+bwd, no optimizer update.
   The "fed" time minus the "constant" time is what the input pipeline costs the step
   when it runs on the same cores (here: 2 CPUs shared by both).
Prints a table and, last, one JSON line.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
_HERE = os.path.dirname(os.path.abspath(__file__))
for _path in (os.path.dirname(_HERE), _HERE):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import benchmark_encoder as be  # noqa: E402

tf.get_logger().setLevel("ERROR")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(be.PRESETS), default="small")
    p.add_argument("--batch_size", type=int, help="override the preset's batch size")
    p.add_argument("--max_predictions_per_seq", type=int, default=20)
    p.add_argument("--num_files", type=int, default=4)
    p.add_argument("--records_per_file", type=int, default=512)
    p.add_argument("--batches", type=int, default=200, help="batches per pipeline sample")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--step_repeats", type=int, default=6,
                   help="interleaved samples of the training steps (constant vs fed)")
    p.add_argument("--steps", type=int, default=3, help="training steps per sample")
    p.add_argument("--steps_to_time", default="encoder,pretraining",
                   help="comma-separated subset of encoder, pretraining ('' to skip)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json_out")
    return p.parse_args(argv)


def write_records(directory, num_files, per_file, seq_len, max_preds, vocab, seed):
    rng = np.random.default_rng(seed)

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    files = []
    for f in range(num_files):
        path = os.path.join(directory, f"tf_examples_{f:03d}.tfrecord")
        with tf.io.TFRecordWriter(path) as writer:
            for _ in range(per_file):
                length = int(rng.integers(seq_len // 2, seq_len + 1))
                ids = np.zeros(seq_len, np.int64)
                ids[:length] = rng.integers(1000, vocab, size=length)
                mask = (np.arange(seq_len) < length).astype(np.int64)
                segments = ((np.arange(seq_len) >= length // 2) & (mask == 1)).astype(np.int64)
                n_pred = min(max_preds, max(1, int(round(length * 0.15))))
                positions = np.zeros(max_preds, np.int64)
                positions[:n_pred] = np.sort(rng.choice(np.arange(1, length), n_pred, replace=False))
                lm_ids = np.zeros(max_preds, np.int64)
                lm_ids[:n_pred] = rng.integers(1000, vocab, size=n_pred)
                weights = np.zeros(max_preds, np.float32)
                weights[:n_pred] = 1.0
                example = tf.train.Example(features=tf.train.Features(feature={
                    "input_ids": ints(ids),
                    "input_mask": ints(mask),
                    "segment_ids": ints(segments),
                    "masked_lm_positions": ints(positions),
                    "masked_lm_ids": ints(lm_ids),
                    "masked_lm_weights": tf.train.Feature(
                        float_list=tf.train.FloatList(value=weights.tolist())),
                    "next_sentence_labels": ints([int(rng.integers(0, 2))]),
                }))
                writer.write(example.SerializeToString())
        files.append(path)
    return files


def time_pipeline(dataset, batches, repeats, batch_size):
    it = iter(dataset)
    for _ in range(20):  # warm-up: fill shuffle buffers and prefetch, start threads
        next(it)
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(batches):
            batch = next(it)
        batch["input_ids"].numpy()
        rates.append(batches * batch_size / (time.perf_counter() - t0))
    return rates


def make_steps(kind, shape, args_ns):
    """Returns (step_fn(features) -> loss, description)."""
    from realformer_tf import modeling
    from realformer_tf.jobs.tasks.pretraining import PretrainingTask

    config = be.bert_config(shape, "realformer", 0.1)  # the config defaults: RealFormer, post-LN
    if kind == "encoder":
        model = modeling.BertModel(config, name="bert_input_bench")
        model({"input_ids": tf.zeros([1, 2], tf.int32)})

        @tf.function
        def step(features):
            with tf.GradientTape() as tape:
                out = model({k: features[k] for k in ("input_ids", "input_mask", "segment_ids")},
                            training=True)
                loss = (tf.reduce_mean(tf.square(out["sequence_output"]))
                        + tf.reduce_mean(tf.square(out["pooled_output"])))
            return loss, tape.gradient(loss, model.trainable_variables)

        return step, "BertModel fwd+bwd, " + config.describe()

    task = PretrainingTask(config)
    model = task.build_model()
    model({"input_ids": tf.zeros([1, 2], tf.int32), "masked_lm_positions": tf.zeros([1, 1], tf.int32)})

    @tf.function
    def step(features):
        with tf.GradientTape() as tape:
            outputs = model(features, training=True)
            sums = task.metric_sums(features, outputs)
            loss = sum(s / tf.maximum(c, 1.0) for name, (s, c) in sums.items()
                       if name in task.loss_terms)
        return loss, tape.gradient(loss, model.trainable_variables)

    return step, "BertPretrainingModel (MLM+NSP loss) fwd+bwd, " + config.describe()


def run(args):
    from realformer_tf.data import pretraining as data

    shape = be.shape_config(argparse.Namespace(preset=args.preset, batch_size=args.batch_size,
                                               seq_length=None))
    batch, seq_len = shape["batch_size"], shape["seq_length"]
    tmp = tempfile.mkdtemp(prefix="rf_input_bench_")
    try:
        t0 = time.perf_counter()
        files = write_records(tmp, args.num_files, args.records_per_file, seq_len,
                              args.max_predictions_per_seq, be.VOCAB_SIZE, args.seed)
        write_s = time.perf_counter() - t0
        size_mb = sum(os.path.getsize(f) for f in files) / 2**20
        print(f"# wrote {len(files)} files, {args.num_files * args.records_per_file} records, "
              f"{size_mb:.1f} MiB in {write_s:.1f}s", flush=True)

        dataset_fn = data.make_dataset_fn(files, seq_len, args.max_predictions_per_seq, batch,
                                          is_training=True, seed=args.seed)
        rates = time_pipeline(dataset_fn(), args.batches, args.repeats, batch)
        pipeline = {"examples_per_s": statistics.median(rates), "samples": rates}
        print(f"# pipeline alone: {pipeline['examples_per_s']:.0f} examples/s "
              f"(median of {len(rates)})", flush=True)

        steps = {}
        kinds = [k.strip() for k in args.steps_to_time.split(",") if k.strip()]
        for kind in kinds:
            step, desc = make_steps(kind, shape, args)
            it = iter(dataset_fn())
            constant = next(it)
            for _ in range(2):
                float(step(constant)[0])
                float(step(next(it))[0])
            samples = {"constant": [], "fed": []}
            for r in range(args.step_repeats):
                for mode in (("constant", "fed") if r % 2 == 0 else ("fed", "constant")):
                    t0 = time.perf_counter()
                    for _ in range(args.steps):
                        out = step(constant if mode == "constant" else next(it))
                    float(out[0])
                    samples[mode].append((time.perf_counter() - t0) / args.steps)
            med = {m: statistics.median(v) for m, v in samples.items()}
            steps[kind] = {
                "description": desc,
                "constant_batch_ms": med["constant"] * 1e3,
                "fed_from_pipeline_ms": med["fed"] * 1e3,
                "examples_per_s": batch / med["constant"],
                "fed_examples_per_s": batch / med["fed"],
                "pipeline_headroom": pipeline["examples_per_s"] / (batch / med["constant"]),
                "input_overhead": med["fed"] / med["constant"] - 1.0,
            }
            print(f"# {kind} step: {med['constant'] * 1e3:.1f} ms constant, "
                  f"{med['fed'] * 1e3:.1f} ms fed", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    return {
        "benchmark": "input_pipeline",
        "preset": args.preset,
        "batch_size": batch,
        "seq_length": seq_len,
        "max_predictions_per_seq": args.max_predictions_per_seq,
        "records": args.num_files * args.records_per_file,
        "files": args.num_files,
        "tfrecord_mib": size_mb,
        "pipeline": pipeline,
        "steps": steps,
        "cpu_count": os.cpu_count(),
        "loadavg": os.getloadavg()[0],
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
    }


def format_table(result):
    rows = [("input pipeline (parse+batch)", f"{result['pipeline']['examples_per_s']:.0f}", "-", "-", "-")]
    for kind, s in result["steps"].items():
        rows.append((f"{kind} step, constant batch", f"{s['examples_per_s']:.1f}",
                     f"{s['constant_batch_ms']:.1f}", f"{s['pipeline_headroom']:.0f}x", "-"))
        rows.append((f"{kind} step, fed by pipeline", f"{s['fed_examples_per_s']:.1f}",
                     f"{s['fed_from_pipeline_ms']:.1f}", "-", f"{s['input_overhead']:+.1%}"))
    head = ("what", "examples/s", "ms/step", "pipeline/step", "fed vs constant")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*head), fmt.format(*("-" * w for w in widths))]
                     + [fmt.format(*r) for r in rows])


def main(argv=None):
    args = parse_args(argv)
    result = run(args)
    print()
    print(f"preset {result['preset']}, batch {result['batch_size']}, seq {result['seq_length']}, "
          f"{result['cpu_count']} CPUs, load average {result['loadavg']:.2f}")
    print(format_table(result))
    if args.json_out:
        os.makedirs(os.path.dirname(os.path.abspath(args.json_out)), exist_ok=True)
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
            f.write("\n")
    print(json.dumps(result, separators=(",", ":")))
    return result


if __name__ == "__main__":
    main()
