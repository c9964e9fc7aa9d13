"""Results files: `key = value` lines, like the original eval_results.txt."""

import os

from realformer_tf.fileio import atomic_output


def report_results(output_dir, results, heading="Eval results"):
    """Writes output_dir/eval_results.txt and prints the same lines; returns its path."""
    path = os.path.join(output_dir, "eval_results.txt")
    write_results(path, results)
    print(f"***** {heading} *****")
    for key in sorted(results):
        print(f"  {key} = {results[key]}")
    print(f"Written to {path}", flush=True)
    return path


def write_results(path, results):
    """Writes `key = value` lines, sorted by key, like the original eval_results.txt."""
    with atomic_output(path) as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")
