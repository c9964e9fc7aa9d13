"""Fused LayerNorm, dropout and AdamW kernels for TensorFlow on CPU, built on first use.

TensorFlow runs a LayerNorm as a chain of separate ops (mean, subtract, square, mean,
rsqrt, multiply, ...), each a full pass over memory; on a CPU that chain, not the
arithmetic, is what NormFormer's extra LayerNorms cost. `fused_norm.cc` does each
LayerNorm, its gradient, and NormFormer's gelu + standardization in one pass per row
(~2.5-3x faster than the chain, benchmarks/benchmark_encoder.py `+tf_ops`).
`fused_dropout.cc` does dropout in one pass with a counter-based random mask that the
backward pass redraws instead of storing (TensorFlow's dropout takes four passes and
keeps the mask). `fused_adamw.cc` does AdamW's decay, gradient scaling and Adam step
in one pass over a variable (`realformer_tf.training.optimization.AdamW`).

Whether a layer uses them is the layer's own option, `fused_kernels` (LayerNorm,
Dropout, AdamW; default True), set by whoever builds the model: `use_fused_kernels(model,
False)` sets it on every layer of a model. Where it is on, the ops run where they are
safe, decided when a call is traced:

- in training calls only (`training=True`; the optimizer's update is training by
  nature), so a graph traced for inference (`predict`, `model.export`,
  `tf.saved_model.save`, a user's serving `tf.function`) holds none of them and loads
  in TensorFlow Serving and in any Python without this library;
- on the TensorFlow backend, for float32 tensors, with no GPU or TPU visible;
- not under XLA (`jit_compile=True`, TPUs), which cannot compile a custom op.

So a Keras user's `model.fit` gets the same kernels as the package's training loop.

The library is built with the C++ compiler in `$CXX` (default `g++`) into
`$REALFORMER_TF_CACHE` (default `~/.cache/realformer_tf`), keyed by the sources,
TensorFlow's version, the compiler and its version, and the CPU; processes starting
together build once (a file lock). If building or loading fails in any way (no
compiler, a failed compile, a corrupt or foreign cached library), the layers warn once
and keep TensorFlow's ops (same formulas, slower; dropout masks come from TensorFlow's
generator then).

    import numpy as np
    import tensorflow as tf
    from realformer_tf import kernels
    from realformer_tf.layers.normalization import LayerNorm

    layer = LayerNorm(epsilon=1e-12)  # fused_kernels=True: RealformerLayerNorm where it can
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 5, 24)), tf.float32)
    y = tf.function(lambda x: layer(x, training=True))(x)
    kernels.use_fused_kernels(layer, False)  # TensorFlow's ops from the next trace on
"""

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import os
import platform
import shutil
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from absl import logging

# Every C++ source here goes into one library; the headers only count for its cache key.
_SOURCES = sorted(Path(__file__).parent.glob("*.cc"))
_HEADERS = sorted(Path(__file__).parent.glob("*.h"))
_lock = threading.Lock()
_state = {"library": None, "failed": False, "gradients_registered": False}
_SCRATCH_PREFIX = ".build-"
# Ops every build defines; a library without them is not ours (or not this version).
_OPS = ("realformer_layer_norm", "realformer_layer_norm_grad", "realformer_standardize",
        "realformer_standardize_grad", "realformer_gelu_standardize", "realformer_dropout",
        "realformer_apply_adam_w")

# An empty tensor for RealformerStandardizeGrad's `slope` input: no gelu to chain.
NO_SLOPE_SHAPE = (0,)


def ops_for(x, enabled=True):
    """The fused op module for tensor `x` in the call being traced, or None: when
    `enabled` (the calling layer's `fused_kernels` option), on TensorFlow, for float32,
    outside XLA, with no GPU or TPU visible, and where the library builds and loads."""
    if not enabled:
        return None
    import keras

    if keras.backend.backend() != "tensorflow" or keras.backend.standardize_dtype(x.dtype) != "float32":
        return None
    import tensorflow as tf
    from tensorflow.python.ops import control_flow_util

    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        return None
    if tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"):
        return None
    return load()


def use_fused_kernels(layer, enabled):
    """Sets the `fused_kernels` option of `layer` and of every layer inside it (a
    model, a block, ...) to `enabled`; takes effect at the next trace.

    Raises:
        ValueError: `layer` is not built yet (layers it makes when it builds would
            keep the default).
    """
    if not getattr(layer, "built", True):
        raise ValueError(f"use_fused_kernels({getattr(layer, 'name', layer)!r}, {enabled}): the layer is not built "
                         "yet, and the layers it makes when it builds would keep the default; build it first "
                         "(call it once, or model.build())")
    for sublayer in _with_sublayers(layer):
        if hasattr(sublayer, "fused_kernels"):
            sublayer.fused_kernels = bool(enabled)


def _with_sublayers(layer):
    flatten = getattr(layer, "_flatten_layers", None)  # Keras: the layer and every layer it tracks
    return list(flatten(include_self=True, recursive=True)) if flatten else [layer]


def load():
    """The op module (building the library first if needed), or None where it cannot be
    built or loaded: any failure (no compiler, a failed compile, a corrupt or foreign
    cached library) is one warning, and the layers keep TensorFlow's ops."""
    with _lock:
        if _state["library"] is None and not _state["failed"]:
            try:
                _state["library"] = _load_library()
            except Exception as error:  # noqa: BLE001  (whatever breaks, the run must not)
                _state["failed"] = True
                logging.warning("Fused CPU kernels unavailable, using TensorFlow's ops "
                                "(same formulas, slower): %s", _first_lines(error))
        return _state["library"]


def _first_lines(error, limit=6):
    lines = str(error).strip().splitlines()
    return "\n".join(lines[:limit] + (["..."] if len(lines) > limit else [])) or type(error).__name__


def _load_library():
    import tensorflow as tf

    path = library_path()
    with _build_lock(path):
        _remove_litter(path.parent)
        if not path.exists():
            _compile(path)
    try:
        library = tf.load_op_library(str(path))
        missing = [op for op in _OPS if not hasattr(library, op)]
        if missing:
            raise RuntimeError(f"it lacks the op(s) {', '.join(missing)}")
    except Exception as error:
        # A half-copied file or one built for another TensorFlow: removed, so that the next
        # process builds it anew (this one keeps TensorFlow's ops).
        with _build_lock(path):
            path.unlink(missing_ok=True)
        raise RuntimeError(f"the cached library {path} does not load ({_first_lines(error, 2)}); "
                           "removed it, the next run rebuilds it") from None
    if not _state["gradients_registered"]:  # once per process (tests may reload)
        tf.RegisterGradient("RealformerDropout")(_dropout_gradient)
        _state["gradients_registered"] = True
    return library


@contextlib.contextmanager
def _build_lock(path):
    """An exclusive lock on `<library>.lock`: processes starting together build once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _remove_litter(cache):
    """Scratch folders of builds that were killed (only the lock's holder builds, so any
    scratch folder seen under the lock is left over)."""
    for scratch in cache.glob(_SCRATCH_PREFIX + "*"):
        shutil.rmtree(scratch, ignore_errors=True)


def _dropout_gradient(op, dy):
    """The mask is a function of (seed, position): the gradient redraws it on dy."""
    return [load().realformer_dropout(dy, op.inputs[1], rate=op.get_attr("rate")), None]


def _compile_command(sources, output):
    import tensorflow as tf

    compiler = os.environ.get("CXX", "g++")
    if shutil.which(compiler) is None:
        raise RuntimeError(f"no C++ compiler {compiler!r} on PATH (set $CXX to one)")
    return [compiler, "-shared", "-fPIC", "-O3", "-march=native", "-fopenmp-simd",
            "-fno-trapping-math", "-fno-math-errno", "-w", *map(str, sources), "-o", str(output),
            *tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]


def _cpu_signature():
    """The CPU's model and instruction-set flags: `-march=native` builds for them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    keep = ("model name", "flags", "Features", "CPU part")
    return "\n".join(sorted({line for line in lines if line.startswith(keep)}))


def library_path():
    """Where this machine's build lives: keyed by the source, TensorFlow, compiler and CPU."""
    import tensorflow as tf

    key = hashlib.sha256("\0".join([
        *(source.read_text() for source in _SOURCES + _HEADERS), tf.__version__,
        " ".join(_compile_command([], "")), _compiler_version(os.environ.get("CXX", "g++")),
        platform.machine(), _cpu_signature(),
    ]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("REALFORMER_TF_CACHE", Path.home() / ".cache" / "realformer_tf"))
    return cache / f"fused_kernels-{key}.so"


def _compile(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.info("Compiling the fused CPU kernels for this machine into %s (once)", path)
    # Build in a scratch folder and rename: no process ever loads half a file, and a
    # killed build leaves only the folder, which the next build removes.
    with tempfile.TemporaryDirectory(prefix=_SCRATCH_PREFIX, dir=path.parent) as scratch:
        partial = Path(scratch) / path.name
        result = subprocess.run(_compile_command(_SOURCES, partial), capture_output=True,
                                text=True, timeout=600, preexec_fn=_die_with_parent)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {', '.join(s.name for s in _SOURCES)} failed (exit {result.returncode}):\n"
                               + result.stderr[-2000:])
        os.replace(partial, path)


def _die_with_parent():
    """In the compiler's process: Linux ends it when the building process dies."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: a killed build's compiler then runs to its end


@functools.lru_cache(maxsize=None)
def _compiler_version(compiler):
    """The compiler's first `--version` line (part of the cache key: another compiler,
    another build)."""
    try:
        result = subprocess.run([compiler, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"unknown ({error})"
    lines = (result.stdout or result.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"
