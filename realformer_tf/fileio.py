"""Output files that are either complete or absent.

A run killed while writing (a preemption, kill -9) must not leave a results file that
looks complete but is cut short: everything is written under a temporary name next to
the target and renamed into place once closed (a rename is atomic on local and POSIX
file systems; on object stores it is the closest there is).
"""

import contextlib
import uuid

import tensorflow as tf


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """`with atomic_output(path) as f: f.write(...)`; yields a tf.io.gfile.GFile."""
    temp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        with tf.io.gfile.GFile(temp, mode) as f:
            yield f
        tf.io.gfile.rename(temp, path, overwrite=True)
    finally:
        if tf.io.gfile.exists(temp):
            tf.io.gfile.remove(temp)


def temporary_name(path):
    """A name next to `path` for a writer that takes a file name (e.g. a TFRecord
    writer in Model Garden); rename it onto `path` with `commit`."""
    return f"{path}.incomplete"


def commit(temporary, path):
    tf.io.gfile.rename(temporary, path, overwrite=True)
