#!/usr/bin/env python
"""Where the step time goes: op-level profile of the encoder variants (graph mode, no XLA).

    .venv/bin/python benchmarks/profile_encoder.py --variants bert,normformer,model_garden

Builds the same models and the same forward+backward step as `benchmark_encoder.py`,
then records `--steps` rounds (round-robin over the variants, so a busy spell of a
shared machine hits them alike) under `tf.profiler.experimental` and reads the
trace (`*.xplane.pb`) back: every TensorFlow op event on the executor threads is
attributed to its variant (the op name starts with the model's name, forward, or with
`gradient_tape/<model>` for the backward pass) and to a component by its name
(projections, attention core, layer norms, gelu, dropout, ...). Times are summed op
durations per step, i.e. CPU time spent inside ops, which is the part of the step the
model code controls; the rest (executor overhead, idle waits) is shown as "outside ops".

`--top N` also lists the N most expensive op types per variant.
"""

import argparse
import collections
import glob
import os
import re
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchmark_encoder as be  # noqa: E402  (sets up TF env and sys.path)
import tensorflow as tf  # noqa: E402

# (component, regex on the op name below the model's scope); first match wins.
COMPONENTS = [
    ("embeddings", r"embedding|position|type_embeddings|word_embeddings"),
    ("attn dropout", r"(attention|self_attention)[^/]*/(dropout|.*probability_dropout)"),
    ("hidden dropout", r"dropout"),
    ("layer norms", r"layer_norm|LayerNorm"),
    ("head scale", r"head_scale|mul_1?$"),
    ("qkv projections", r"(query|key|value)[^/]*/"),
    ("attn output proj", r"(attention|self_attention)[^/]*/(output|attention_output)[^/]*/"),
    ("ffn matmuls", r"(intermediate|output)[^/]*/(Tensordot|MatMul|BiasAdd|einsum|add)"),
    ("gelu", r"[Gg]elu"),
    ("attn scores/softmax", r"(attention|self_attention)"),
    ("pooler", r"pooler|pooler_transform"),
]


def classify(op_name):
    for label, pattern in COMPONENTS:
        if re.search(pattern, op_name):
            return label
    return "other"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--preset", choices=sorted(be.PRESETS), default="small")
    p.add_argument("--variants", default="bert,realformer,normformer,model_garden")
    p.add_argument("--steps", type=int, default=5, help="profiled rounds")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=8, help="op types listed per variant")
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--logdir", help="keep the trace here (default: a temp dir, removed)")
    return p.parse_args(argv)


def model_prefixes(candidate):
    name = candidate.model.name
    return re.compile(rf"^(gradient_tape/)?{re.escape(name)}(_\d+)?/(.*)$")


def read_trace(logdir):
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    space = xplane_pb2.XSpace()
    with open(files[-1], "rb") as f:
        space.ParseFromString(f.read())
    events = []  # (op name, op type, microseconds)
    for plane in space.planes:
        meta = plane.event_metadata
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for e in line.events:
                full = meta[e.metadata_id].name
                if ":" not in full or "::" in full:
                    continue
                name, op_type = full.rsplit(":", 1)
                events.append((name, op_type, e.duration_ps / 1e6))
    return events


def main(argv=None):
    args = parse_args(argv)
    bench_args = be.parse_args(["--preset", args.preset, "--variants", args.variants,
                                "--dropout", str(args.dropout)])
    shape = be.shape_config(bench_args)
    inputs = be.make_inputs(shape, bench_args.seed)
    cands = [be.build_model_garden(shape, bench_args, inputs) if n == be.MODEL_GARDEN
             else be.build_ours(n, shape, bench_args, inputs) for n in bench_args.variant_names]
    fns = {c.name: be.make_step(c, False) for c in cands}
    for fn in fns.values():
        for _ in range(args.warmup):
            float(fn(*inputs)[0])

    logdir = args.logdir or tempfile.mkdtemp(prefix="rf_profile_")
    wall = collections.Counter()
    tf.profiler.experimental.start(logdir)
    for r in range(args.steps):
        for c in cands[r % len(cands):] + cands[:r % len(cands)]:
            t0 = time.perf_counter()
            float(fns[c.name](*inputs)[0])
            wall[c.name] += time.perf_counter() - t0
    tf.profiler.experimental.stop()
    events = read_trace(logdir)
    if not args.logdir:
        shutil.rmtree(logdir, ignore_errors=True)

    patterns = {c.name: model_prefixes(c) for c in cands}
    by_comp = {c.name: collections.Counter() for c in cands}
    by_type = {c.name: collections.Counter() for c in cands}
    unattributed = 0.0
    for name, op_type, us in events:
        for cname, pat in patterns.items():
            m = pat.match(name)
            if m:
                direction = "bwd" if m.group(1) else "fwd"
                by_comp[cname][(classify(m.group(3)), direction)] += us
                by_type[cname][op_type] += us
                break
        else:
            unattributed += us

    names = [c.name for c in cands]
    comps = sorted({k for c in by_comp.values() for k in c},
                   key=lambda k: -by_comp[names[0]].get(k, 0))
    steps = args.steps
    width = max(len(n) for n in names) + 2
    print(f"\nms per step inside ops (sum over executor threads), preset {args.preset}, "
          f"{steps} interleaved profiled steps")
    print(f"{'component':<28}" + "".join(f"{n:>{width}}" for n in names))
    for comp in comps:
        label = f"{comp[0]} ({comp[1]})"
        print(f"{label:<28}" + "".join(f"{by_comp[n].get(comp, 0) / steps / 1e3:>{width}.1f}"
                                       for n in names))
    totals = {n: sum(by_comp[n].values()) / steps / 1e3 for n in names}
    print(f"{'TOTAL inside ops':<28}" + "".join(f"{totals[n]:>{width}.1f}" for n in names))
    print(f"{'wall per step':<28}" + "".join(f"{wall[n] / steps * 1e3:>{width}.1f}" for n in names))
    print(f"(ops outside any model scope, e.g. the loss: {unattributed / steps / 1e3:.1f} ms/step "
          "in total)")
    for n in names:
        print(f"\ntop op types, {n}:")
        for op_type, us in by_type[n].most_common(args.top):
            print(f"  {op_type:<32}{us / steps / 1e3:8.1f} ms  ({us / sum(by_type[n].values()):.0%})")


if __name__ == "__main__":
    main()
