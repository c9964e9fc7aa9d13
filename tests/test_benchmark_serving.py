"""benchmarks/benchmark_serving.py --quick end to end, so the serving benchmark cannot rot:
both sides export, load (the TensorFlow side without this package), agree on the
probabilities and get timed at every load."""

import importlib.util
import json
import os

import pytest

from helpers_data import run_script

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("torch") is None,
    reason="the serving benchmark compares against transformers + torch (both are in requirements-test.txt)")


@pytest.mark.slow
def test_quick_run_end_to_end(tmp_path):
    out = tmp_path / "serving.json"
    proc = run_script("benchmarks/benchmark_serving.py", "--quick", "--json_out", out,
                      "--markdown_out", tmp_path / "serving.md", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "serving.json.partial").exists()  # replaced by the whole result
    result = json.loads(out.read_text())
    eq = result["equality_max_abs_diff"]
    # Ours vs transformers, and each lever's export vs its baseline: the same probabilities.
    assert set(eq) >= {"ours_vs_transformers", "vanilla+pad_max_vs_vanilla", "etc+etc_max_vs_etc"}
    assert max(eq.values()) <= 1e-4, eq
    loads = {f"{n}/b{b}" for n in ("short", "medium", "long") for b in (1, result["batch_size"])}
    assert set(result["results"]) == loads
    for row in result["results"].values():
        for name in ("ours", "transformers", "realformer", "normformer", "etc", "etc+etc_max"):
            assert row[name]["calls"] >= 1 and row[name]["p50_ms"] > 0, (name, row)
    for key, row in result["results"].items():  # every round timed both main sides
        assert len(row["ours"]["round_median_s"]) == len(row["transformers"]["round_median_s"]) >= 1, key
    report = (tmp_path / "serving.md").read_text()
    assert "| ours / transformers |" in report and "(paired " in report


def _load_benchmark():
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "benchmarks", "benchmark_serving.py")
    spec = importlib.util.spec_from_file_location("benchmark_serving", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paired_ratio_is_immune_to_a_slow_round():
    # Round 1 ran on a machine twice as slow for both sides: the ratio within each round
    # is 0.8, so the paired ratio is 0.8 whatever the spell; the p50s are shifted by it.
    bench = _load_benchmark()
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
