#!/usr/bin/env python
"""Causal LM speed: the training step of the variants, and cached greedy generation
against Hugging Face transformers' GPT-2 on the same weights (issue 56, "Benchmarks").

    # smoke runs (a minute or two each)
    .venv/bin/python benchmarks/benchmark_causal_lm.py --mode step --preset tiny --rounds 3
    .venv/bin/python benchmarks/benchmark_causal_lm.py --mode generate --shapes tiny --rounds 2 --new_tokens 8
    # the full runs (`make bench-causal-lm`, on an idle machine)
    .venv/bin/python benchmarks/benchmark_causal_lm.py --mode step --preset issue \
        --json_out benchmarks/results/causal_lm_step.json
    .venv/bin/python benchmarks/benchmark_causal_lm.py --mode generate \
        --json_out benchmarks/results/causal_lm_generate.json

`--mode step`: the package's own training step, as `run_pretraining.py
--model_type=causal_lm` runs it: a `Trainer` (realformer_tf.training.trainer) of the
causal LM task (`CausalLMTask`: next-token NLL over the block), its
`replica_train_step` under the default strategy in one `tf.function` (forward with
dropout, backward, global-norm clipping at 1.0, the package's AdamW from
`create_optimizer("adamw", ...)` with its warmup + linear decay), `--jit_compile` as the
program's flag (auto: nothing compiled on a CPU). Variants: `pre_ln` (the vanilla
causal LM, the baseline), `normformer` (layer_norm_type normformer: attention-output
LN, FFN-activation LN, head scale), `realformer` (residual attention on the causal
path) and `realformer_normformer`; `--preset issue` is the issue's shape (6 layers,
hidden 512, 8 heads, intermediate 2048, sequence 512, batch 8, vocab 8192), `--preset
tiny` a smoke shape. After `--warmup` steps, `--rounds` rounds: in each round every
variant runs `--steps` back-to-back steps (the start rotated each round) and the mean
of that burst is one sample; per round, each variant's time divided by pre_ln's is one
paired ratio. Reported: the median step time and the median paired ratio.

`--mode generate`: tokens/s of greedy decoding with the key/value cache, batch 1 and
batch 8 (`--batches`), a prompt of `--prompt_length` (32) random token ids without
padding and `--new_tokens` (64) new tokens, at GPT-2 small's shape (12 layers, 768,
12 heads, 3072, vocab 50257) and a tiny one (2 layers, 128, 2 heads, 512, the same
vocab). Ours: `realformer_tf.serving.decoding.generate` inside one `tf.function`
(traced by the first of the `--warmup` calls per batch size). Theirs: transformers'
`GPT2LMHeadModel.generate(do_sample=False, use_cache=True)` under
`torch.inference_mode()`, end-of-text stopping off (as ours: no `eos_id`), on the same
weights: our randomly initialized model written by
`checkpoints.causal_lm.save_gpt2_folder` and loaded by
`GPT2LMHeadModel.from_pretrained`. Each side runs in a process of its own (spawned;
ours imports no PyTorch, theirs no TensorFlow) with `--threads` threads (TensorFlow's
intra- and inter-op pools; `torch.set_num_threads` and `torch.set_num_interop_threads`),
never at once: this process gives each side its turn, `--calls` calls per round (the
first side alternating), after a `--pause` of idle. (In one process, on the shared
2-core machine this was written on, transformers' calls right after a TensorFlow call
ran up to 6x slower than back to back; the cause was not settled; separate processes
keep each runtime apart.) PyTorch's OpenMP threads slow down far more than
TensorFlow's pool when other processes use the cores: run it on an idle machine (the
load average at the start and the end is recorded, and a busy start is warned about). tokens/s = batch x new
tokens / the calls' wall time inside the worker (the prompt's prefill included, on both
sides); the paired ratio is the median over rounds of ours / theirs within a round.
Before any timing both sides generate from the same prompts and their greedy tokens
must be identical (an AssertionError otherwise, naming the first differing token and
our logits' gap there); every timed call's tokens are checked against those too.

Each mode prints a markdown table, then as the last line the whole result as one JSON
object (`--json_out` saves it, `--markdown_out` the table).
"""

import argparse
import os
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

from bench_runtime import (  # noqa: E402
    compiled_train_step, environment, rotated, set_threads, step_table_rows, timed_rounds, warn_if_busy, write_outputs,
)

STEP_PRESETS = {
    "issue": dict(num_layers=6, hidden_size=512, num_heads=8, intermediate_size=2048, seq_length=512,
                  batch_size=8, vocab_size=8192),
    "tiny": dict(num_layers=2, hidden_size=64, num_heads=2, intermediate_size=128, seq_length=32,
                 batch_size=4, vocab_size=512),
}
STEP_VARIANTS = {
    "pre_ln": dict(layer_norm_type="pre", residual_attention=False),
    "normformer": dict(layer_norm_type="normformer", residual_attention=False),
    "realformer": dict(layer_norm_type="pre", residual_attention=True),
    "realformer_normformer": dict(layer_norm_type="normformer", residual_attention=True),
}
BASELINE = "pre_ln"
# The issue's targets (step time / pre_ln's); generation: ours / transformers' >= 1.0.
STEP_TARGETS = {"normformer": 1.05, "realformer": 1.03}
GENERATE_GOAL = 1.0
GENERATE_SHAPES = {
    "gpt2_small": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072, vocab_size=50257),
    "tiny": dict(num_layers=2, hidden_size=128, num_heads=2, intermediate_size=512, vocab_size=50257),
}
MAX_POSITIONS = 1024  # GPT-2's


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=("step", "generate"), default="step")
    p.add_argument("--rounds", type=int, default=None, help="default: 20 (step), 10 (generate)")
    p.add_argument("--threads", type=int, default=None,
                   help="TensorFlow intra- and inter-op threads (and PyTorch's, generate); 0 = TensorFlow's "
                        "default (default: 0 for step, 2 for generate)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed steps per variant (step, default 3) or calls per side and batch (generate, "
                        "default 2: the first traces ours) before timing")
    p.add_argument("--json_out")
    p.add_argument("--markdown_out")
    step = p.add_argument_group("--mode step")
    step.add_argument("--preset", choices=sorted(STEP_PRESETS), default="issue")
    step.add_argument("--variants", default=",".join(STEP_VARIANTS), help="comma list; pre_ln is always added")
    step.add_argument("--steps", type=int, default=2, help="steps per variant per round")
    step.add_argument("--dropout", type=float, default=0.1, help="hidden and attention dropout (GPT-2's 0.1)")
    step.add_argument("--jit_compile", default="auto", help="as run_pretraining.py's flag: auto, true, false")
    gen = p.add_argument_group("--mode generate")
    gen.add_argument("--shapes", default=",".join(GENERATE_SHAPES), help="comma list of " + ", ".join(GENERATE_SHAPES))
    gen.add_argument("--batches", default="1,8")
    gen.add_argument("--prompt_length", type=int, default=32)
    gen.add_argument("--new_tokens", type=int, default=64)
    gen.add_argument("--calls", type=int, default=1, help="calls per side per round")
    gen.add_argument("--pause", type=float, default=0.5, help="seconds of idle before each side's turn")
    args = p.parse_args(argv)
    if args.rounds is None:
        args.rounds = 20 if args.mode == "step" else 10
    if args.warmup is None:
        args.warmup = 3 if args.mode == "step" else 2
    if args.threads is None:
        args.threads = 0 if args.mode == "step" else 2
    return args











# -- the training step ------------------------------------------------------------------------
def lm_config(shape, variant, dropout):
    from realformer_tf.models.causal_lm.config import CausalLMConfig

    return CausalLMConfig(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                          num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
                          intermediate_size=shape["intermediate_size"],
                          max_position_embeddings=max(shape.get("seq_length", 0), MAX_POSITIONS),
                          hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout,
                          **STEP_VARIANTS[variant])


def make_trainer_step(config, model_dir, jit_compile):
    """One optimizer step of the package's Trainer on a batch, as a tf.function that
    returns the batch's summed next-token loss."""
    import keras
    import tensorflow as tf

    from realformer_tf import optimization
    from realformer_tf.families import get_family
    from realformer_tf.jobs.tasks.causal_lm import CausalLMTask
    from realformer_tf.training.trainer import Trainer

    keras.utils.set_random_seed(0)
    trainer = Trainer(CausalLMTask(config, get_family("causal_lm")), tf.distribute.get_strategy(), model_dir,
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-4, 100000, 100),
                      jit_compile=jit_compile)

    return compiled_train_step(trainer, "lm_loss")


def measure_step(args):
    import numpy as np
    import tensorflow as tf

    shape = STEP_PRESETS[args.preset]
    names = [BASELINE] + [v for v in args.variants.split(",") if v and v != BASELINE]
    unknown = [v for v in names if v not in STEP_VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; choose from {', '.join(STEP_VARIANTS)}")
    rng = np.random.default_rng(0)
    batch = {"input_ids": tf.constant(rng.integers(1, shape["vocab_size"], (shape["batch_size"], shape["seq_length"]),
                                                   dtype=np.int32))}
    tmp = tempfile.mkdtemp(prefix="bench_causal_lm_")
    steps = {}
    for name in names:
        steps[name] = make_trainer_step(lm_config(shape, name, args.dropout), os.path.join(tmp, name),
                                        args.jit_compile)
        start = time.perf_counter()
        for _ in range(args.warmup):
            loss = float(steps[name](batch))
        print(f"# {name}: traced and warmed up in {time.perf_counter() - start:.1f}s (loss sum {loss:.1f})",
              file=sys.stderr, flush=True)
    results = timed_rounds(steps, batch, BASELINE, args.rounds, args.steps, STEP_TARGETS)
    return {"benchmark": "causal_lm_step", "mode": "step", "preset": args.preset, "shape": shape,
            "dropout": args.dropout, "jit_compile": args.jit_compile, "rounds": args.rounds, "steps": args.steps,
            "results": results, "tensorflow": tf.__version__, **environment(args)}


def step_table(result):
    shape = result["shape"]
    lines = [f"# Causal LM training step (package Trainer, AdamW), preset {result['preset']} "
             f"({shape['num_layers']}L/{shape['hidden_size']}H/{shape['num_heads']} heads/"
             f"{shape['intermediate_size']}, seq {shape['seq_length']}, batch {shape['batch_size']}, "
             f"vocab {shape['vocab_size']}), {result['rounds']} rounds x {result['steps']} steps"]
    return "\n".join(lines + step_table_rows(result["results"], BASELINE))


# -- generation -------------------------------------------------------------------------------
# Each side runs in a worker process of its own (only TensorFlow in ours, only PyTorch in
# theirs): in one process, transformers' calls right after a TensorFlow call ran up to 6x
# slower than back to back (no thread of either used CPU in between; a pause of 1 s did
# not make it reliable; measured on a shared machine, cause not settled).
def _build_ours(shape_name, folder):
    """Our CausalLMModel with random weights, also written to `folder` as a GPT-2 folder."""
    import keras

    from realformer_tf.checkpoints import causal_lm as lm_checkpoint
    from realformer_tf.models.causal_lm.config import CausalLMConfig
    from realformer_tf.models.causal_lm.model import CausalLMModel

    shape = GENERATE_SHAPES[shape_name]
    keras.utils.set_random_seed(0)
    config = CausalLMConfig(vocab_size=shape["vocab_size"], hidden_size=shape["hidden_size"],
                            num_hidden_layers=shape["num_layers"], num_attention_heads=shape["num_heads"],
                            intermediate_size=shape["intermediate_size"], max_position_embeddings=MAX_POSITIONS)
    model = CausalLMModel(config)
    model.build()
    lm_checkpoint.save_gpt2_folder(model, folder)
    return model


def our_generator(model, new_tokens):
    """prompt ids [batch, length] (NumPy, no padding) -> the new tokens, by
    `decoding.generate` in one tf.function (traced once per batch size)."""
    import tensorflow as tf

    from realformer_tf.serving import decoding

    @tf.function
    def generate(ids, mask):
        return decoding.generate(model, ids, mask, new_tokens)["ids"]

    return lambda ids: generate(ids, tf.ones_like(ids)).numpy()


def their_generator(model, new_tokens):
    """The same with transformers' generate (greedy, cache, no end-of-text stop)."""
    import torch
    import transformers

    config = transformers.GenerationConfig(max_new_tokens=new_tokens, do_sample=False, use_cache=True,
                                           num_beams=1, eos_token_id=None, bos_token_id=None, pad_token_id=0)

    def generate(ids):
        ids = torch.from_numpy(ids.astype("int64"))
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        return out[:, ids.shape[1]:].numpy()

    return generate


def _serve(conn, side, shape_name, folder, threads, new_tokens):
    """A worker: builds its side, then answers (command, argument) messages:
    "prepare" a prompt (runs it once: the warm-up, ours' trace; returns the tokens),
    "time" `calls` calls on it (returns the seconds and whether every output equals the
    prepared one), "logits" of our model at the end of a sequence, "stop"."""
    import traceback

    try:
        if side == "ours":
            set_threads(threads)
            import tensorflow as tf

            model = _build_ours(shape_name, folder)
            generate, version = our_generator(model, new_tokens), {"tensorflow": tf.__version__}
        else:
            import torch
            import transformers

            if threads:
                torch.set_num_threads(threads)
                torch.set_num_interop_threads(threads)
            transformers.utils.logging.disable_progress_bar()
            model = transformers.GPT2LMHeadModel.from_pretrained(folder, dtype=torch.float32).eval()
            generate = their_generator(model, new_tokens)
            version = {"torch": torch.__version__, "transformers": transformers.__version__}
        conn.send(("ok", version))
        import numpy as np

        prompt = first = None
        while True:
            command, argument = conn.recv()
            if command == "stop":
                return
            if command == "prepare":
                prompt = argument
                first = generate(prompt)
                conn.send(("ok", first))
            elif command == "time":
                same = True
                start = time.perf_counter()
                for _ in range(argument):
                    out = generate(prompt)
                    same = same and np.array_equal(out, first)  # an array compare: microseconds
                conn.send(("ok", (time.perf_counter() - start, same)))
            elif command == "logits":
                conn.send(("ok", np.asarray(model({"input_ids": argument})["logits"])[0, -1]))
    except Exception:  # noqa: BLE001  (reported to the coordinator, which raises)
        conn.send(("error", traceback.format_exc()))


class Worker:
    """One side's process (multiprocessing, spawned: a fresh interpreter)."""

    def __init__(self, side, *args):
        import multiprocessing

        context = multiprocessing.get_context("spawn")
        self.side = side
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, side, *args), daemon=True)
        self.process.start()
        self.info = self._answer()

    def _answer(self):
        status, value = self.conn.recv()
        if status != "ok":
            raise RuntimeError(f"the {self.side} worker failed:\n{value}")
        return value

    def ask(self, command, argument=None):
        self.conn.send((command, argument))
        return self._answer()

    def close(self):
        if self.process.is_alive():
            self.conn.send(("stop", None))
        self.process.join(30)


def check_same_tokens(ours_worker, prompt, ours, theirs, where):
    """Raises AssertionError unless both sides' greedy tokens are identical, naming the
    first difference and our logits of the two tokens there (a gap near float32 round-off
    would be a tie that the two implementations break differently)."""
    import numpy as np

    if ours.shape == theirs.shape and np.array_equal(ours, theirs):
        return
    if ours.shape != theirs.shape:
        raise AssertionError(f"{where}: ours generated {ours.shape}, transformers {theirs.shape}")
    row, step = (int(i[0]) for i in np.nonzero(ours != theirs))
    prefix = np.concatenate([prompt[row], ours[row, :step]])[None].astype(np.int32)
    logits = ours_worker.ask("logits", prefix)
    a, b = int(ours[row, step]), int(theirs[row, step])
    raise AssertionError(f"{where}: greedy tokens differ at row {row}, new token {step}: ours {a}, transformers "
                         f"{b}; our logits there {logits[a]:.6f} vs {logits[b]:.6f} (gap {logits[a] - logits[b]:.2e})")


def measure_generate(args):
    import numpy as np

    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in GENERATE_SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}; choose from {', '.join(GENERATE_SHAPES)}")
    batches = [int(b) for b in args.batches.split(",") if b]
    tmp = tempfile.mkdtemp(prefix="bench_causal_lm_gpt2_")
    rows, versions = [], {}
    for shape_name in shapes:
        start = time.perf_counter()
        folder = os.path.join(tmp, shape_name)
        workers = {}
        try:
            workers["ours"] = Worker("ours", shape_name, folder, args.threads, args.new_tokens)  # writes the folder
            workers["transformers"] = Worker("transformers", shape_name, folder, args.threads, args.new_tokens)
            for worker in workers.values():
                versions.update(worker.info)
            print(f"# {shape_name}: both sides built in {time.perf_counter() - start:.1f}s", file=sys.stderr,
                  flush=True)
            for batch in batches:
                rows.append(_time_batch(args, shape_name, batch, workers, np))
        finally:
            for worker in workers.values():
                worker.close()
    return {"benchmark": "causal_lm_generate", "mode": "generate",
            "shapes": {s: GENERATE_SHAPES[s] for s in shapes}, "prompt_length": args.prompt_length,
            "new_tokens": args.new_tokens, "rounds": args.rounds, "calls": args.calls, "pause_s": args.pause,
            "goal": GENERATE_GOAL, "results": rows, **versions, **environment(args)}


def _time_batch(args, shape_name, batch, workers, np):
    rng = np.random.default_rng(batch)
    prompt = rng.integers(0, GENERATE_SHAPES[shape_name]["vocab_size"], (batch, args.prompt_length), dtype=np.int32)
    where = f"{shape_name} batch {batch}"
    start = time.perf_counter()
    outputs = {name: worker.ask("prepare", prompt) for name, worker in workers.items()}
    for _ in range(args.warmup - 1):
        for worker in workers.values():
            worker.ask("time", 1)
    print(f"# {where}: warmed up in {time.perf_counter() - start:.1f}s", file=sys.stderr, flush=True)
    check_same_tokens(workers["ours"], prompt, outputs["ours"], outputs["transformers"], where)
    assert outputs["ours"].shape == (batch, args.new_tokens), outputs["ours"].shape
    tokens = batch * args.new_tokens * args.calls
    names = list(workers)
    samples = {name: [] for name in names}
    for r in range(args.rounds):
        for name in rotated(names, r):
            time.sleep(args.pause)
            seconds, same = workers[name].ask("time", args.calls)
            if not same:
                raise AssertionError(f"{where}: {name}'s greedy tokens changed between calls")
            samples[name].append(tokens / seconds)
        print(f"{where} round {r + 1}/{args.rounds}: "
              + ", ".join(f"{n} {samples[n][-1]:.1f} tokens/s" for n in names), file=sys.stderr, flush=True)
    ours, theirs = statistics.median(samples["ours"]), statistics.median(samples["transformers"])
    per_call = batch * args.new_tokens * 1e3
    return {"shape": shape_name, "batch": batch, "ours_tokens_per_s": ours, "transformers_tokens_per_s": theirs,
            "ratio_of_medians": ours / theirs,
            "paired_ratio": statistics.median(a / b for a, b in zip(samples["ours"], samples["transformers"])),
            "ours_ms_per_call": per_call / ours, "transformers_ms_per_call": per_call / theirs,
            "same_greedy_tokens": True}


def generate_table(result):
    lines = [f"# Cached greedy generation, ours (decoding.generate in one tf.function) vs transformers' "
             f"GPT2LMHeadModel.generate on the same weights: prompt {result['prompt_length']} tokens, "
             f"{result['new_tokens']} new tokens, {result['threads']} threads, {result['rounds']} rounds",
             "", "| shape | batch | ours (tokens/s) | transformers (tokens/s) | ours / transformers (paired) | "
             "same greedy tokens |", "|---|---|---|---|---|---|"]
    for row in result["results"]:
        shape = result["shapes"][row["shape"]]
        name = f"{row['shape']} ({shape['num_layers']}L/{shape['hidden_size']})"
        lines.append(f"| {name} | {row['batch']} | {row['ours_tokens_per_s']:.1f} | "
                     f"{row['transformers_tokens_per_s']:.1f} | {row['paired_ratio']:.3f}x | "
                     f"{'yes' if row['same_greedy_tokens'] else 'no'} |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    warn_if_busy()
    if args.mode == "step":
        set_threads(args.threads)
        result = measure_step(args)
        table = step_table(result)
    else:
        result = measure_generate(args)
        table = generate_table(result)
    write_outputs(result, table, args.json_out, args.markdown_out)

if __name__ == "__main__":
    main()
