#!/usr/bin/env python
"""Serving speed: this package's SavedModel (raw text in) vs what users would pick
instead, Hugging Face `transformers` on PyTorch, side by side in one run.

    .venv/bin/python benchmarks/benchmark_serving.py            # BERT-Base (~15 min, 2 cores)
    .venv/bin/python benchmarks/benchmark_serving.py --quick    # tiny model, few requests
    make bench-serving                                          # + saves benchmarks/results/serving.*

One BERT-Base-sized vanilla classifier (12L/768/12 heads/3072, random weights, 2 labels,
vocab = data/vocab.txt, lower-cased, max_seq_length 128) is exported twice: as this
package's SavedModel (`export.export_model`) and as a Hugging Face folder
(`save_hf_folder`: vanilla post-LN BERT is what transformers computes). Each side runs in
its own worker process:

* `tf`: only `tensorflow` and `tensorflow_text` imported (checked: realformer_tf is not in
  sys.modules), `tf.saved_model.load(...).signatures["serving_default"](text_a, text_b="")`
  -> `probabilities`, as a TF Serving client would get them;
* `torch`: `BertTokenizerFast` on the same vocab.txt (padding to the batch's longest,
  truncation to 128) + `BertForSequenceClassification` under `torch.inference_mode()`,
  softmax -> probabilities (the tokenizer + model path: faster than `pipeline(...)`,
  which adds per-call Python work, so the harder side to beat).

Both report the time of a whole call, text in, NumPy probabilities out. Before any timing
both sides classify the same texts and the largest difference of their probabilities is
printed (and must be <= 1e-4).

Where onnxruntime is installed, a second table puts our SavedModel next to onnxruntime
serving the same Hugging Face weights (benchmarks/serving_onnx.py: exported with
torch.onnx, plain and with onnxruntime's BERT fusions, Rust tokenizer), each at 1 and 2
intra-op threads. Beside them, where tf2onnx and tokenizers are installed too, our own
ONNX export of the same vanilla weights (`onnx_export.export_model`: model.onnx float32
and model.int8.onnx, token ids in, raw text through its tokenizer.json) and a RealFormer
classifier's model.onnx run in the same onnxruntime workers; their table gives time
ratios paired over the rounds with a 95% interval. Our float32 ONNX probabilities must
equal the SavedModel's within 1e-5 on the benchmark's texts before any timing. These
targets run as many calls as the main sides (enough rounds for every interval), which
lengthens the run.

The same table has RealFormer (residual attention), NormFormer and ETC (raw-text export
at 512 tokens, 16 long tokens per global token) as time ratios to the vanilla SavedModel
(fewer requests), and the levers tried on the serving side (see benchmarks/README.md,
"Serving"): thread settings, XLA, padding to max_seq_length, ETC buckets.

Loads: batch 1 (p50 / p99 latency over `--requests` requests) and batch 32
(sentences/s over `--batches` batches) for short (~12 words), medium (~60) and long
(~120, truncated to 128 tokens) texts cut from data/sample_text.txt.

Interleaving: the workers take turns, never run at once; the coordinator goes
round-robin over all targets in `--rounds` rounds (the first target rotated each
round), so a busy spell of a shared machine hits every target alike. After a worker's
turn the coordinator sleeps `--pause` s so that spinning OpenMP / Eigen threads go idle.
Besides the ratio of the overall p50s, the table gives the paired ratio: the median over
rounds of the two sides' ratio within a round (the variant columns are paired ratios).

The last line printed is the whole result as one JSON object.
"""

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository
for _path in (_ROOT, os.path.join(_ROOT, "benchmarks")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402

import serving_onnx  # noqa: E402

VOCAB_FILE = os.path.join(_ROOT, "data", "vocab.txt")
CORPUS_FILE = os.path.join(_ROOT, "data", "sample_text.txt")
LENGTHS = {"short": 12, "medium": 60, "long": 120}  # words per text
MAX_SEQ_LENGTH = 128
ETC_MAX_SEQ_LENGTH = 512
ETC_TOKENS_PER_GLOBAL = 16
TOLERANCE = 1e-4
# Our float32 ONNX export vs our SavedModel: the same graph converted, so as close as
# tests/test_onnx_export.py holds it. int8 is reported, not held to a bound.
ONNX_TOLERANCE = 1e-5
ONNX_DIRS = {"vanilla": "vanilla_onnx", "realformer": "realformer_onnx"}  # our ONNX exports, by kind
INTERVAL_LEVEL = 0.95

SIZES = {
    "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "quick": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64),
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny model, few requests (a minute: checks the whole benchmark runs)")
    p.add_argument("--requests", type=int, default=200, help="batch-1 requests per length (ours, transformers)")
    p.add_argument("--batches", type=int, default=6, help="batch-32 calls per length (ours, transformers)")
    p.add_argument("--variant_requests", type=int, default=60, help="batch-1 requests of the other targets")
    p.add_argument("--variant_batches", type=int, default=2, help="batch-32 calls of the other targets")
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=20,
                   help="interleaving rounds per load (batch 1: 10 requests per side and round)")
    p.add_argument("--levers", default="threads,pad_max,xla,etc_max",
                   help="comma list of serving levers to time against their baseline ('' = none)")
    p.add_argument("--no_onnx", action="store_true", help="leave out the onnxruntime side even where it is installed")
    p.add_argument("--pause", type=float, default=0.05, help="seconds between two workers' turns")
    p.add_argument("--work_dir", help="keep the exports here (default: a temporary folder)")
    p.add_argument("--reuse", action="store_true", help="reuse the exports already in --work_dir")
    p.add_argument("--json_out")
    p.add_argument("--markdown_out")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.batches, args.variant_requests, args.variant_batches = 8, 2, 4, 1
        args.batch_size, args.rounds = 4, 2
    return args


# -- texts ---------------------------------------------------------------------------------
def make_texts(n_words, count, seed):
    """`count` texts of `n_words` consecutive words of the corpus, at random offsets."""
    with open(CORPUS_FILE, encoding="utf-8") as f:
        words = f.read().split()
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, len(words) - n_words, size=count)
    return [" ".join(words[s:s + n_words]) for s in starts]


# -- exports -------------------------------------------------------------------------------
def _vocab_size():
    with open(VOCAB_FILE, encoding="utf-8") as f:
        return sum(1 for _ in f)


def build_classifier(kind, size, seed):
    """A float32 classifier with random weights; the head scaled up so that the two
    probabilities differ visibly (the 0.02 initializer gives ~0.5 / 0.5)."""
    import keras
    from realformer_tf import etc_modeling, modeling
    from realformer_tf.checkpoints import bert as bert_checkpoint
    from realformer_tf.checkpoints import etc_official
    from realformer_tf.models import variants

    keras.utils.set_random_seed(seed)
    dims = SIZES[size]
    if kind == "etc":
        config = etc_modeling.EtcConfig(
            vocab_size=_vocab_size(), max_absolute_position_embeddings=ETC_MAX_SEQ_LENGTH,
            residual_attention=False, **dims)
        model = etc_modeling.EtcClassifierModel(config, num_labels=2)
        variables = etc_official.etc_variables(model)
        head = "classifier/output_weights"
    else:
        # kind: a name of realformer_tf.models.variants ("vanilla": this benchmark's label of "bert").
        config = variants.variant_config("bert" if kind == "vanilla" else kind, vocab_size=_vocab_size(),
                                         max_position_embeddings=512, type_vocab_size=2, **dims)
        model = modeling.BertClassifierModel(config, num_labels=2)
        variables = bert_checkpoint.bert_variables(model)
        head = "output_weights"
    rng = np.random.default_rng(seed)
    variables[head].assign(rng.normal(0, 0.3, variables[head].shape).astype(np.float32))
    return model


def export_one(model, path, *, lever=None, family=None, max_seq_length=MAX_SEQ_LENGTH, input_options=None,
               reuse=False, vocab_file=VOCAB_FILE):
    """export_model into `path`/1 with a lever applied (None: the export as shipped)."""
    from realformer_tf.serving import export

    if reuse and os.path.isdir(os.path.join(path, "1")):
        return os.path.join(path, "1")
    return export.export_model(model, path, **export_options(lever), vocab_file=vocab_file, family=family,
                               max_seq_length=max_seq_length, input_options=input_options)


def export_options(lever=None):
    """export_model's arguments for the benchmark's export with `lever` (None: as shipped).

    pad_max: every batch padded to max_seq_length (static shapes).
    xla: the model part compiled with XLA (the tokenizer ops cannot be), on rows padded to
        max_seq_length: XLA compiles once per input shape, and padding to the batch's
        longest row would make every new length a compilation (seconds).
    etc_max: ETC as it was: every row padded to max_seq_length (no length buckets).
    """
    options = dict(task="classifier", do_lower_case=True, label_names=["0", "1"], version=1)
    if lever not in (None, "pad_max", "xla", "etc_max"):
        raise ValueError(f"unknown lever {lever!r}")
    if lever in ("pad_max", "xla"):
        options["pad_to_max_seq_length"] = True
    if lever == "xla":
        options["compile_model"] = True
    if lever == "etc_max":
        options["length_buckets"] = ()
    return options


def export_onnx(model, path, *, quantize=None, max_seq_length=MAX_SEQ_LENGTH, reuse=False, vocab_file=VOCAB_FILE):
    """Our ONNX export (the SavedModel's options, as shipped) into `path`/1; returns that
    version folder (model.onnx, model.int8.onnx with quantize="int8", tokenizer.json)."""
    from realformer_tf.serving import onnx_export

    if reuse and os.path.isdir(os.path.join(path, "1")):
        return os.path.join(path, "1")
    return onnx_export.export_model(model, path, **export_options(None), vocab_file=vocab_file,
                                    max_seq_length=max_seq_length, quantize=quantize)


def make_exports(args, work):
    """{name: SavedModel path}, the HF folder and {kind: our ONNX version folder} (empty
    without --no_onnx or without the ONNX modules)."""
    from realformer_tf.checkpoints import bert as bert_checkpoint
    from realformer_tf.families import get_family
    from realformer_tf.jobs.runner import RunOptions

    size = "quick" if args.quick else "base"
    levers = [x for x in args.levers.split(",") if x]
    paths, onnx_folders = {}, {}
    onnx_kinds = ONNX_DIRS if not args.no_onnx and serving_onnx.ours_available() else {}
    t0 = time.time()
    wanted = {"vanilla": ["vanilla", "hf"] + [f"vanilla_{x}" for x in ("pad_max", "xla") if x in levers],
              "realformer": ["realformer"], "normformer": ["normformer"],
              "etc": ["etc"] + (["etc_max"] if "etc_max" in levers else [])}
    for kind, folder in onnx_kinds.items():
        wanted[kind].append(folder)
    for seed, kind in enumerate(["vanilla", "realformer", "normformer", "etc"]):
        if args.reuse and all(os.path.isdir(os.path.join(work, d)) for d in wanted[kind]):
            # --reuse: the exports of an earlier run with the same --work_dir.
            names = {"vanilla_pad_max": "vanilla+pad_max", "vanilla_xla": "vanilla+xla", "etc_max": "etc+etc_max"}
            for d in wanted[kind]:
                if d == onnx_kinds.get(kind):
                    onnx_folders[kind] = os.path.join(work, d, "1")
                elif d != "hf":
                    paths[names.get(d, d)] = os.path.join(work, d, "1")
            print(f"reused {kind}", file=sys.stderr, flush=True)
            continue
        model = build_classifier(kind, size, seed)
        if kind == "vanilla":
            hf = bert_checkpoint.save_hf_folder(model, os.path.join(work, "hf"))
            shutil.copy(VOCAB_FILE, os.path.join(hf, "vocab.txt"))
            paths["vanilla"] = export_one(model, os.path.join(work, "vanilla"))
            for lever in ("pad_max", "xla"):
                if lever in levers:
                    paths[f"vanilla+{lever}"] = export_one(model, os.path.join(work, f"vanilla_{lever}"),
                                                           lever=lever)
        elif kind == "etc":
            etc = dict(family=get_family("etc"), max_seq_length=ETC_MAX_SEQ_LENGTH, input_options=RunOptions(
                etc_tokens_per_global=ETC_TOKENS_PER_GLOBAL, max_seq_length=ETC_MAX_SEQ_LENGTH))
            paths["etc"] = export_one(model, os.path.join(work, "etc"), reuse=args.reuse, **etc)
            if "etc_max" in levers:
                paths["etc+etc_max"] = export_one(model, os.path.join(work, "etc_max"), lever="etc_max", reuse=args.reuse, **etc)
        else:
            paths[kind] = export_one(model, os.path.join(work, kind))
        if kind in onnx_kinds:  # the int8 model of the vanilla weights only
            onnx_folders[kind] = export_onnx(model, os.path.join(work, onnx_kinds[kind]), reuse=args.reuse,
                                             quantize="int8" if kind == "vanilla" else None)
        print(f"exported {kind} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
    if not args.no_onnx and not onnx_kinds:
        print("tf2onnx / tokenizers / onnxruntime not installed: no ONNX export of ours timed "
              "(pip install \".[onnx]\")", file=sys.stderr, flush=True)
    return paths, os.path.join(work, "hf"), onnx_folders


# -- workers -------------------------------------------------------------------------------
# Runs as `python -c WORKER tf|torch|onnx SPEC`: one JSON command per stdin line, one JSON
# answer per stdout line. The tf worker imports tensorflow and tensorflow_text only.
WORKER = r'''
import json, os, sys, time
kind, spec = sys.argv[1], json.loads(sys.argv[2])
out = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)  # library prints go to stderr, answers to `out`
import numpy as np
if kind == "tf":
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the tokenizer ops)
    if spec.get("intra"):
        tf.config.threading.set_intra_op_parallelism_threads(spec["intra"])
    if spec.get("inter"):
        tf.config.threading.set_inter_op_parallelism_threads(spec["inter"])
    models = {name: tf.saved_model.load(path).signatures["serving_default"] for name, path in spec["models"].items()}

    def classify(name, texts):
        texts = tf.constant(texts)
        return models[name](text_a=texts, text_b=tf.fill(tf.shape(texts), ""))["probabilities"].numpy()
elif kind == "onnx":
    sys.path.insert(0, spec["benchmarks"])
    import onnxruntime as ort
    import serving_onnx
    classify, options = serving_onnx.make_classifier(spec)
else:
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    if spec.get("intra"):
        torch.set_num_threads(spec["intra"])
    tokenizer = transformers.BertTokenizerFast(os.path.join(spec["hf"], "vocab.txt"), do_lower_case=True)
    model = transformers.BertForSequenceClassification.from_pretrained(spec["hf"]).eval()

    def classify(name, texts):
        with torch.inference_mode():
            batch = tokenizer(texts, padding=True, truncation=True, max_length=spec["max_length"],
                              return_tensors="pt")
            return torch.softmax(model(**batch).logits, dim=-1).numpy()

info = {"python_modules": sorted(m for m in ("realformer_tf", "torch", "transformers", "keras_hub")
                                 if m in sys.modules)}
if kind == "tf":
    info["threads"] = [tf.config.threading.get_intra_op_parallelism_threads(),
                       tf.config.threading.get_inter_op_parallelism_threads()]
elif kind == "onnx":
    info["threads"] = [options.intra_op_num_threads, options.inter_op_num_threads]
    info["versions"] = {"onnxruntime": ort.__version__}
    if "tokenizers" in sys.modules:
        info["versions"]["tokenizers"] = sys.modules["tokenizers"].__version__
else:
    info["threads"] = [torch.get_num_threads(), torch.get_num_interop_threads()]
    info["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
out.write(json.dumps(info) + "\n"); out.flush()
for line in sys.stdin:
    cmd = json.loads(line)
    if cmd["op"] == "probs":
        answer = classify(cmd["model"], cmd["texts"]).tolist()
    else:  # "time": one call per batch, seconds each
        answer = []
        for texts in cmd["batches"]:
            t = time.perf_counter()
            classify(cmd["model"], texts)
            answer.append(time.perf_counter() - t)
    out.write(json.dumps(answer) + "\n"); out.flush()
'''


class Worker:
    def __init__(self, kind, spec):
        self.kind = kind
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
        # An empty folder of its own as the working directory: `python -c` imports from it
        # first, and a stray inspect.py in the shared temp folder would shadow the stdlib's.
        self.cwd = tempfile.mkdtemp(prefix="serving_worker_")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, kind, json.dumps(spec)], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True, cwd=self.cwd, env=env)
        self.info = self._read()

    def _read(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker exited with {self.proc.wait()}; see its stderr above")
        return json.loads(line)

    def ask(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
        shutil.rmtree(self.cwd, ignore_errors=True)


class Target:
    """One thing timed: a model name on a worker."""

    def __init__(self, name, worker, model, main, description):
        self.name, self.worker, self.model, self.main, self.description = name, worker, model, main, description
        self.samples = {}  # load key -> list of seconds per call
        self.round_medians = {}  # load key -> {round: median seconds per call in that round}


# -- timing --------------------------------------------------------------------------------
def percentile(values, q):
    return float(np.percentile(np.asarray(values), q))


def time_loads(targets, texts, args, on_load=None):
    loads = [(length, 1) for length in LENGTHS] + [(length, args.batch_size) for length in LENGTHS]
    for length, batch in loads:
        key = f"{length}/b{batch}"
        pool = texts[length]
        calls_main = args.requests if batch == 1 else args.batches
        calls_other = args.variant_requests if batch == 1 else args.variant_batches
        # warm-up: one call each (graph optimizations, XLA compilation of this shape).
        for t in targets:
            t.worker.ask(op="time", model=t.model, batches=[pool[:batch]] * 2)
        t0 = time.time()
        for r in range(args.rounds):
            order = targets[r % len(targets):] + targets[:r % len(targets)]
            for t in order:
                total = calls_main if t.main else calls_other
                n = total // args.rounds + (1 if r < total % args.rounds else 0)
                if n == 0:
                    continue
                start = (r * 7919 + (0 if t.main else 13)) % len(pool)
                batches = [[pool[(start + i * batch + j) % len(pool)] for j in range(batch)] for i in range(n)]
                secs = t.worker.ask(op="time", model=t.model, batches=batches)
                t.samples.setdefault(key, []).extend(secs)
                t.round_medians.setdefault(key, {})[str(r)] = float(np.median(secs))
                time.sleep(args.pause)
        print(f"timed {key} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        if on_load:
            on_load()


def summarize(targets, args):
    rows = {}
    for t in targets:
        for key, secs in t.samples.items():
            batch = int(key.split("/b")[1])
            row = {"calls": len(secs), "p50_ms": 1e3 * percentile(secs, 50), "p99_ms": 1e3 * percentile(secs, 99),
                   "sentences_per_s": batch / float(np.median(secs)),
                   "round_median_s": t.round_medians.get(key, {})}
            rows.setdefault(key, {})[t.name] = row
    return rows


def run(args):
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_serving_")
    os.makedirs(work, exist_ok=True)
    paths, hf, onnx_folders = make_exports(args, work)
    onnx = None
    if not args.no_onnx and serving_onnx.available():
        onnx_paths, fusions = serving_onnx.export(hf, os.path.join(work, "onnx"), reuse=args.reuse)
        onnx = dict(paths=onnx_paths, fusions=fusions, ours=serving_onnx.ours_spec(onnx_folders),
                    ours_info=_onnx_export_info(onnx_folders))
        print(f"exported ONNX (fused ops: {fusions})", file=sys.stderr, flush=True)
    elif not args.no_onnx:
        print("onnxruntime / onnx not installed: no onnxruntime side", file=sys.stderr, flush=True)
    levers = [x for x in args.levers.split(",") if x]
    texts = {length: make_texts(n, 256, seed=i) for i, (length, n) in enumerate(LENGTHS.items())}

    workers = {}
    try:
        return _run(args, work, paths, hf, levers, texts, workers, onnx)
    finally:
        for w in workers.values():
            w.close()
        if not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)


def _run(args, work, paths, hf, levers, texts, workers, onnx=None):
    tf_worker = Worker("tf", {"models": paths})
    torch_worker = Worker("torch", {"hf": hf, "max_length": MAX_SEQ_LENGTH})
    workers.update(tf=tf_worker, torch=torch_worker)
    if "realformer_tf" in tf_worker.info["python_modules"]:
        raise RuntimeError("the tf worker imported realformer_tf")
    targets = [
        Target("ours", tf_worker, "vanilla", True, "vanilla SavedModel, serving_default, TF defaults"),
        Target("transformers", torch_worker, None, True, "BertTokenizerFast + BertForSequenceClassification"),
        Target("realformer", tf_worker, "realformer", False, "RealFormer SavedModel"),
        Target("normformer", tf_worker, "normformer", False, "NormFormer SavedModel"),
        Target("etc", tf_worker, "etc", False, f"ETC SavedModel, max_seq_length {ETC_MAX_SEQ_LENGTH}"),
    ]
    for name in paths:
        if "+" in name:
            targets.append(Target(name, tf_worker, name, False, f"lever {name.split('+')[1]}"))
    if "threads" in levers or onnx:  # (against onnxruntime: as many calls as the main sides)
        for intra, inter in ((1, 1), (2, 1)):
            worker = Worker("tf", {"models": {"vanilla": paths["vanilla"]}, "intra": intra, "inter": inter})
            workers[f"tf_{intra}_{inter}"] = worker
            targets.append(Target(f"vanilla+threads_{intra}_{inter}", worker, "vanilla", bool(onnx),
                                  f"intra_op {intra}, inter_op {inter}"))
    if onnx:
        for threads in serving_onnx.THREADS:
            worker = Worker("onnx", {"onnx": onnx["paths"], "ours": onnx["ours"], "hf": hf, "max_length": MAX_SEQ_LENGTH,
                                     "intra": threads, "benchmarks": os.path.join(_ROOT, "benchmarks")})
            workers[f"onnx_{threads}"] = worker
            for graph, name in serving_onnx.target_names(threads).items():
                targets.append(Target(name, worker, graph, True, f"onnxruntime, {graph} graph, intra_op {threads}"))
            # Ours at the main sides' calls too: every ratio of their table gets enough
            # rounds for its interval.
            for model, name in serving_onnx.ours_target_names(threads).items():
                if model in onnx["ours"]:
                    targets.append(Target(name, worker, model, True, f"onnxruntime, {serving_onnx.OURS[model]}, "
                                                                      f"tokenizer.json, intra_op {threads}"))

    # Equality first: the same texts through every target, vs the transformers side.
    check = {}
    reference = None
    for length in LENGTHS:
        sample = texts[length][:8]
        ref = np.array(torch_worker.ask(op="probs", model=None, texts=sample))
        ours = np.array(tf_worker.ask(op="probs", model="vanilla", texts=sample))
        check.setdefault("ours_vs_transformers", []).append(float(np.abs(ours - ref).max()))
        for t in targets:
            if t.name.startswith("onnxruntime"):
                got = np.array(t.worker.ask(op="probs", model=t.model, texts=sample))
                check.setdefault(f"{t.name}_vs_transformers", []).append(float(np.abs(got - ref).max()))
        for t in targets:
            if t.worker.kind == "onnx" and t.model in serving_onnx.OURS:
                check.setdefault(f"{t.name}_vs_savedmodel", []).append(_our_onnx_difference(t, tf_worker, sample))
        for t in targets:
            if t.worker is not torch_worker and t.model != "vanilla" and "+" in t.name and t.model:
                base = "etc" if t.model.startswith("etc") else "vanilla"
                got = np.array(t.worker.ask(op="probs", model=t.model, texts=sample))
                want = np.array(tf_worker.ask(op="probs", model=base, texts=sample))
                check.setdefault(f"{t.name}_vs_{base}", []).append(float(np.abs(got - want).max()))
        reference = ref if reference is None else reference
    check = {k: max(v) for k, v in check.items()}
    print("max |probabilities difference|: " + ", ".join(f"{k} {v:.2e}" for k, v in check.items()), flush=True)
    for name, difference in check.items():
        if name.endswith("_vs_transformers") and difference > TOLERANCE:
            raise SystemExit(f"error: {name.replace('_vs_', ' and ')} differ by {difference:.2e} > {TOLERANCE}")
        if name.endswith("_vs_savedmodel") and "int8" not in name and difference > ONNX_TOLERANCE:
            raise SystemExit(f"error: {name.replace('_vs_', ' and the ')} differ by {difference:.2e} > {ONNX_TOLERANCE}: "
                             "our ONNX export no longer computes the SavedModel's outputs; run "
                             "tests/test_onnx_export.py to find where")

    def result():
        return {
            "model": "quick (2L/32/2 heads/64)" if args.quick else "BERT-Base (12L/768/12 heads/3072)",
            "quick": args.quick, "batch_size": args.batch_size, "max_seq_length": MAX_SEQ_LENGTH,
            "etc_max_seq_length": ETC_MAX_SEQ_LENGTH, "words": LENGTHS,
            "requests": args.requests, "batches": args.batches, "variant_requests": args.variant_requests,
            "variant_batches": args.variant_batches, "rounds": args.rounds,
            "equality_max_abs_diff": check, "tolerance": TOLERANCE,
            "targets": {t.name: t.description for t in targets},
            "threads": {name: w.info["threads"] for name, w in workers.items()},
            "versions": dict(torch_worker.info.get("versions", {}), **workers.get("onnx_1", torch_worker).info.get("versions", {}),
                             tensorflow=_tf_version(), python=platform.python_version()),
            "onnx_fusions": onnx["fusions"] if onnx else None,
            "onnx_tolerance": ONNX_TOLERANCE, "ours_onnx": onnx["ours_info"] if onnx else None,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "results": summarize(targets, args),
        }

    def save_partial():  # a run cut short still leaves the loads it finished
        if args.json_out:
            with open(args.json_out + ".partial", "w") as f:
                json.dump(result(), f, indent=2)

    time_loads(targets, texts, args, save_partial)
    return result()


def _our_onnx_difference(target, tf_worker, texts):
    """Max |probabilities difference| of one of our ONNX targets and the SavedModel it was
    exported beside (RealFormer's for RealFormer's graph, else the vanilla one)."""
    base = "realformer" if target.model == "realformer" else "vanilla"
    got = np.array(target.worker.ask(op="probs", model=target.model, texts=texts))
    want = np.array(tf_worker.ask(op="probs", model=base, texts=texts))
    return float(np.abs(got - want).max())


def _onnx_export_info(folders):
    """What the result records of our ONNX exports: converter, opset, the export's own
    check and the files' sizes in MB."""
    info = {}
    for kind, folder in folders.items():
        with open(os.path.join(folder, "realformer_export.json"), encoding="utf-8") as f:
            written = json.load(f)
        sizes = {name: round(os.path.getsize(os.path.join(folder, name)) / 1e6, 1)
                 for name in ("model.onnx", "model.int8.onnx") if os.path.exists(os.path.join(folder, name))}
        info[kind] = {k: written.get(k) for k in ("converter", "opset", "check")}
        info[kind]["size_mb"] = sizes
    return info


def _tf_version():
    import tensorflow as tf
    return tf.__version__


# -- reporting -----------------------------------------------------------------------------
def _time_ratio(rows, key, name, base):
    """time / base's time: p50 latency at batch 1, time per sentence at batch > 1."""
    a, b = rows[key].get(name), rows[key].get(base)
    if a is None or b is None:
        return None
    if key.endswith("/b1"):
        return a["p50_ms"] / b["p50_ms"]
    return b["sentences_per_s"] / a["sentences_per_s"]


def _round_ratios(rows, key, name, base):
    """(name's median call time / base's) in each round both ran."""
    a, b = (rows[key].get(n, {}).get("round_median_s", {}) for n in (name, base))
    return [a[r] / b[r] for r in sorted(set(a) & set(b), key=int)]


def _paired_ratio(rows, key, name, base):
    """The median over the rounds both ran of (name's median call time / base's in that
    round): a slow spell of the machine slows both sides of a round alike, so this moves
    less between runs than the ratio of the overall p50s. None without round data."""
    ratios = _round_ratios(rows, key, name, base)
    return float(np.median(ratios)) if ratios else None


def median_interval(values, level=INTERVAL_LEVEL):
    """A distribution-free interval for the median of `values`: the k-th smallest and
    k-th largest, k the largest with P(Binomial(n, 1/2) < k) <= (1 - level) / 2 (the sign
    test's interval; it covers the median with probability >= level whatever the
    distribution, rounds being independent). None below 6 values at 95%: the extremes of
    fewer rounds cover the median less often than that."""
    n, tail = len(values), (1 - level) / 2
    k, below = 0, 0.0
    while k < n and below + math.comb(n, k) / 2 ** n <= tail:
        below += math.comb(n, k) / 2 ** n
        k += 1
    if k == 0:
        return None
    ordered = sorted(values)
    return ordered[k - 1], ordered[n - k]


def _paired_interval(rows, key, name, base):
    """(paired ratio, low, high): `_paired_ratio` and `median_interval` of the same
    per-round ratios (low, high None with too few rounds); None without common rounds."""
    ratios = _round_ratios(rows, key, name, base)
    if not ratios:
        return None
    interval = median_interval(ratios) or (None, None)
    return (float(np.median(ratios)), *interval)


def format_tables(result):
    rows = result["results"]
    lines = ["| text | load | ours (SavedModel) | transformers (PyTorch) | ours / transformers "
             "| RealFormer / vanilla | NormFormer / vanilla | ETC-512 / vanilla |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for key in rows:
        length, batch = key.split("/b")
        o, h = rows[key]["ours"], rows[key]["transformers"]
        ratios = [_paired_ratio(rows, key, n, "ours") or _time_ratio(rows, key, n, "ours")
                  for n in ("realformer", "normformer", "etc")]
        fmt = lambda r: "-" if r is None else f"{r:.2f}x"  # noqa: E731
        if batch == "1":  # paired latency: ours / transformers'
            paired = _paired_ratio(rows, key, "ours", "transformers")
            cells = [f"p50 {o['p50_ms']:.1f} / p99 {o['p99_ms']:.1f} ms", f"p50 {h['p50_ms']:.1f} / p99 {h['p99_ms']:.1f} ms",
                     f"{o['p50_ms'] / h['p50_ms']:.2f}x latency"]
        else:  # paired throughput: transformers' time / ours
            paired = _paired_ratio(rows, key, "transformers", "ours")
            cells = [f"{o['sentences_per_s']:.1f} sent/s", f"{h['sentences_per_s']:.1f} sent/s",
                     f"{o['sentences_per_s'] / h['sentences_per_s']:.2f}x throughput"]
        cells[-1] += "" if paired is None else f" (paired {paired:.2f}x)"
        lines.append(f"| {length} | batch {batch} | " + " | ".join(cells + [fmt(r) for r in ratios]) + " |")
    levers = sorted({n for r in rows.values() for n in r if "+" in n})
    if levers:
        lines += ["", "| lever (time / its baseline) | " + " | ".join(rows) + " |",
                  "| --- |" + " --- |" * len(rows)]
        for name in levers:
            base = "etc" if name.startswith("etc") else "ours"
            cells = [_time_ratio(rows, key, name, base) for key in rows]
            lines.append(f"| {name} | " + " | ".join("-" if c is None else f"{c:.2f}x" for c in cells) + " |")
    return "\n".join(lines)


def markdown_report(result):
    eq = result["equality_max_abs_diff"]
    return "\n".join([
        f"# Serving: {result['model']}, {result['machine']}", "",
        f"Versions: {json.dumps(result['versions'])}; threads (intra, inter): {json.dumps(result['threads'])}.",
        f"Batch 1: {result['requests']} requests per length (other targets {result['variant_requests']}); "
        f"batch {result['batch_size']}: {result['batches']} calls (others {result['variant_batches']}); "
        f"{result['rounds']} interleaved rounds. Latency and variant (time) ratios < 1 and "
        "throughput ratios > 1: faster than the baseline; paired: the median of the "
        "per-round ratios.", "",
        "Max |probabilities difference| on the same texts: " + ", ".join(f"{k} {v:.1e}" for k, v in eq.items())
        + f" (tolerance {result['tolerance']:g}).", "",
        format_tables(result), ""] + _onnx_section(result))


def _onnx_section(result):
    onnx_table = serving_onnx.table(result["results"], _paired_ratio)
    if not onnx_table:
        return []
    lines = ["## Against onnxruntime, at 1 and 2 intra-op threads (inter-op 1)", "",
             "The same weights exported with torch.onnx (plain) and after onnxruntime's BERT fusions "
             f"(fused ops: {json.dumps(result.get('onnx_fusions'))}), tokenized by BertTokenizerFast.", "",
             onnx_table, ""]
    ours_table = serving_onnx.ours_table(result["results"], _paired_interval)
    if ours_table:
        lines += ["## Our ONNX export against torch.onnx's, in onnxruntime", "",
                  "Our export of the same vanilla weights (model.onnx float32, model.int8.onnx: onnxruntime's "
                  "dynamic int8) and a RealFormer classifier's model.onnx, token ids from our tokenizer.json; "
                  f"export details: {json.dumps(result.get('ours_onnx'))}. Time ratios (< 1: the first is "
                  "faster, batch 1 and 32 alike), each the median over the rounds both ran of the per-round "
                  f"ratio, in brackets its {INTERVAL_LEVEL:.0%} interval (distribution-free: order statistics "
                  "of the per-round ratios, the sign test's interval; 6 rounds at least).", "",
                  ours_table, ""]
    return lines


def main(argv=None):
    args = parse_args(argv)
    for path in (args.json_out, args.markdown_out):  # before the run: the partial JSON goes there too
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    result = run(args)
    print(format_tables(result))
    for path, text in ((args.json_out, json.dumps(result, indent=2)), (args.markdown_out, markdown_report(result))):
        if path:
            with open(path, "w") as f:
                f.write(text + "\n")
    if args.json_out and os.path.exists(args.json_out + ".partial"):
        os.remove(args.json_out + ".partial")  # the whole result is written: drop the partial one
    print(json.dumps(result, separators=(",", ":")))


if __name__ == "__main__":
    main()
