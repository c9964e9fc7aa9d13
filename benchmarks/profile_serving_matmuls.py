#!/usr/bin/env python
"""Where a short batch-1 request's time goes: BERT-Base's 72 projection matmuls alone,
in TensorFlow and in onnxruntime, next to a whole SavedModel call on as many tokens.

    .venv/bin/python benchmarks/profile_serving_matmuls.py                # ~3 min, 2 cores
    .venv/bin/python benchmarks/profile_serving_matmuls.py --saved_model=/tmp/serve_work/vanilla/1 \
        --markdown_out=benchmarks/results/serving_matmuls.md

A batch-1 request of a short text is 16 tokens: every one of the 12 layers multiplies
[16, 768] by its query, key, value, attention-output (768 x 768), intermediate
(768 x 3072) and output (3072 x 768) kernels. This script times exactly that chain of
72 matmuls (random float32 weights; the values do not change the time):

* `tf tensordot`: as Keras' `Dense` runs a [batch, length, in] input on TensorFlow
  (`tf.tensordot`: reshape, MatMul, reshape), which is what the SavedModel does;
* `tf einsum`: the same product as one `tf.einsum` (oneDNN's matmul primitive);
* `onnxruntime`: the same chain as an ONNX graph of MatMul nodes (MLAS, weights packed
  at load);

and a whole `serve_token_ids` call of the SavedModel on [1, 16] ids (with
`--saved_model`, or an export of a random BERT-Base classifier made here), at 1 and 2
intra-op threads (1 inter-op thread), each side in its own process, alternating over
`--rounds`. "rest" is the whole call minus the tensordot chain: everything that is not
a projection (attention scores, softmax, layer norms, gelu, embeddings, the executor).

The last line printed is the whole result as one JSON object.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402

HIDDEN, INTERMEDIATE, LAYERS = 768, 3072, 12
# One layer's projections in order: query, key, value, attention output, intermediate, output.
LAYER_SHAPES = [(HIDDEN, HIDDEN)] * 4 + [(HIDDEN, INTERMEDIATE), (INTERMEDIATE, HIDDEN)]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saved_model", help="a raw-text SavedModel of this package (default: export a random BERT-Base)")
    p.add_argument("--tokens", type=int, default=16, help="the request's length in tokens")
    p.add_argument("--calls", type=int, default=40, help="timed calls per measurement and round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", default="1,2", help="intra-op thread counts to compare")
    p.add_argument("--quick", action="store_true", help="2 layers, few calls: checks the script runs")
    p.add_argument("--markdown_out")
    p.add_argument("--json_out")
    p.add_argument("--worker", choices=["tf", "ort"], help=argparse.SUPPRESS)
    p.add_argument("--worker_threads", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.rounds = 3, 1
    return args


def layer_count(args):
    return 2 if args.quick else LAYERS


def random_kernels(layers, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(shape) * 0.02).astype(np.float32)
            for _ in range(layers) for shape in LAYER_SHAPES]


def chain(kernels, x, project, add):
    """The 72 products in the order a layer makes them (q, k, v from the same input; the
    attention output from their sum, standing in for attention)."""
    h = x
    for i in range(0, len(kernels), len(LAYER_SHAPES)):
        w = kernels[i:i + len(LAYER_SHAPES)]
        q, k, v = (project(h, w[j]) for j in range(3))
        h = project(project(project(add(add(q, k), v), w[3]), w[4]), w[5])
    return h


def median_ms(fn, calls):
    for _ in range(3):
        fn()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times) * 1e3)


# -- workers (one process each: TensorFlow's thread counts are fixed per process) ----------
# How the TensorFlow chain runs one projection of [1, tokens, in] by [in, out].
TF_PROJECTIONS = ("tensordot", "einsum")


def tf_chain(kernels, projection):
    """A tf.function computing the chain with `kernels` as variables."""
    import tensorflow as tf

    project = {"tensordot": lambda h, w: tf.tensordot(h, w, [[2], [0]]),  # Keras Dense on TensorFlow
               "einsum": lambda h, w: tf.einsum("bld,dh->blh", h, w)}[projection]
    variables = [tf.Variable(k) for k in kernels]
    return tf.function(lambda x: chain(variables, x, project, tf.add))


def onnx_chain(kernels, tokens):
    """The chain as a serialized ONNX model with one input `x` [1, tokens, 768]."""
    from onnx import TensorProto, helper, numpy_helper

    initializers, nodes = [], []

    def node(op, *inputs):
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op, list(inputs), [out]))
        return out

    def project(h, kernel):
        name = f"w{len(initializers)}"
        initializers.append(numpy_helper.from_array(kernel, name))
        return node("MatMul", h, name)

    out = chain(kernels, "x", project, lambda a, b: node("Add", a, b))
    shape = [1, tokens, HIDDEN]
    graph = helper.make_graph(nodes, "projections", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, shape)], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def request_features(tokens):
    return np.random.default_rng(1).standard_normal((1, tokens, HIDDEN)).astype(np.float32)


def tf_worker(args):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    tf.config.threading.set_intra_op_parallelism_threads(args.worker_threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    kernels, x = random_kernels(layer_count(args)), tf.constant(request_features(args.tokens))
    result = {}
    for name in TF_PROJECTIONS:
        fn = tf_chain(kernels, name)
        result[f"tf {name}"] = median_ms(lambda fn=fn: fn(x).numpy(), args.calls)
    serve = tf.saved_model.load(args.saved_model).signatures["serve_token_ids"]
    ids = tf.constant(np.random.default_rng(2).integers(1000, 2000, (1, args.tokens)), tf.int32)
    ones, zeros = tf.ones_like(ids), tf.zeros_like(ids)
    result["whole call"] = median_ms(
        lambda: serve(input_ids=ids, input_mask=ones, segment_ids=zeros)["probabilities"].numpy(), args.calls)
    return result


def ort_worker(args):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = args.worker_threads, 1
    session = ort.InferenceSession(onnx_chain(random_kernels(layer_count(args)), args.tokens), options,
                                   providers=["CPUExecutionProvider"])
    x = request_features(args.tokens)
    return {"onnxruntime": median_ms(lambda: session.run(None, {"x": x}), args.calls)}


# -- coordinator ------------------------------------------------------------------------------
def export_random_classifier(work_dir, quick):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import benchmark_serving

    model = benchmark_serving.build_classifier("vanilla", "quick" if quick else "base", seed=1)
    return benchmark_serving.export_one(model, os.path.join(work_dir, "vanilla"))


def run_worker(kind, threads, args):
    command = [sys.executable, os.path.abspath(__file__), f"--worker={kind}", f"--worker_threads={threads}",
               f"--tokens={args.tokens}", f"--calls={args.calls}", f"--saved_model={args.saved_model}"]
    if args.quick:
        command.append("--quick")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise SystemExit(f"error: the {kind} worker failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(args):
    thread_counts = [int(t) for t in args.threads.split(",")]
    samples = {t: {} for t in thread_counts}
    for r in range(args.rounds):
        for threads in thread_counts:
            kinds = ("tf", "ort") if r % 2 == 0 else ("ort", "tf")  # alternate who goes first
            for kind in kinds:
                for name, ms in run_worker(kind, threads, args).items():
                    samples[threads].setdefault(name, []).append(ms)
        print(f"round {r + 1}/{args.rounds} done", flush=True)
    return {t: {name: float(np.median(v)) for name, v in s.items()} for t, s in samples.items()}


def markdown(result):
    lines = [
        f"| threads | whole call (ours, 1 x {result['tokens']} ids) | tf tensordot chain | tf einsum chain "
        "| onnxruntime chain | rest of our call | tensordot / onnxruntime |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for threads, row in result["medians"].items():
        rest = row["whole call"] - row["tf tensordot"]
        lines.append(
            f"| {threads} | {row['whole call']:.1f} ms | {row['tf tensordot']:.1f} ms | {row['tf einsum']:.1f} ms "
            f"| {row['onnxruntime']:.1f} ms | {rest:.1f} ms | {row['tf tensordot'] / row['onnxruntime']:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        print(json.dumps(tf_worker(args) if args.worker == "tf" else ort_worker(args)))
        return 0
    with tempfile.TemporaryDirectory(prefix="profile_serving_") as work:
        if not args.saved_model:
            print("exporting a random BERT-Base classifier ...", flush=True)
            args.saved_model = export_random_classifier(work, args.quick)
        medians = measure(args)
    result = {"tokens": args.tokens, "layers": layer_count(args), "calls": args.calls, "rounds": args.rounds,
              "medians": {str(t): row for t, row in medians.items()}}
    table = markdown(result)
    print(table)
    if args.markdown_out:
        with open(args.markdown_out, "w", encoding="utf-8") as f:
            f.write(f"# A 1 x {args.tokens} request: the projection matmuls alone vs the whole call\n\n"
                    f"`benchmarks/profile_serving_matmuls.py`, medians over {args.rounds} rounds of "
                    f"{args.calls} calls, 1 inter-op thread.\n\n" + table)
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
