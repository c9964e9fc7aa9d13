"""The onnxruntime side of benchmarks/benchmark_serving.py.

The benchmark's Hugging Face folder (the same weights as our vanilla SavedModel) is
exported with `torch.onnx.export` (the TorchScript exporter, dynamic batch and length)
as it is ("plain") and after onnxruntime's BERT graph fusions
(`onnxruntime.transformers.optimizer.optimize_model`, "fused"). Its worker tokenizes
with `BertTokenizerFast` (the Rust tokenizer) on the same vocab and runs an
`InferenceSession` on the CPU with `intra_op_num_threads` set, once per thread count in
THREADS; our SavedModel runs at the same thread counts (intra-op N, inter-op 1) so that
each row compares like with like.

Used only when onnxruntime and onnx are installed (requirements-test.txt has them).
"""

import importlib.util
import os
import warnings

THREADS = (1, 2)
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def available():
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx"))


def ours_name(threads):
    """Our vanilla SavedModel at `threads` intra-op threads (the benchmark's threads lever)."""
    return f"vanilla+threads_{threads}_1"


def target_names(threads):
    return {"plain": f"onnxruntime_{threads}", "fused": f"onnxruntime_fused_{threads}"}


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
    session options). `spec`: "onnx" ({name: path}), "hf" (the folder with vocab.txt),
    "max_length", "intra"."""
    import numpy as np
    import onnxruntime as ort
    import transformers

    transformers.logging.set_verbosity_error()
    options = ort.SessionOptions()
    options.intra_op_num_threads = spec["intra"]
    options.inter_op_num_threads = 1
    sessions = {name: ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
                for name, path in spec["onnx"].items()}
    tokenizer = transformers.BertTokenizerFast(os.path.join(spec["hf"], "vocab.txt"), do_lower_case=True)

    def classify(name, texts):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=spec["max_length"], return_tensors="np")
        logits = sessions[name].run(["logits"], {k: batch[k].astype(np.int64) for k in INPUT_NAMES})[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    return classify, options


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
