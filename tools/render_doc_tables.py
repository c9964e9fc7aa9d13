#!/usr/bin/env python3
"""Copy the benchmark tables into the docs from the results files the benchmarks write.

A doc marks a table with two comments; everything between them is replaced by the
markdown table of the named results file (the lines starting with `|`):

    <!-- table: benchmarks/results/serving_idle.md -->
    | ... |
    <!-- end table -->

`PATH#N` picks the file's N-th table (1-based; default the first). A `.json` results
file is rendered by the function `JSON_RENDERERS` names for its "benchmark" field.
Paths are relative to the repository root. The docs scanned are README.md and docs/*.md (or the files
given on the command line).

Usage:
    python tools/render_doc_tables.py            # rewrite stale tables in place
    python tools/render_doc_tables.py --check    # exit 1 naming each stale doc

Exit status: 0 in sync (or rewritten), 1 a doc is stale (--check), 2 a marker or a
results file is wrong (missing file, no such table, marker without its end).
"""

import argparse
import json
import pathlib
import re
import sys

START = re.compile(r"^<!-- table: (?P<path>[^#\s]+)(?:#(?P<index>\d+))? -->\s*$")
END = "<!-- end table -->"
DEFAULT_ROOT = pathlib.Path(__file__).resolve().parent.parent


class MarkerError(Exception):
    """A marker or the results file it names cannot be used."""


def tables_of(text):
    """Return the markdown tables of `text`, each a list of lines starting with `|`."""
    tables, current = [], []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            current.append(line.rstrip())
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables


def _limit_table(data):
    """benchmark_limit.py's JSON: model FLOP/s as a fraction of the bare matmul loop."""
    rows = ["| preset, batch | precision | limit (bare loop) | fwd+bwd / limit | train / limit |",
            "|---|---|---|---|---|"]
    for r in data["rows"]:
        shape = r["shape"]
        name = "BERT-Base" if r["preset"] == "base" else r["preset"]
        rows.append(f"| {name} ({shape['num_layers']}L/{shape['hidden_size']}/"
                    f"{shape['intermediate_size']}, seq {shape['seq_length']}), {shape['batch_size']} "
                    f"| {r['precision']} | {r['limit_gflops']:.0f} GFLOP/s ({'XLA' if r['limit'] == 'bare_xla' else 'no XLA'}) "
                    f"| {r['fwd+bwd_fraction_of_limit']:.2f} | {r['train_fraction_of_limit']:.2f} |")
    return rows


def _jit_table(data):
    """benchmark_jit.py's JSON: the Trainer step with nothing / the update / all compiled."""
    names = {"false": "nothing (no XLA)", "update": "the optimizer update", "true": "everything"}
    rows = ["| compiled with XLA | median ms | time / no XLA (paired) | CPU time / no XLA |",
            "|---|---|---|---|"]
    for key, r in data["rows"].items():
        rows.append(f"| {names.get(key, key)} | {r['median_ms']:.1f} | "
                    f"{r['paired_ratio_to_false']:.2f} | {r['cpu_ratio_to_false']:.2f} |")
    return rows


# A JSON results file is rendered by the function named by its "benchmark" field.
JSON_RENDERERS = {"distance_to_matmul_limit": _limit_table, "trainer_step_jit": _jit_table}


def source_tables(path):
    """The tables of one results file: markdown tables of a .md, the rendered table of a .json."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".json":
        return tables_of(text)
    data = json.loads(text)
    renderer = JSON_RENDERERS.get(data.get("benchmark") if isinstance(data, dict) else None)
    if renderer is None:
        raise MarkerError(f"{path.name}: no table renderer for this JSON (known 'benchmark' "
                          f"values: {', '.join(sorted(JSON_RENDERERS))})")
    return [renderer(data)]


def render(doc_text, root, doc_name="doc"):
    """Return `doc_text` with every marked table replaced by its results file's table.

    Args:
        doc_text (str): the doc's markdown.
        root (pathlib.Path): the repository root the marker paths are relative to.
        doc_name (str): the doc's name, for error messages.

    Raises:
        MarkerError: a marker without its end, a missing results file, or no such table.
    """
    lines = doc_text.split("\n")
    out, i = [], 0
    while i < len(lines):
        match = START.match(lines[i])
        out.append(lines[i])
        i += 1
        if not match:
            continue
        try:
            end = lines.index(END, i)
        except ValueError:
            raise MarkerError(f"{doc_name}: '{lines[i - 1].strip()}' has no '{END}' after it")
        source = root / match["path"]
        if not source.is_file():
            raise MarkerError(f"{doc_name}: results file {match['path']} does not exist "
                              "(run its benchmark, or fix the marker's path)")
        index = int(match["index"] or 1)
        tables = source_tables(source)
        if not 1 <= index <= len(tables):
            raise MarkerError(f"{doc_name}: {match['path']} has {len(tables)} table(s), "
                              f"the marker asks for table {index}")
        out.extend(tables[index - 1])
        out.append(END)
        i = end + 1
    return "\n".join(out)


def docs_under(root):
    """README.md and docs/*.md under `root`, those that exist."""
    docs = [root / "README.md"] + sorted((root / "docs").glob("*.md"))
    return [d for d in docs if d.is_file()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("docs", nargs="*", type=pathlib.Path,
                        help="docs to render (default: README.md and docs/*.md)")
    parser.add_argument("--root", type=pathlib.Path, default=DEFAULT_ROOT,
                        help="repository root the marker paths are relative to")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; exit 1 if a doc is stale")
    args = parser.parse_args(argv)
    root = args.root.resolve()
    stale = []
    for doc in args.docs or docs_under(root):
        text = doc.read_text(encoding="utf-8")
        try:
            new = render(text, root, doc_name=str(doc))
        except MarkerError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        if new != text:
            stale.append(doc)
            if not args.check:
                doc.write_text(new, encoding="utf-8")
    for doc in stale:
        verb = "is stale" if args.check else "updated"
        print(f"{doc}: {verb}" + (" (run `make docs-tables`)" if args.check else ""))
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
