"""benchmarks/benchmark_serving.py's pieces, so the serving benchmark cannot rot without
the suite running the benchmark itself (`make bench-serving` does, ~25 min): its export
levers are real `export_model` arguments that leave the probabilities unchanged, its
TensorFlow worker serves an export without this package, its paired ratio ignores a slow
spell of the machine, and its report renders every load and lever."""

import importlib.util
import os

import numpy as np
import pytest

import helpers_data as h


def _load_benchmark():
    path = os.path.join(h.ROOT, "benchmarks", "benchmark_serving.py")
    spec = importlib.util.spec_from_file_location("benchmark_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load_benchmark()


@pytest.fixture(scope="module")
def exports(bench, tmp_path_factory):
    """A tiny vanilla classifier exported as shipped and with each BERT lever, and as our
    ONNX export (float32 and int8) where its modules are installed."""
    import keras

    from realformer_tf import modeling

    work = tmp_path_factory.mktemp("serving_levers")
    vocab = h.write_vocab(work / "vocab.txt")
    keras.utils.set_random_seed(4)
    model = modeling.BertClassifierModel(h.tiny_config(residual_attention=False), num_labels=2)
    model._ensure_built()
    paths = {lever or "shipped": bench.export_one(model, str(work / (lever or "shipped")), lever=lever,
                                                  max_seq_length=32, vocab_file=vocab)
             for lever in (None, "pad_max", "xla")}
    # The [onnx] extra is in requirements-test.txt: our export is always made here.
    paths["onnx"] = bench.export_onnx(model, str(work / "onnx"), quantize="int8", max_seq_length=32,
                                      vocab_file=vocab)
    return paths


def test_export_options_are_export_model_arguments(bench):
    assert bench.export_options(None) == dict(task="classifier", do_lower_case=True, label_names=["0", "1"], version=1)
    assert bench.export_options("pad_max")["pad_to_max_seq_length"] is True
    assert bench.export_options("xla")["compile_model"] is True and bench.export_options("xla")["pad_to_max_seq_length"]
    assert bench.export_options("etc_max")["length_buckets"] == ()
    with pytest.raises(ValueError, match="unknown lever 'fast'"):
        bench.export_options("fast")


@pytest.mark.slow
def test_levers_keep_the_probabilities_and_the_worker_serves_without_the_package(bench, exports):
    import tensorflow as tf
    importlib.import_module("tensorflow_text")  # registers the tokenizer ops

    texts = [" ".join(s.split()[:n]) for s, n in zip(h.sentences(5, seed=8), (2, 5, 9, 3, 12))]

    def probabilities(path):
        serve = tf.saved_model.load(path).signatures["serving_default"]
        return serve(text_a=tf.constant(texts), text_b=tf.constant([""] * len(texts)))["probabilities"].numpy()

    shipped = probabilities(exports["shipped"])
    assert shipped.shape == (5, 2) and np.ptp(shipped[:, 0]) > 0
    for lever in ("pad_max", "xla"):
        np.testing.assert_allclose(probabilities(exports[lever]), shipped, atol=1e-5, err_msg=lever)
    worker = bench.Worker("tf", {"models": {"shipped": exports["shipped"]}})
    try:
        assert "realformer_tf" not in worker.info["python_modules"]
        np.testing.assert_allclose(worker.ask(op="probs", model="shipped", texts=texts), shipped, atol=1e-6)
        times = worker.ask(op="time", model="shipped", batches=[texts[:1]] * 3)
        assert len(times) == 3 and all(t > 0 for t in times)
    finally:
        worker.close()


@pytest.mark.slow
def test_onnxruntime_side_serves_the_same_weights_as_transformers(bench, tmp_path):
    """The HF folder exported to ONNX (plain and fused), served by the benchmark's onnx
    worker: the probabilities transformers computes from the folder."""
    import keras
    import torch
    import transformers

    from realformer_tf import modeling
    from realformer_tf.checkpoints import bert as bert_checkpoint

    keras.utils.set_random_seed(5)
    model = modeling.BertClassifierModel(h.tiny_config(residual_attention=False), num_labels=2)
    model._ensure_built()
    folder = bert_checkpoint.save_hf_folder(model, str(tmp_path / "hf"), vocab_file=h.write_vocab(tmp_path / "vocab.txt"))
    paths, fusions = bench.serving_onnx.export(folder, str(tmp_path / "onnx"))
    assert fusions.get("SkipLayerNormalization", 0) > 0, fusions  # the fused graph is fused

    texts = [" ".join(s.split()[:n]) for s, n in zip(h.sentences(4, seed=3), (3, 9, 1, 6))]
    tokenizer = transformers.BertTokenizerFast(str(tmp_path / "hf" / "vocab.txt"), do_lower_case=True)
    with torch.inference_mode():
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        want = torch.softmax(transformers.BertForSequenceClassification.from_pretrained(folder)(**batch).logits, -1)
    worker = bench.Worker("onnx", {"onnx": paths, "hf": folder, "max_length": 32, "intra": 1,
                                   "benchmarks": os.path.join(h.ROOT, "benchmarks")})
    try:
        assert worker.info["threads"] == [1, 1] and "realformer_tf" not in worker.info["python_modules"]
        for graph in ("plain", "fused"):
            got = worker.ask(op="probs", model=graph, texts=texts)
            np.testing.assert_allclose(got, want.numpy(), atol=1e-5, err_msg=graph)
    finally:
        worker.close()


@pytest.mark.slow
def test_our_onnx_side_gives_the_savedmodel_probabilities(bench, exports):
    """Our ONNX export in the benchmark's onnx worker (tokenizer.json, token ids in): the
    SavedModel's probabilities within the benchmark's 1e-5 on its own texts, cut at 32
    tokens; int8 runs and stays close."""
    import tensorflow as tf
    importlib.import_module("tensorflow_text")  # registers the tokenizer ops

    texts = [t for i, n in enumerate(bench.LENGTHS.values()) for t in bench.make_texts(n, 3, seed=i)]
    serve = tf.saved_model.load(exports["shipped"]).signatures["serving_default"]
    want = serve(text_a=tf.constant(texts), text_b=tf.constant([""] * len(texts)))["probabilities"].numpy()
    worker = bench.Worker("onnx", {"ours": bench.serving_onnx.ours_spec({"vanilla": exports["onnx"]}), "intra": 1,
                                   "benchmarks": os.path.join(h.ROOT, "benchmarks")})
    try:
        assert "realformer_tf" not in worker.info["python_modules"]
        np.testing.assert_allclose(worker.ask(op="probs", model="ours", texts=texts), want, atol=bench.ONNX_TOLERANCE)
        np.testing.assert_allclose(worker.ask(op="probs", model="ours_int8", texts=texts), want, atol=0.08)
        assert len(worker.ask(op="time", model="ours_int8", batches=[texts[:2]] * 2)) == 2
    finally:
        worker.close()


def test_paired_ratio_is_immune_to_a_slow_round(bench):
    # Round 1 ran on a machine twice as slow for both sides: the ratio within each round
    # is 0.8, so the paired ratio is 0.8 whatever the spell; the p50s are shifted by it.
    ours = {"0": 0.08, "1": 0.16, "2": 0.08}
    theirs = {"0": 0.10, "1": 0.20, "2": 0.10}
    rows = {"short/b1": {"ours": {"round_median_s": ours}, "transformers": {"round_median_s": theirs}}}
    assert bench._paired_ratio(rows, "short/b1", "ours", "transformers") == pytest.approx(0.8)
    assert bench._paired_ratio(rows, "short/b1", "transformers", "ours") == pytest.approx(1.25)
    # Rounds only one side ran do not count; no common round: no ratio.
    rows["short/b1"]["transformers"]["round_median_s"] = {"0": 0.1, "5": 1.0}
    assert bench._paired_ratio(rows, "short/b1", "ours", "transformers") == pytest.approx(0.8)
    rows["short/b1"]["transformers"]["round_median_s"] = {"7": 0.1}
    assert bench._paired_ratio(rows, "short/b1", "ours", "transformers") is None
    # The 95% interval of the median: none from 5 rounds, the extremes of 6, the 6th
    # smallest and largest of 20 (P(Binomial(20, 1/2) <= 5) = 0.021 <= 0.025).
    assert bench.median_interval([1, 2, 3, 4, 5]) is None
    assert bench.median_interval([3, 1, 6, 2, 5, 4]) == (1, 6)
    assert bench.median_interval(list(range(20))) == (5, 14)


def _timed(p50_ms, sentences_per_s, rounds):
    return {"calls": 3, "p50_ms": p50_ms, "p99_ms": p50_ms * 1.5, "sentences_per_s": sentences_per_s,
            "round_median_s": {str(r): v for r, v in enumerate(rounds)}}


def test_report_renders_every_load_ratio_and_lever(bench):
    results = {}
    for key in ("short/b1", "long/b4"):
        results[key] = {"ours": _timed(80.0, 40.0, [0.08, 0.09]), "transformers": _timed(100.0, 30.0, [0.1, 0.1]),
                        "realformer": _timed(84.0, 38.0, [0.084, 0.09]), "normformer": _timed(88.0, 36.0, [0.088, 0.09]),
                        "etc": _timed(200.0, 10.0, [0.2, 0.2]), "etc+etc_max": _timed(400.0, 5.0, [0.4, 0.4]),
                        "vanilla+pad_max": _timed(90.0, 35.0, [0.09, 0.1]),
                        "vanilla+threads_2_1": _timed(60.0, 50.0, [0.06, 0.06]),
                        "onnxruntime_2": _timed(50.0, 40.0, [0.05, 0.05]),
                        "onnxruntime_fused_2": _timed(60.0, 50.0, [0.06, 0.06]),
                        "ours_onnx_2": _timed(40.0, 60.0, [0.04, 0.04]),
                        "realformer_onnx_2": _timed(42.0, 58.0, [0.042, 0.042])}
    result = {"model": "quick", "machine": "test", "versions": {}, "threads": [2, 2], "requests": 3,
              "variant_requests": 3, "batch_size": 4, "batches": 2, "variant_batches": 2, "rounds": 2,
              "equality_max_abs_diff": {"ours_vs_transformers": 1e-7}, "tolerance": 1e-4, "results": results}
    report = bench.markdown_report(result)
    assert "| short | batch 1 | p50 80.0 / p99 120.0 ms | p50 100.0 / p99 150.0 ms | 0.80x latency (paired 0.85x)" in report
    assert "| long | batch 4 | 40.0 sent/s | 30.0 sent/s | 1.33x throughput (paired " in report
    assert "| etc+etc_max | 2.00x | 2.00x |" in report and "| vanilla+pad_max | 1.12x | 1.14x |" in report
    assert "ours_vs_transformers 1.0e-07 (tolerance 0.0001)" in report
    assert "| 2 | short | batch 1 | p50 60.0 / p99 90.0 ms | p50 50.0 / p99 75.0 ms | p50 60.0 / p99 90.0 ms " \
           "| 1.20x latency (paired 1.20x) | 1.00x latency (paired 1.00x) |" in report
    assert "| 2 | long | batch 4 | 50.0 sent/s | 40.0 sent/s | 50.0 sent/s | 1.25x throughput (paired 0.83x) " \
           "| 1.00x throughput (paired 1.00x) |" in report
    assert "| 1 | " not in report  # no onnxruntime rows at 1 thread in these results
    # Our ONNX export's table: time ratios at both batch sizes, int8 absent here ("-").
    assert "| 2 | short | batch 1 | p50 40.0 / p99 60.0 ms | - | p50 42.0 / p99 63.0 ms | p50 50.0 / p99 75.0 ms " \
           "| p50 60.0 / p99 90.0 ms | 0.80x (too few rounds for an interval) | 0.67x (too few rounds for an interval) " \
           "| - | 1.05x (too few rounds for an interval) | 0.67x (too few rounds for an interval) |" in report
    assert "| 2 | long | batch 4 | 60.0 sent/s | - | 58.0 sent/s | 40.0 sent/s | 50.0 sent/s | 0.80x" in report
