#!/usr/bin/env python3
"""create_pretraining_data.py in this process vs as an Apache Beam pipeline on the
DirectRunner (1 and 2 worker processes), on a corpus and on the same corpus doubled.

Each leg runs the program as a subprocess with the same flags and measures:
- examples/s: examples written / the command's wall time (start-up included: imports,
  the input checks, the Beam workers' start);
- peak RSS of each process of the leg's tree (VmHWM, read from /proc every 0.2 s): the
  program itself (in-process: the only process; Beam: the launching process, which on
  the DirectRunner also holds the runner's shuffle buffers) and each Beam worker;
- CPU seconds of the leg's processes, and how busy the machine's CPUs were with other
  processes meanwhile (a disturbed measurement says so).

The corpus is a text file (or .xz) given by path. `--corpus_format rst` turns raw
reStructuredText into create_pretraining_data's input (one line a "sentence", a new
document at each section title); `text` takes it as is (blank lines between documents).

    python benchmarks/benchmark_beam_pretraining.py --corpus CORPUS.txt.xz --vocab VOCAB.txt \\
        --json_out benchmarks/results/beam_pretraining.json \\
        --markdown_out benchmarks/results/beam_pretraining.md
    # a small version (seconds, to check the benchmark itself):
    python benchmarks/benchmark_beam_pretraining.py --corpus ... --vocab ... --max_documents 150 --dupe_factor 1
"""

import argparse
import json
import lzma
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAM = os.path.join(ROOT, "create_pretraining_data.py")
LEGS = {
    "in_process": [],
    "beam_1": ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=multi_processing"],
    "beam_2": ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"],
}
_HEADING = re.compile(r"^(=+|\*+)\s*$")  # reST's chapter and section title lines
_WROTE = re.compile(r"Wrote (\d+) examples")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True, help="text file (.txt, or .xz)")
    p.add_argument("--vocab", required=True, help="BERT WordPiece vocab.txt")
    p.add_argument("--corpus_format", choices=("rst", "text"), default="rst")
    p.add_argument("--max_documents", type=int, default=None, help="use the first N documents (a small run)")
    p.add_argument("--legs", default="in_process,beam_1,beam_2")
    p.add_argument("--sizes", default="1,2", help="corpus multiples (2: the corpus twice, as two files)")
    p.add_argument("--repeats", type=int, default=1,
                   help="runs of every leg, interleaved (leg 1, leg 2, ..., leg 1, ...); the ratios use the "
                        "median examples/s (this machine's speed drifts by ~10%% over minutes)")
    p.add_argument("--dupe_factor", type=int, default=5)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--max_predictions_per_seq", type=int, default=20)
    p.add_argument("--documents_per_bucket", type=int, default=20,
                   help="small enough for ~70 buckets on the corpus: the DirectRunner deals whole buckets to its workers")
    p.add_argument("--num_output_shards", type=int, default=8,
                   help="shards for the corpus once; x2 writes twice as many (shards of the same size: a "
                        "worker holds one shard, so their size, not their count, is what one fixes)")
    p.add_argument("--work_dir", default=None, help="where corpora and outputs go (default: a temporary folder)")
    p.add_argument("--json_out", default=None)
    p.add_argument("--markdown_out", default=None)
    return p.parse_args(argv)


# ------------------------------------------------------------------------ the corpus


def read_text(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        return f.read()


def rst_documents(text):
    """Raw reST -> documents of non-blank lines, a new one at each section title (the
    line above a heading underline)."""
    docs, current, previous_blank = [], [], True
    for line in text.splitlines():
        line = line.strip()
        if _HEADING.match(line):
            if current and not previous_blank:
                title = current.pop()
                if current:
                    docs.append(current)
                current = [title]
            previous_blank = False
            continue
        previous_blank = not line
        if line:
            current.append(line)
    if current:
        docs.append(current)
    return docs


def text_documents(text):
    return [block.splitlines() for block in re.split(r"\n\s*\n", text) if block.strip()]


def write_corpora(args, work_dir):
    """{size: [files]}: the corpus once, and as `size` copies in separate files."""
    text = read_text(args.corpus)
    docs = rst_documents(text) if args.corpus_format == "rst" else text_documents(text)
    docs = docs[: args.max_documents] if args.max_documents else docs
    body = "\n\n".join("\n".join(doc) for doc in docs) + "\n"
    corpora = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        folder = os.path.join(work_dir, f"corpus_x{size}")
        os.makedirs(folder, exist_ok=True)
        corpora[size] = []
        for copy in range(size):
            path = os.path.join(folder, f"part-{copy}.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(body)
            corpora[size].append(path)
    return corpora, dict(documents=len(docs), lines=sum(map(len, docs)), bytes=len(body.encode("utf-8")))


# ----------------------------------------------------------------------- measurement


def _children_of():
    """{pid: [child pids]} of every process (from /proc)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            children.setdefault(ppid, []).append(int(name))
    return children


def _tree(root):
    children, found, stack = _children_of(), [], [root]
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, []))
    return found


def _process_sample(pid):
    """(cmdline, peak RSS kB, CPU seconds) of a live process, or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/status") as f:
            hwm = next((int(line.split()[1]) for line in f if line.startswith("VmHWM:")), 0)
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, StopIteration, IndexError, ValueError):
        return None
    return cmdline, hwm, cpu


def _busy_cpu_seconds():
    """CPU seconds all processes of the machine have used (from /proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_leg(command, env, poll_s=0.2):
    """Runs `command`, sampling its process tree; returns what was measured."""
    processes, start, busy0 = {}, time.time(), _busy_cpu_seconds()
    with tempfile.TemporaryFile(mode="w+") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        while proc.poll() is None:
            for pid in _tree(proc.pid):
                sample = _process_sample(pid)
                if sample and "python" in sample[0].split(" ")[0]:  # not the shell that starts a worker
                    processes[pid] = sample
            time.sleep(poll_s)
        wall = time.time() - start
        busy = _busy_cpu_seconds() - busy0
        log.seek(0)
        output = log.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({proc.returncode}):\n{output[-4000:]}")
    wrote = _WROTE.findall(output)
    examples = int(wrote[-1]) if wrote else 0
    workers = {pid: s for pid, s in processes.items() if "sdk_worker_main" in s[0]}
    controller = processes.get(proc.pid)
    own_cpu = sum(s[2] for s in processes.values())
    return dict(
        wall_s=round(wall, 2), examples=examples, examples_per_s=round(examples / wall, 1),
        controller_peak_rss_mb=round(controller[1] / 1024) if controller else None,
        worker_peak_rss_mb=[round(s[1] / 1024) for _, s in sorted(workers.items())],
        cpu_s=round(own_cpu, 1),
        # What else ran: the machine's busy CPU seconds less this leg's own, over the wall time.
        other_cpu_load=round(max(busy - own_cpu, 0.0) / wall, 2),
        output_tail=output.strip().splitlines()[-3:],
    )


def output_digest(prefix):
    """(records, md5 of the files' bytes in name order) of what a leg wrote: the Beam legs
    on one corpus must write the same bytes whatever the number of workers."""
    import glob
    import hashlib
    import struct

    digest, records = hashlib.md5(), 0
    for path in sorted(glob.glob(prefix + "*")):
        with open(path, "rb") as f:
            data = f.read()
        digest.update(data)
        offset = 0
        while offset < len(data):  # TFRecord framing: length (8), its CRC (4), data, CRC (4)
            (length,) = struct.unpack_from("<Q", data, offset)
            offset += 16 + length
            records += 1
    return records, digest.hexdigest()


def leg_command(args, leg, files, output, size):
    flags = [f"--input_file={','.join(files)}", f"--vocab_file={args.vocab}", "--do_lower_case=True",
             f"--max_seq_length={args.max_seq_length}", f"--max_predictions_per_seq={args.max_predictions_per_seq}",
             f"--dupe_factor={args.dupe_factor}", "--masked_lm_prob=0.15", "--random_seed=12345"]
    if leg == "in_process":
        flags.append(f"--output_file={output}.tfrecord")
    else:
        flags += [f"--output_file={output}", f"--num_output_shards={args.num_output_shards * size}",
                  f"--documents_per_bucket={args.documents_per_bucket}", *LEGS[leg]]
    return [sys.executable, PROGRAM, *flags]


# ---------------------------------------------------------------------------- report


def _median(values):
    values = sorted(values)
    middle = len(values) // 2
    return values[middle] if len(values) % 2 else (values[middle - 1] + values[middle]) / 2


def medians(rows):
    """{(leg, size): the leg's median examples/s over its runs}."""
    keys = {(r["leg"], r["size"]) for r in rows}
    return {k: _median([r["examples_per_s"] for r in rows if (r["leg"], r["size"]) == k]) for k in keys}


def summarize(rows):
    """The goals: Beam with 2 workers vs in-process (median examples/s over the runs; with
    several runs, also the lowest and highest ratio of a run to the in-process run next to
    it), and how a worker's peak RSS moves when the corpus doubles (in-process: the
    process's; first runs)."""
    rate, out = medians(rows), {}
    for size in sorted({r["size"] for r in rows}):
        base = rate.get(("in_process", size))
        for leg in ("beam_1", "beam_2"):
            if base and (leg, size) in rate:
                out[f"{leg}_speedup_x{size}"] = round(rate[(leg, size)] / base, 2)
                paired = [r["examples_per_s"] / b["examples_per_s"] for r in rows for b in rows
                          if r["leg"] == leg and b["leg"] == "in_process" and r["size"] == b["size"] == size
                          and r.get("run", 1) == b.get("run", 1)]
                if len(paired) > 1:
                    out[f"{leg}_speedup_x{size}_range"] = [round(min(paired), 2), round(max(paired), 2)]
    by = {(r["leg"], r["size"]): r for r in rows if r.get("run", 1) == 1}
    for size in sorted({r["size"] for r in rows}):
        digests = {r["md5"] for r in rows if r["leg"] != "in_process" and r["size"] == size}
        if digests:
            out[f"beam_same_bytes_x{size}"] = len(digests) == 1
    for leg in LEGS:
        one, two = by.get((leg, 1)), by.get((leg, 2))
        if one and two:
            peak = (lambda r: max(r["worker_peak_rss_mb"])) if leg != "in_process" else (
                lambda r: r["controller_peak_rss_mb"])
            out[f"{leg}_peak_rss_growth_x2"] = round(peak(two) / peak(one) - 1, 3)
            launcher = two["controller_peak_rss_mb"] / one["controller_peak_rss_mb"]
            out[f"{leg}_controller_rss_growth_x2"] = round(launcher - 1, 3)
    return out


def markdown(result):
    names = {"in_process": "in-process (Model Garden)", "beam_1": "Beam DirectRunner, 1 worker",
             "beam_2": "Beam DirectRunner, 2 workers"}
    lines = [
        "# create_pretraining_data.py: in-process vs Apache Beam (DirectRunner)", "",
        f"Corpus: {result['corpus']['documents']} documents, {result['corpus']['lines']} lines, "
        f"{result['corpus']['bytes'] / 1e6:.1f} MB (x2: the same text twice, as two files); "
        f"dupe_factor {result['args']['dupe_factor']}, max_seq_length {result['args']['max_seq_length']}, "
        f"{result['args']['documents_per_bucket']} documents per bucket, {result['args']['num_output_shards']} shards "
        f"(x2: {2 * result['args']['num_output_shards']}, shards of the same size). "
        f"{result['machine']}.", "",
        "| corpus | run | path | examples | wall s | examples/s | vs in-process (same run) | peak RSS per worker (MB) | "
        "launching process peak RSS (MB) | CPU s | other load |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base = {(r["size"], r.get("run", 1)): r for r in result["rows"] if r["leg"] == "in_process"}
    for r in result["rows"]:
        paired = base.get((r["size"], r.get("run", 1)))
        ratio = f"{r['examples_per_s'] / paired['examples_per_s']:.2f}x" if paired else "-"
        workers = ", ".join(str(v) for v in r["worker_peak_rss_mb"]) or f"{r['controller_peak_rss_mb']} (the process)"
        lines.append(f"| x{r['size']} | {r.get('run', 1)} | {names[r['leg']]} | {r['examples']} | {r['wall_s']:.1f} | "
                     f"{r['examples_per_s']:.0f} | {ratio} | {workers} | {r['controller_peak_rss_mb']} | "
                     f"{r['cpu_s']:.0f} | {r['other_cpu_load']:.2f} |")
    lines += ["", "Wall time includes start-up (imports, the input checks, the Beam workers' start). "
              "\"other load\": CPUs' worth of other processes running meanwhile (0 on an idle machine). "
              "On the DirectRunner the launching process also holds the runner's shuffle, which "
              "carries the documents' text (the examples go through the run's bucket files); on "
              "Dataflow, Flink or Spark the service holds it.", "",
              "Summary: " + ", ".join(f"{k} {v}" for k, v in result["summary"].items())]
    return "\n".join(lines) + "\n"


def main(argv=None):
    args = parse_args(argv)
    legs = [leg.strip() for leg in args.legs.split(",") if leg.strip()]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as scratch:
        work_dir = args.work_dir or scratch
        corpora, corpus = write_corpora(args, work_dir)
        print(f"corpus: {corpus}", flush=True)
        rows = []
        for size, files in corpora.items():
            for run, leg in [(run, leg) for run in range(1, args.repeats + 1) for leg in legs]:
                output = os.path.join(work_dir, f"out_{leg}_x{size}", "train")
                os.makedirs(os.path.dirname(output), exist_ok=True)
                row = dict(leg=leg, size=size, run=run, **run_leg(leg_command(args, leg, files, output, size), env))
                row["records"], row["md5"] = output_digest(output)
                rows.append(row)
                print(json.dumps({k: v for k, v in row.items() if k != "output_tail"}), flush=True)
    # Only the files' names: where a machine keeps its data is not part of the result.
    recorded = dict(vars(args), corpus=os.path.basename(args.corpus), vocab=os.path.basename(args.vocab))
    for name in ("work_dir", "json_out", "markdown_out"):
        recorded.pop(name)
    result = dict(benchmark="beam_pretraining", corpus=corpus, args=recorded, rows=rows,
                  summary=summarize(rows), machine=f"{os.cpu_count()} CPUs, {platform.machine()}",
                  date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    print(json.dumps(result["summary"]))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(result, f, indent=2)
    if args.markdown_out:
        with open(args.markdown_out, "w") as f:
            f.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
