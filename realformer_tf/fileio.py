"""Output files that are either complete or absent.

A run killed while writing (a preemption, kill -9) must not leave a results file that
looks complete but is cut short: everything is written under a temporary name next to
the target and renamed into place once closed (a rename is atomic on local and POSIX
file systems; on object stores it is the closest there is).
"""

import contextlib
import os
import uuid


class _LocalFiles:
    """The `tf.io.gfile` calls this package makes, on local paths, for a process
    without TensorFlow (the layers and BertModel on JAX or PyTorch)."""

    GFile = staticmethod(open)
    exists = staticmethod(os.path.exists)
    isdir = staticmethod(os.path.isdir)
    remove = staticmethod(os.remove)

    @staticmethod
    def makedirs(path):
        os.makedirs(path, exist_ok=True)

    @staticmethod
    def rename(src, dst, overwrite=False):
        if not overwrite and os.path.exists(dst):
            raise FileExistsError(dst)
        os.replace(src, dst)


def gfile():
    """`tf.io.gfile` (local paths, gs://, ...) when TensorFlow is installed, else the
    same calls on local paths."""
    try:
        import tensorflow as tf
    except ImportError:
        return _LocalFiles
    return tf.io.gfile


@contextlib.contextmanager
def atomic_output(path, mode="w"):
    """`with atomic_output(path) as f: f.write(...)`; yields a `gfile().GFile`."""
    temp = f"{path}.tmp-{_unique()}"
    try:
        with gfile().GFile(temp, mode) as f:
            yield f
        gfile().rename(temp, path, overwrite=True)
    finally:
        if gfile().exists(temp):
            gfile().remove(temp)


def temporary_name(path):
    """A name next to `path` for a writer that takes a file name (e.g. a TFRecord
    writer in Model Garden); rename it onto `path` with `commit`.

    Unique per process and call (`<path>.incomplete-<pid>-<random>`): two processes
    writing the same file must not write, rename or delete each other's temporary file.
    """
    return f"{path}.incomplete-{_unique()}"


def _unique():
    return f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def commit(temporary, path):
    gfile().rename(temporary, path, overwrite=True)
