"""benchmarks/benchmark_serving.py --quick end to end, so the serving benchmark cannot rot:
both sides export, load (the TensorFlow side without this package), agree on the
probabilities and get timed at every load."""

import importlib.util
import json

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
    assert "| ours / transformers |" in (tmp_path / "serving.md").read_text()
