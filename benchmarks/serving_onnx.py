"""The onnxruntime side of benchmarks/benchmark_serving.py.

The benchmark's Hugging Face folder (the same weights as our vanilla SavedModel) is
exported with `torch.onnx.export` (the TorchScript exporter, dynamic batch and length)
as it is ("plain") and after onnxruntime's BERT graph fusions
(`onnxruntime.transformers.optimizer.optimize_model`, "fused"). Its worker tokenizes
with `BertTokenizerFast` (the Rust tokenizer) on the same vocab and runs an
`InferenceSession` on the CPU with `intra_op_num_threads` set, once per thread count in
THREADS; our SavedModel runs at the same thread counts (intra-op N, inter-op 1) so that
each row compares like with like.

Our own ONNX export of the same weights (`onnx_export.export_model`: model.onnx float32
and model.int8.onnx, token ids in, `probabilities` out), and a RealFormer model's
model.onnx, run in the same worker with the same session settings; raw text becomes ids through
the export's `tokenizer.json` (`tokenizers`, the same Rust library as
`BertTokenizerFast`), so both ONNX sides take token ids and pay a Rust tokenizer.

Used only when onnxruntime and onnx are installed (requirements-test.txt has them); our
export also needs tf2onnx and tokenizers (the `[onnx]` extra).
"""

import importlib.util
import os
import warnings

THREADS = (1, 2)
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


# Our export's models in the worker (keys of spec["ours"]), described; "realformer" is a
# RealFormer classifier's model.onnx, timed against the vanilla one.
OURS = {"ours": "our ONNX export (model.onnx, float32)",
        "ours_int8": "our ONNX export (model.int8.onnx, onnxruntime's dynamic int8)",
        "realformer": "RealFormer classifier, our ONNX export (model.onnx, float32)"}


def available():
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def ours_available():
    """Our ONNX export can be made and served: tf2onnx and tokenizers besides available()."""
    return available() and all(importlib.util.find_spec(name) is not None for name in ("tf2onnx", "tokenizers"))


def ours_name(threads):
    """Our vanilla SavedModel at `threads` intra-op threads (the benchmark's threads lever)."""
    return f"vanilla+threads_{threads}_1"


def target_names(threads):
    return {"plain": f"onnxruntime_{threads}", "fused": f"onnxruntime_fused_{threads}"}


def ours_target_names(threads):
    """Our export's targets at `threads` intra-op threads, by their model key in OURS."""
    return {"ours": f"ours_onnx_{threads}", "ours_int8": f"ours_onnx_int8_{threads}",
            "realformer": f"realformer_onnx_{threads}"}


def ours_spec(version_folders):
    """The worker's spec["ours"] from {"vanilla" | "realformer": our ONNX version folder}:
    {model key: {"model": .onnx path, "tokenizer": tokenizer.json path}}; the int8 model
    only where the export wrote it."""
    spec = {}
    for kind, folder in version_folders.items():
        files = {"ours": "model.onnx", "ours_int8": "model.int8.onnx"} if kind == "vanilla" else {kind: "model.onnx"}
        for key, name in files.items():
            if os.path.exists(os.path.join(folder, name)):
                spec[key] = {"model": os.path.join(folder, name), "tokenizer": os.path.join(folder, "tokenizer.json")}
    return spec


def export(hf_folder, out_dir, reuse=False):
    """The HF classifier in `hf_folder` as ONNX: ({"plain": path, "fused": path},
    {fused op: count}, the fusions onnxruntime found)."""
    import onnx
    import torch
    import transformers
    from onnxruntime.transformers import optimizer

    os.makedirs(out_dir, exist_ok=True)
    paths = {"plain": os.path.join(out_dir, "model.onnx"), "fused": os.path.join(out_dir, "model_fused.onnx")}
    model = transformers.BertForSequenceClassification.from_pretrained(hf_folder).eval()
    if not (reuse and os.path.exists(paths["plain"])):
        ids = torch.ones((2, 8), dtype=torch.long)
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation and tracer notes
            warnings.simplefilter("ignore")
            torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), paths["plain"],
                              input_names=list(INPUT_NAMES), output_names=["logits"],
                              dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES},
                                            "logits": {0: "batch"}},
                              opset_version=17, dynamo=False)
        onnx.checker.check_model(paths["plain"])
    fused = optimizer.optimize_model(paths["plain"], model_type="bert", num_heads=model.config.num_attention_heads,
                                     hidden_size=model.config.hidden_size)
    fused.save_model_to_file(paths["fused"])
    return paths, {op: n for op, n in fused.get_fused_operator_statistics().items() if n}


def make_classifier(spec):
    """In the benchmark's onnx worker: (classify(name, texts) -> probabilities, the
    session options). `spec`: "onnx" ({name: path}, torch.onnx graphs: logits out),
    "hf" (the folder with vocab.txt, for those), "ours" (`ours_spec`: our export's
    graphs, probabilities out), "max_length", "intra"."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = spec["intra"]
    options.inter_op_num_threads = 1
    classifiers = {}
    if spec.get("onnx"):
        classifiers.update(_hf_classifiers(spec, options))
    if spec.get("ours"):
        classifiers.update(_our_classifiers(spec["ours"], options))

    def classify(name, texts):
        return classifiers[name](texts)

    return classify, options


def _session(path, options):
    import onnxruntime as ort

    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _hf_classifiers(spec, options):
    """torch.onnx graphs: BertTokenizerFast ids (int64) in, softmax of their logits out."""
    import numpy as np
    import transformers

    transformers.logging.set_verbosity_error()
    tokenizer = transformers.BertTokenizerFast(os.path.join(spec["hf"], "vocab.txt"), do_lower_case=True)

    def classifier(session):
        def classify(texts):
            batch = tokenizer(texts, padding=True, truncation=True, max_length=spec["max_length"], return_tensors="np")
            logits = session.run(["logits"], {k: batch[k].astype(np.int64) for k in INPUT_NAMES})[0]
            e = np.exp(logits - logits.max(-1, keepdims=True))
            return e / e.sum(-1, keepdims=True)
        return classify

    return {name: classifier(_session(path, options)) for name, path in spec["onnx"].items()}


def _our_classifiers(ours, options):
    """Our export's graphs: tokenizer.json's ids, mask and segments (int32, padded to the
    batch's longest row, cut at the export's max_seq_length) in, the graph's own
    `probabilities` out, as docs/serving.md's client does."""
    import numpy as np
    from tokenizers import Tokenizer

    def classifier(session, tokenizer):
        def classify(texts):
            rows = tokenizer.encode_batch(texts)
            feed = {"input_ids": np.array([r.ids for r in rows], np.int32),
                    "input_mask": np.array([r.attention_mask for r in rows], np.int32),
                    "segment_ids": np.array([r.type_ids for r in rows], np.int32)}
            return session.run(["probabilities"], feed)[0]
        return classify

    return {name: classifier(_session(files["model"], options), Tokenizer.from_file(files["tokenizer"]))
            for name, files in ours.items()}


def table(rows, paired_ratio):
    """Markdown: per thread count and load, ours vs onnxruntime plain and fused (latency
    ratios at batch 1, < 1 = ours faster; throughput ratios at batch > 1, > 1 = ours
    faster; `paired_ratio` is the benchmark's ratio over rounds where both ran). Empty
    without onnxruntime rows."""
    lines = ["| threads | text | load | ours (SavedModel) | onnxruntime | onnxruntime, fused "
             "| ours / onnxruntime | ours / fused |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for threads in THREADS:
        names = target_names(threads)
        for key, row in rows.items():
            ours = row.get(ours_name(threads))
            if ours is None or names["plain"] not in row:
                continue
            length, batch = key.split("/b")
            cells = [_speed(ours, batch)] + [_speed(row[names[k]], batch) for k in ("plain", "fused")]
            for k in ("plain", "fused"):
                if batch == "1":
                    paired = paired_ratio(rows, key, ours_name(threads), names[k])
                    cells.append(f"{ours['p50_ms'] / row[names[k]]['p50_ms']:.2f}x latency"
                                 + ("" if paired is None else f" (paired {paired:.2f}x)"))
                else:
                    paired = paired_ratio(rows, key, names[k], ours_name(threads))
                    cells.append(f"{ours['sentences_per_s'] / row[names[k]]['sentences_per_s']:.2f}x throughput"
                                 + ("" if paired is None else f" (paired {paired:.2f}x)"))
            lines.append(f"| {threads} | {length} | batch {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _speed(row, batch):
    if batch == "1":
        return f"p50 {row['p50_ms']:.1f} / p99 {row['p99_ms']:.1f} ms"
    return f"{row['sentences_per_s']:.1f} sent/s"


# The ratios of ours_table: (numerator, denominator) model keys; "plain" / "fused" are the
# torch.onnx graphs, "savedmodel" our SavedModel at the same threads.
OURS_RATIOS = (("ours", "plain"), ("ours", "fused"), ("ours_int8", "ours"), ("realformer", "ours"),
               ("ours", "savedmodel"))


def ours_table(rows, paired):
    """Markdown: per thread count and load, our ONNX export (float32, int8, RealFormer)
    against torch.onnx's graphs of the same weights. Every ratio is a time ratio (< 1 =
    the first is faster, at batch 1 and 32 alike), paired over the rounds both ran, with
    its 95% interval: `paired(rows, key, name, base)` -> (ratio, low, high), low and high
    None where there are too few rounds for one, or None without common rounds. Empty
    without our ONNX rows."""
    headers = {"ours": "ours ONNX", "ours_int8": "ours int8", "realformer": "RealFormer ONNX",
               "plain": "torch.onnx", "fused": "torch.onnx, fused", "savedmodel": "ours SavedModel"}
    lines = ["| threads | text | load | " + " | ".join(headers[k] for k in ("ours", "ours_int8", "realformer", "plain", "fused"))
             + " | " + " | ".join(f"{headers[a]} / {headers[b]}" for a, b in OURS_RATIOS) + " |",
             "| --- " * (8 + len(OURS_RATIOS)) + "|"]
    for threads in THREADS:
        names = dict(ours_target_names(threads), savedmodel=ours_name(threads), **target_names(threads))
        for key, row in rows.items():
            if names["ours"] not in row:
                continue
            length, batch = key.split("/b")
            cells = [_speed(row[names[k]], batch) if names[k] in row else "-"
                     for k in ("ours", "ours_int8", "realformer", "plain", "fused")]
            cells += [_ratio_cell(paired(rows, key, names[a], names[b])) for a, b in OURS_RATIOS]
            lines.append(f"| {threads} | {length} | batch {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _ratio_cell(paired):
    if paired is None:
        return "-"
    ratio, low, high = paired
    if low is None:
        return f"{ratio:.2f}x (too few rounds for an interval)"
    return f"{ratio:.2f}x [{low:.2f}, {high:.2f}]"
