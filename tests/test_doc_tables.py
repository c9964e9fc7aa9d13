"""tools/render_doc_tables.py: docs' benchmark tables equal the results files' tables."""

import contextlib
import importlib.util
import io
import pathlib
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "render_doc_tables.py"

RESULTS = """# A fake benchmark

Some prose.

| a | b |
| --- | --- |
| 1 | 2 |

| second | table |
| --- | --- |
| x | y |
"""

DOC = """# Perf

<!-- table: benchmarks/results/serving.md -->
| a | b |
| --- | --- |
| 1 | 999 |
<!-- end table -->

<!-- table: benchmarks/results/serving.md#2 -->
<!-- end table -->
after
"""


def _load_tool():
    spec = importlib.util.spec_from_file_location("render_doc_tables", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


render_doc_tables = _load_tool()


def _run(*args):
    """The tool's main(argv) in this process, with its exit status and output."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = render_doc_tables.main(list(args))
    return types.SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def _fake_repo(tmp_path, doc=DOC):
    """A repository root in tmp_path whose results and docs files (named like the real
    ones) hold the fixtures above; the etc_latest.md results file is left out."""
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "serving.md").write_text(RESULTS)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "performance.md").write_text(doc)
    (tmp_path / "README.md").write_text("# no tables here\n")
    return tmp_path / "docs" / "performance.md"


def test_check_finds_stale_table_and_render_fixes_it(tmp_path):
    doc = _fake_repo(tmp_path)
    stale = _run("--check", "--root", str(tmp_path))
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "performance.md: is stale" in stale.stdout
    assert doc.read_text() == DOC  # --check writes nothing

    assert _run("--root", str(tmp_path)).returncode == 0
    text = doc.read_text()
    assert "| 1 | 2 |" in text and "999" not in text
    assert "| x | y |" in text and text.endswith("after\n")
    assert _run("--check", "--root", str(tmp_path)).returncode == 0


def test_missing_results_file_and_unclosed_marker_are_errors(tmp_path):
    _fake_repo(tmp_path, doc="<!-- table: benchmarks/results/etc_latest.md -->\n<!-- end table -->\n")
    missing = _run("--check", "--root", str(tmp_path))
    assert missing.returncode == 2 and "etc_latest.md does not exist" in missing.stderr
    (tmp_path / "docs" / "performance.md").write_text("<!-- table: benchmarks/results/serving.md -->\n")
    unclosed = _run("--check", "--root", str(tmp_path))
    assert unclosed.returncode == 2 and "no '<!-- end table -->'" in unclosed.stderr


def test_repository_docs_match_results_files():
    result = _run("--check", "--root", str(ROOT))
    assert result.returncode == 0, (result.stdout + result.stderr
                                    + "\nrun `make docs-tables` to copy the results in")


def test_json_results_render_through_their_benchmark_renderer(tmp_path):
    doc = _fake_repo(tmp_path, doc="<!-- table: benchmarks/results/jit.json -->\n<!-- end table -->\n")
    (tmp_path / "benchmarks" / "results" / "jit.json").write_text(
        '{"benchmark": "trainer_step_jit", "rows": {"false": {"median_ms": 100.0, '
        '"paired_ratio_to_false": 1.0, "cpu_ratio_to_false": 1.0}, "true": {"median_ms": 150.04, '
        '"paired_ratio_to_false": 1.5, "cpu_ratio_to_false": 1.25}}}')
    assert _run("--root", str(tmp_path)).returncode == 0
    assert "| everything | 150.0 | 1.50 | 1.25 |" in doc.read_text()
    (tmp_path / "benchmarks" / "results" / "jit.json").write_text('{"benchmark": "unknown"}')
    unknown = _run("--check", "--root", str(tmp_path))
    assert unknown.returncode == 2 and "no table renderer" in unknown.stderr
