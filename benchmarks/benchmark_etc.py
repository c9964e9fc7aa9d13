"""ETC global-local attention vs full (dense) attention: time and peak memory as the
long input grows.

  global-local  `GlobalLocalEncoder` (blocked local attention, block_len = radius + 1,
                plus G = L / global_ratio global tokens, relative positions on, RealFormer
                residual scores on) over L long + G global tokens
  dense         `TransformerEncoder` (full attention, RealFormer residual scores on) over
                the same L + G tokens concatenated: quadratic in L

Each configuration runs in its own subprocess (so peak memory is its own): build, trace
the tf.function, then time `repeats` compiled steps (forward + backward by default) and
report the median. Memory: growth of the process's peak RSS over the step (ru_maxrss
after - before the first run; on CPU TF has no allocator statistics), plus the exact
number of attention-score elements per layer (what dominates at long lengths).

  python benchmarks/benchmark_etc.py                       # 512..4096, writes the table
  python benchmarks/benchmark_etc.py --lengths 512,1024 --mode fwd --output ''
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras is imported

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def global_len_for(impl, L, args):
    """G = L / global_ratio, except `etc_fixed_g` (G = --fixed_global_len for every L)."""
    if impl == "etc_fixed_g":
        return args.fixed_global_len
    return max(1, L // args.global_ratio)


def score_elements(impl, L, G, heads, radius, batch=1, part="all"):
    """Attention-score elements of one layer (the carried score tensors). For ETC,
    part="local" counts only the blocked l2l part (linear in L); the rest (l2g, g2g,
    g2l) is L*G + G*(G+L), quadratic when G grows with L."""
    if impl == "dense":
        return batch * heads * (L + G) ** 2
    bl = radius + 1
    nb = -(-L // bl)
    local = nb * bl * 3 * bl
    if part == "local":
        return batch * heads * local
    return batch * heads * (local + nb * bl * G + G * (G + L))


def run_child(args, impl, L):
    import numpy as np
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    sys.path.insert(0, ROOT)
    from realformer_tf.layers import GlobalLocalEncoder, TransformerEncoder

    G = global_len_for(impl, L, args)
    rng = np.random.default_rng(0)
    common = dict(num_layers=args.layers, num_heads=args.heads, intermediate_size=4 * args.hidden,
                  hidden_dropout=0.0, attention_dropout=0.0, residual_attention=True)
    x_long = tf.constant(rng.normal(size=(args.batch, L, args.hidden)).astype(np.float32))
    x_global = tf.constant(rng.normal(size=(args.batch, G, args.hidden)).astype(np.float32))
    if impl in ("etc", "etc_fixed_g"):
        model = GlobalLocalEncoder(local_radius=args.local_radius, relative_pos_max_distance=12,
                                   relative_vocab_size=32, **common)
        side = {"l2l_att_mask": tf.ones([args.batch, L], tf.int32)}

        def forward():
            out = model(x_long, x_global, side_inputs=side, training=True)
            return tf.reduce_mean(out["long_output"] ** 2) + tf.reduce_mean(out["global_output"] ** 2)

        model(x_long[:, :64], x_global[:, :2])  # create the variables on a SHORT input
    else:
        model = TransformerEncoder(**common)
        x_all = tf.concat([x_long, x_global], axis=1)
        mask = tf.ones([args.batch, L + G], tf.int32)

        def forward():
            out = model(x_all, attention_mask=mask, training=True)
            return tf.reduce_mean(out["sequence_output"] ** 2)

        model(x_all[:, :64])  # create the variables on a SHORT input (keeps the peak clean)

    @tf.function
    def step():
        if args.mode == "fwd":
            return forward()
        with tf.GradientTape() as tape:
            loss = forward()
        grads = tape.gradient(loss, model.trainable_variables)
        return loss + tf.add_n([tf.reduce_sum(g) for g in grads]) * 0.0

    t0 = time.perf_counter()
    step.get_concrete_function()
    trace_s = time.perf_counter() - t0
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    float(step())  # first run: graph optimization + allocation
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        float(step())
        times.append(time.perf_counter() - t0)
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times.sort()
    return {
        "impl": impl, "L": L, "G": G, "median_s": times[len(times) // 2], "min_s": times[0],
        "first_s": first_s, "trace_s": trace_s,
        "peak_rss_growth_mb": (rss_after - rss_before) / 1024.0,
        "peak_rss_mb": rss_after / 1024.0,
        "score_elements_per_layer": score_elements(impl, L, G, args.heads, args.local_radius, args.batch),
    }


def ratio(cur, prev):
    if cur is None or prev is None or prev <= 0:
        return "-"
    return f"{cur / prev:.2f}x"


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", default="512,1024,2048,4096")
    p.add_argument("--impls", default="etc,dense,etc_fixed_g",
                   help="etc: G = L/global_ratio; dense; etc_fixed_g: G = --fixed_global_len")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--local_radius", type=int, default=31, help="block_len = radius + 1 = 32")
    p.add_argument("--global_ratio", type=int, default=32, help="G = L / global_ratio")
    p.add_argument("--fixed_global_len", type=int, default=16, help="G of the etc_fixed_g rows")
    p.add_argument("--mode", choices=("fwd_bwd", "fwd"), default="fwd_bwd")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--threads", type=int, default=1,
                   help="TF intra/inter-op threads (1: steadier timings on a shared machine; 0: TF default)")
    p.add_argument("--timeout", type=float, default=150.0, help="seconds per configuration")
    p.add_argument("--output", default=os.path.join(ROOT, "benchmarks", "results", "etc_latest.md"))
    p.add_argument("--child", nargs=2, metavar=("IMPL", "L"), help=argparse.SUPPRESS)
    args = p.parse_args()

    if args.child:
        print("RESULT " + json.dumps(run_child(args, args.child[0], int(args.child[1]))), flush=True)
        return

    lengths = [int(x) for x in args.lengths.split(",")]
    impls = args.impls.split(",")
    passthrough = [f"--{k}={getattr(args, k)}" for k in
                   ("layers", "hidden", "heads", "batch", "local_radius", "global_ratio", "mode", "repeats",
                    "threads", "fixed_global_len")]
    results, notes = {}, []
    wall0 = time.perf_counter()
    for impl in impls:
        skip_rest = False
        for L in lengths:
            if skip_rest:
                notes.append(f"{impl} L={L}: not run (a shorter length already exceeded the time limit)")
                results[(impl, L)] = None
                continue
            cmd = [sys.executable, os.path.abspath(__file__), "--child", impl, str(L)] + passthrough
            t0 = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if proc.returncode or not lines:
                    raise RuntimeError(proc.stderr.strip().splitlines()[-1:] or ["no result"])
                r = json.loads(lines[-1][len("RESULT "):])
            except subprocess.TimeoutExpired:
                r = None
                skip_rest = True
                notes.append(f"{impl} L={L}: exceeded --timeout={args.timeout:.0f}s; not measured")
            except RuntimeError as e:
                r = None
                notes.append(f"{impl} L={L}: failed ({e})")
            results[(impl, L)] = r
            status = "-" if r is None else f"{r['min_s']:.3f}s/step, +{r['peak_rss_growth_mb']:.0f} MB"
            print(f"{impl:6s} L={L:5d}: {status}  ({time.perf_counter() - t0:.0f}s incl. start-up)", flush=True)

    header = (f"{args.mode} ({'forward + backward' if args.mode == 'fwd_bwd' else 'forward'}), "
              f"{args.layers} layer(s), hidden {args.hidden}, {args.heads} heads, batch {args.batch}, "
              f"local_radius {args.local_radius} (block_len {args.local_radius + 1}), "
              f"G = L/{args.global_ratio}, relative_pos_max_distance 12 (ETC side), residual attention on, "
              f"{args.threads or 'default'} TF thread(s)")
    rows = ["| impl | L | G | min s/step | x per doubling | median s/step | peak RSS growth MB "
            "| x per doubling | score elements/layer | x per doubling | of which local (l2l) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for impl in impls:
        prev = None
        for L in lengths:
            r = results.get((impl, L))
            if r is None:
                G = global_len_for(impl, L, args)
                rows.append(f"| {impl} | {L} | {G} | not measured | - | - | - | - | "
                            f"{score_elements(impl, L, G, args.heads, args.local_radius, args.batch):,} | - | - |")
                prev = None
                continue
            local = ("-" if impl == "dense" else
                     f"{score_elements(impl, L, r['G'], args.heads, args.local_radius, args.batch, 'local'):,}")
            rows.append(
                f"| {impl} | {L} | {r['G']} | {r['min_s']:.3f} | {ratio(r['min_s'], prev and prev['min_s'])} "
                f"| {r['median_s']:.3f} "
                f"| {r['peak_rss_growth_mb']:.0f} | {ratio(r['peak_rss_growth_mb'], prev and prev['peak_rss_growth_mb'])} "
                f"| {r['score_elements_per_layer']:,} "
                f"| {ratio(r['score_elements_per_layer'], prev and prev['score_elements_per_layer'])} | {local} |")
            prev = r
    speed = []
    for L in lengths:
        e, d = results.get(("etc", L)), results.get(("dense", L))
        if e and d:
            speed.append(f"L={L}: dense/etc time {d['min_s'] / e['min_s']:.2f}x, "
                         f"memory {d['peak_rss_growth_mb'] / max(e['peak_rss_growth_mb'], 1e-9):.2f}x")
    text = "\n".join(
        ["# ETC global-local vs dense attention", "",
         f"Command: `python benchmarks/benchmark_etc.py {' '.join(sys.argv[1:])}`".rstrip(), "",
         header + ".", "",
         f"Machine: {os.cpu_count()} CPU core(s) shared with other jobs (timings are noisy; "
         f"medians of {args.repeats}). Total wall time {time.perf_counter() - wall0:.0f}s.", ""]
        + rows + [""]
        + (["Dense / global-local at equal L: " + "; ".join(speed), ""] if speed else [])
        + (["Notes:"] + [f"- {n}" for n in notes] + [""] if notes else [])
        + ["Linear scaling shows as ~2x per doubling, quadratic as ~4x. Ratios use the min "
           "time (least disturbed by other jobs). Peak RSS growth is the process's peak resident "
           "memory during the first compiled step and the timed steps, minus before (variables "
           "are created on a short input first; it includes graph-optimization overhead, which "
           "dominates at short lengths); score elements are exact. With G = L/global_ratio the "
           "global parts (l2g, g2g, g2l: L*G + G*(G+L) scores) grow quadratically, with a "
           "global_ratio-times smaller constant than dense; the blocked local part (last "
           "column) is exactly linear; the etc_fixed_g rows (G fixed) show the linear "
           "regime of the whole layer.", ""]
    )
    print()
    print(text)
    if args.output:
        os.makedirs(os.path.dirname(args.output), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(text)
        print(f"Written to {args.output}")


if __name__ == "__main__":
    main()
