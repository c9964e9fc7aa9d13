#!/usr/bin/env python
"""GPU training step: RealFormer and NormFormer vs vanilla BERT under JAX/XLA, with the
distance to the chip's bf16 peak and to a bare loop of the same matmuls.

    KERAS_BACKEND=jax python benchmarks/benchmark_gpu.py                 # BERT-Base, GPU
    KERAS_BACKEND=jax python benchmarks/benchmark_gpu.py --precisions bfloat16,float32 \
        --seq 128,512 --batch 256,64 --json_out /tmp/gpu.json
    KERAS_BACKEND=jax python benchmarks/benchmark_gpu.py --layers 2 --hidden 64 --heads 2 \
        --seq 32 --batch 4 --repeats 3 --steps 2                         # smoke run on CPU

Runs on whatever `jax.devices()` offers first (the GPU where there is one). Needs Keras 3
and JAX only: the package imports without TensorFlow.

Step: `modeling.BertModel` (embeddings, `TransformerEncoder`, pooler; vocab 30522, 512
positions, 2 segments, tanh-gelu, dropout 0.1; `bench_inputs.bert_config`), in training
mode on a fixed batch with ragged padding; `loss = mean(sequence_output^2) +
mean(pooled_output^2)` (as benchmark_limit.py), gradients of every weight, global-norm
clipping to 1.0 and BERT's AdamW update (weight decay 0.01, not on LayerNorm/bias/scales;
constant learning rate: the warmup schedule costs nothing measurable). One `jax.jit`
function per variant (Keras' `stateless_call` + `jax.value_and_grad` +
`optimizer.stateless_apply`, the way Keras' own JAX trainer steps), state donated.
Precisions: `bfloat16` = Keras' `mixed_bfloat16` policy (float32 weights and optimizer,
bfloat16 matmuls); `float32` = float32 everywhere (JAX's default matmul precision, which
on NVIDIA tensor-core GPUs runs float32 matmuls as TF32).

Variants (benchmark_encoder.py's names and BertConfig fields): `vanilla` (post-LN),
`realformer` (post-LN + residual attention), `normformer`, `realformer_normformer`.

Reference functions, timed in the same rounds:
- `bare`: the step's matmul and einsum shapes alone (benchmark_limit.py's `bare`:
  Q/K/V/output projections and FFN as [B*L, H] x [H, O] matmuls, the attention as the
  library's two einsums, chained layer after layer, plus the pooler), forward and
  backward in one jitted function: the matmul limit of this step on this chip.
- `dense`: one N x N x N matmul (N = `--dense_size`, 8192 on GPU): the chip's matmul
  rate on large square shapes.

Model FLOPs count the matmuls and einsums only (benchmark_limit.py's convention): per
layer and token 4 H^2 + 2 H I + 2 L H multiply-adds, plus the pooler, x2 for FLOPs, x3
for forward + backward; every variant does the same model FLOPs. `of peak` = model
FLOP/s / the chip's dense spec (`--peak_tflops`; H100/H200 SXM bf16: 989 TFLOP/s);
`of bare` = bare time / step time.

Timing: every function is compiled first (`--compile_threads` at once; compile time and
XLA's temp buffer size per function are reported), then `--warmup` untimed calls, then
`--repeats` rounds; each round runs every function `--steps` times back-to-back in
rotated order and waits for the device (`block_until_ready`); the mean is one sample.
Reported: median and 25th-75th percentiles, ratios of medians to vanilla and `paired`
(median over rounds of sample / vanilla's sample of that round). Results are written
after each (precision, seq) config, so a run stopped early keeps what it finished; the
last line printed is the whole result as JSON.
"""

import argparse
import concurrent.futures
import gc
import json
import os
import statistics
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from bench_inputs import MAX_POSITIONS, bert_config, input_arrays  # noqa: E402
from realformer_tf import modeling  # noqa: E402
from realformer_tf.models import variants  # noqa: E402
from realformer_tf.optimization import NO_WEIGHT_DECAY  # noqa: E402

# Names of the variant table (realformer_tf.models.variants); BASELINE always runs (the
# result fields' "vanilla" is this post-LN BERT).
BASELINE = "bert"
VARIANTS = (BASELINE, "realformer", "normformer", "realformer_normformer")
# Dense (no sparsity) tensor-core spec by device kind, TFLOP/s: {precision: peak}.
SPEC_PEAK_TFLOPS = {
    "H200": {"bfloat16": 989.0, "float32": 494.0},  # float32 as TF32 (JAX's default)
    "H100": {"bfloat16": 989.0, "float32": 494.0},
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--hidden", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--intermediate", type=int, help="default 4 x hidden")
    p.add_argument("--seq", default="128,512", help="comma list of sequence lengths")
    p.add_argument("--batch", default="256,64", help="comma list, one per --seq (or one for all)")
    p.add_argument("--precisions", default="bfloat16", help="comma list of bfloat16, float32")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of variant names; {BASELINE} always added")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--repeats", type=int, default=10, help="timed rounds")
    p.add_argument("--steps", type=int, default=5, help="calls per function per round")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per function after compiling")
    p.add_argument("--dense_size", type=int, help="N of the N^3 matmul (default 8192 on GPU, 1024 else)")
    p.add_argument("--compile_threads", type=int, default=4, help="functions compiled at once")
    p.add_argument("--peak_tflops", type=float, help="bf16 dense peak (default: by device kind)")
    p.add_argument("--time_budget_s", type=float, default=0,
                   help="start no new config after this many seconds (0: no limit)")
    p.add_argument("--json_out")
    p.add_argument("--markdown_out")
    return validate_args(p, p.parse_args(argv))


def validate_args(parser, args):
    def ints(flag, text):
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            parser.error(f"--{flag}={text!r}: expected comma-separated integers")
        if not values or min(values) <= 0:
            parser.error(f"--{flag}={text!r}: expected positive integers")
        return values

    args.intermediate = args.intermediate or 4 * args.hidden
    args.seq = ints("seq", args.seq)
    args.batch = ints("batch", args.batch)
    if len(args.batch) == 1:
        args.batch = args.batch * len(args.seq)
    if len(args.batch) != len(args.seq):
        parser.error(f"--batch has {len(args.batch)} values for {len(args.seq)} --seq values; "
                     "give one per sequence length or one for all")
    if max(args.seq) > MAX_POSITIONS:
        parser.error(f"--seq {max(args.seq)}: at most {MAX_POSITIONS} (BERT's position table)")
    if args.hidden % args.heads:
        parser.error(f"--hidden {args.hidden} is not a multiple of --heads {args.heads}")
    args.precisions = [x for x in args.precisions.split(",") if x]
    bad = [x for x in args.precisions if x not in ("bfloat16", "float32")]
    if bad or not args.precisions:
        parser.error(f"--precisions: unknown {bad or args.precisions}; use bfloat16, float32")
    names = [variants.ALIASES.get(x, x) for x in args.variants.split(",") if x]  # old names too
    bad = [x for x in names if x not in variants.VARIANTS]
    if bad:
        parser.error(f"--variants: unknown {', '.join(bad)}; use {', '.join(variants.VARIANTS)}")
    args.variants = [BASELINE] + [x for x in names if x != BASELINE]
    if keras.backend.backend() != "jax":
        parser.error(f"KERAS_BACKEND={keras.backend.backend()!r}: this benchmark needs jax")
    return args


def make_inputs(shape, seed):
    """benchmarks/bench_inputs.py's arrays as BertModel's input dict of jnp arrays."""
    ids, mask, segments = (jnp.asarray(a) for a in input_arrays(shape, seed))
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def model_flops(shape):
    """Matmul FLOPs of one forward+backward step (benchmark_limit.model_flops)."""
    b, l, h, i = shape["batch_size"], shape["seq_length"], shape["hidden_size"], shape["intermediate_size"]
    per_layer = b * l * (4 * h * h + 2 * h * i + 2 * l * h)
    return 3 * 2 * (shape["num_layers"] * per_layer + b * h * h)


def make_train_step(model, inputs):
    """(jitted step(state, inputs) -> (loss, state), initial state) for one model."""
    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01, beta_1=0.9, beta_2=0.999,
                                       epsilon=1e-6, global_clipnorm=1.0)
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    model(inputs, training=False)  # build every weight
    optimizer.build(model.trainable_variables)

    def loss_fn(trainable, non_trainable, inputs):
        outputs, non_trainable = model.stateless_call(trainable, non_trainable, inputs, training=True)
        loss = (jnp.mean(jnp.square(outputs["sequence_output"].astype(jnp.float32)))
                + jnp.mean(jnp.square(outputs["pooled_output"].astype(jnp.float32))))
        return loss, non_trainable

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(state, inputs):
        trainable, non_trainable, opt_vars = state
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, inputs)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return loss, (trainable, non_trainable, opt_vars)

    state = tuple([v.value for v in vs] for vs in (model.trainable_variables, model.non_trainable_variables,
                                                   optimizer.variables))
    return jax.jit(step, donate_argnums=0), state


def make_bare(shape, dtype, seed=0):
    """(jitted bare(weights) -> (loss, grads), weights): the step's matmuls alone
    (benchmark_limit.make_bare)."""
    b, l, h, i, n = (shape[k] for k in ("batch_size", "seq_length", "hidden_size", "intermediate_size",
                                        "num_heads"))
    rng = np.random.default_rng(seed)

    def weight(*dims):
        return jnp.asarray(rng.normal(0, dims[0] ** -0.5, size=dims).astype(np.float32))

    weights = {"layers": [dict(q=weight(h, h), k=weight(h, h), v=weight(h, h), o=weight(h, h),
                               w1=weight(h, i), w2=weight(i, h)) for _ in range(shape["num_layers"])],
               "pooler": weight(h, h)}
    x = jnp.asarray(rng.normal(size=(b * l, h)).astype(np.float32) * 0.1, dtype)

    def loss_fn(weights):
        y = x
        for layer in weights["layers"]:
            w = {k: v.astype(dtype) for k, v in layer.items()}
            q, k, v = (jnp.reshape(y @ w[name], (b, l, n, h // n)) for name in "qkv")
            scores = jnp.einsum("bfnd,btnd->bnft", q, k)
            context = jnp.reshape(jnp.einsum("bnft,btnd->bfnd", scores, v), (b * l, h))
            y = ((context @ w["o"]) @ w["w1"]) @ w["w2"]
        first = jnp.reshape(y, (b, l, h))[:, 0]
        return (jnp.sum(y.astype(jnp.float32))
                + jnp.sum((first @ weights["pooler"].astype(dtype)).astype(jnp.float32)))

    return jax.jit(jax.value_and_grad(loss_fn)), weights


def make_dense(size, dtype, seed=0):
    """(jitted a @ b, (a, b)): one size^3 matmul; 2 size^3 FLOPs."""
    rng = np.random.default_rng(seed)
    a, b = (jnp.asarray(rng.normal(size=(size, size)).astype(np.float32), dtype) for _ in range(2))
    return jax.jit(lambda a, b: a @ b), (a, b)


class Timed:
    """One function to time: its compiled form, arguments and (for a step) carried state."""

    def __init__(self, name, jitted, args, carries_state):
        self.name, self.jitted, self.args, self.carries_state = name, jitted, args, carries_state
        self.compiled, self.compile_s, self.temp_bytes, self.samples = None, None, None, []
        self.last_loss = None

    def compile(self, lowered):
        t0 = time.perf_counter()
        self.compiled = lowered.compile()
        self.compile_s = time.perf_counter() - t0
        try:
            self.temp_bytes = int(self.compiled.memory_analysis().temp_size_in_bytes)
        except (AttributeError, TypeError, NotImplementedError):
            self.temp_bytes = None  # not every backend reports it

    def run(self, n):
        out = None
        for _ in range(n):
            out = self.compiled(*self.args)
            if self.carries_state:  # step(state, inputs) -> (loss, new state); old state donated
                self.args = (out[1],) + tuple(self.args[1:])
        jax.block_until_ready(out)
        if self.carries_state and out is not None:
            self.last_loss = float(out[0])


def build_functions(shape, precision, args):
    """The Timed functions of one config: every variant's step, `bare` and `dense`."""
    keras.mixed_precision.set_dtype_policy("mixed_bfloat16" if precision == "bfloat16" else "float32")
    try:
        inputs = make_inputs(shape, 1234)
        timed = []
        for name in args.variants:
            model = modeling.BertModel(bert_config(shape, name, args.dropout), name=f"bert_{name}")
            step, state = make_train_step(model, inputs)
            timed.append(Timed(name, step, (state, inputs), carries_state=True))
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    dtype = jnp.bfloat16 if precision == "bfloat16" else jnp.float32
    bare, weights = make_bare(shape, dtype)
    timed.append(Timed("bare", bare, (weights,), carries_state=False))
    dense, operands = make_dense(args.dense_size, dtype)
    timed.append(Timed("dense", dense, operands, carries_state=False))
    return timed


def compile_all(timed, threads):
    """Traces each function in turn (Python holds the GIL), then compiles them on
    `threads` threads (XLA releases it)."""
    lowered = [(t, t.jitted.lower(*t.args)) for t in timed]
    t0 = time.perf_counter()

    with concurrent.futures.ThreadPoolExecutor(max(1, threads)) as pool:
        list(pool.map(lambda pair: pair[0].compile(pair[1]), lowered))
    return time.perf_counter() - t0


def time_interleaved(timed, args):
    """Warm-up, then rounds over every function, the first rotated each round."""
    for t in timed:
        t.run(args.warmup)
    for r in range(args.repeats):
        for t in timed[r % len(timed):] + timed[:r % len(timed)]:
            t0 = time.perf_counter()
            t.run(args.steps)
            t.samples.append((time.perf_counter() - t0) / args.steps)


def summarize(timed, shape, precision, peak):
    """One result row: per function its times; for the steps FLOP/s and ratios."""
    flops = model_flops(shape)
    by_name = {t.name: t for t in timed}
    med = {t.name: statistics.median(t.samples) for t in timed}
    dense_tflops = 2 * shape["dense_size"] ** 3 / med["dense"] / 1e12
    functions = {}
    for t in timed:
        q25, q75 = np.percentile(t.samples, [25, 75])
        tflops = dense_tflops if t.name == "dense" else flops / med[t.name] / 1e12
        row = dict(median_ms=med[t.name] * 1e3, q25_ms=q25 * 1e3, q75_ms=q75 * 1e3, tflops=tflops,
                   fraction_of_peak=tflops / peak if peak else None, compile_s=t.compile_s,
                   temp_mib=None if t.temp_bytes is None else t.temp_bytes / 2**20, last_loss=t.last_loss)
        if t.name not in ("bare", "dense"):
            row.update(step_ratios(t, by_name, med))
            row["fraction_of_dense_rate"] = tflops / dense_tflops
        functions[t.name] = row
    return dict(precision=precision, shape=shape, model_tflop=flops / 1e12, peak_tflops=peak,
                functions=functions)


def step_ratios(t, by_name, med):
    """A step's time against the baseline BERT's and against the bare matmul loop."""
    vanilla, bare = by_name[BASELINE], by_name["bare"]
    row = dict(time_vs_vanilla=med[t.name] / med[BASELINE],
               paired_vs_vanilla=statistics.median(a / b for a, b in zip(t.samples, vanilla.samples)),
               fraction_of_bare=med["bare"] / med[t.name],
               fraction_of_bare_paired=statistics.median(a / b for a, b in zip(bare.samples, t.samples)))
    if t.temp_bytes and vanilla.temp_bytes:
        row["temp_vs_vanilla"] = t.temp_bytes / vanilla.temp_bytes
    return row


def spec_peak(device, precision, args):
    """The dense spec peak in TFLOP/s for this device and precision, or None."""
    if precision == "bfloat16" and args.peak_tflops:
        return args.peak_tflops
    kind = getattr(device, "device_kind", "")
    return next((p[precision] for name, p in SPEC_PEAK_TFLOPS.items() if name in kind), None)


def measure(seq, batch, precision, args, device):
    shape = dict(num_layers=args.layers, hidden_size=args.hidden, num_heads=args.heads,
                 intermediate_size=args.intermediate, seq_length=seq, batch_size=batch,
                 dense_size=args.dense_size)
    t0 = time.perf_counter()
    timed = build_functions(shape, precision, args)
    compile_wall = compile_all(timed, args.compile_threads)
    build_s = time.perf_counter() - t0
    time_interleaved(timed, args)
    row = summarize(timed, shape, precision, spec_peak(device, precision, args))
    row.update(build_and_compile_s=build_s, compile_wall_s=compile_wall,
               timing_s=time.perf_counter() - t0 - build_s)
    return row


FUNCTION_ORDER = list(variants.VARIANTS) + ["bare", "dense"]


def format_row(row, markdown=False):
    """A table of one config's functions (plain text, or a Markdown table)."""
    s, peak = row["shape"], row["peak_tflops"]
    title = (f"{row['precision']}, seq {s['seq_length']}, batch {s['batch_size']} "
             f"({s['num_layers']}L/{s['hidden_size']}H/{s['num_heads']} heads/{s['intermediate_size']}); "
             f"model {row['model_tflop']:.2f} TFLOP/step; peak {peak or '?'} TFLOP/s; "
             f"dense = {s['dense_size']}^3 matmul")
    head = ["function", "median ms", "p25-p75 ms", f"/{BASELINE}", "paired", "TFLOP/s", "of peak",
            "of bare", "of dense", "XLA temp MiB", "compile s"]
    lines = []
    for name in [n for n in FUNCTION_ORDER if n in row["functions"]]:
        f = row["functions"][name]

        def opt(key, fmt):
            return format(f[key], fmt) if f.get(key) is not None else "-"

        lines.append([name, f"{f['median_ms']:.2f}", f"{f['q25_ms']:.2f}-{f['q75_ms']:.2f}",
                      opt("time_vs_vanilla", ".3f"), opt("paired_vs_vanilla", ".3f"), f"{f['tflops']:.1f}",
                      opt("fraction_of_peak", ".3f"), opt("fraction_of_bare", ".3f"),
                      opt("fraction_of_dense_rate", ".3f"), opt("temp_mib", ".0f"), opt("compile_s", ".1f")])
    if markdown:
        return "\n".join([f"**{title}**", "", "| " + " | ".join(head) + " |",
                          "|" + " --- |" * len(head)] + ["| " + " | ".join(x) + " |" for x in lines])
    widths = [max(len(r[i]) for r in [head] + lines) for i in range(len(head))]
    return "\n".join([title] + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head] + lines])


def environment(device):
    return dict(device=str(device), device_kind=getattr(device, "device_kind", None),
                platform=device.platform, jax=jax.__version__, keras=keras.__version__,
                python=sys.version.split()[0],
                default_matmul_precision=str(jax.config.jax_default_matmul_precision),
                tensorflow_imported="tensorflow" in sys.modules)


def write_outputs(result, args):
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=1)
    if args.markdown_out:
        with open(args.markdown_out, "w") as f:
            f.write("\n\n".join(format_row(r, markdown=True) for r in result["rows"]) + "\n")


def main(argv=None):
    args = parse_args(argv)
    start = time.perf_counter()
    device = jax.devices()[0]
    if args.dense_size is None:
        args.dense_size = 8192 if device.platform == "gpu" else 1024
    print(f"# device {device} ({getattr(device, 'device_kind', '?')}), jax {jax.__version__}, "
          f"keras {keras.__version__}", flush=True)
    result = dict(benchmark="gpu_train_step", args={k: v for k, v in vars(args).items()},
                  environment=environment(device), rows=[], skipped=[])
    configs = [(p, s, b) for p in args.precisions for s, b in zip(args.seq, args.batch)]
    for precision, seq, batch in configs:
        if args.time_budget_s and time.perf_counter() - start > args.time_budget_s:
            result["skipped"].append(dict(precision=precision, seq=seq, batch=batch))
            print(f"# skipped {precision} seq {seq}: past --time_budget_s {args.time_budget_s:g}", flush=True)
            continue
        row = measure(seq, batch, precision, args, device)
        gc.collect()  # the config's models, states and executables
        result["rows"].append(row)
        print(format_row(row), flush=True)
        print(f"# build+compile {row['build_and_compile_s']:.0f}s (compile wall {row['compile_wall_s']:.0f}s),"
              f" timing {row['timing_s']:.0f}s, total {time.perf_counter() - start:.0f}s", flush=True)
        result["environment"]["tensorflow_imported"] = "tensorflow" in sys.modules
        result["total_s"] = time.perf_counter() - start
        write_outputs(result, args)
    result["total_s"] = time.perf_counter() - start
    write_outputs(result, args)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
