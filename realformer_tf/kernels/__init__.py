"""Fused LayerNorm, dropout and AdamW kernels for TensorFlow on CPU, built on first use.

TensorFlow runs a LayerNorm as a chain of separate ops (mean, subtract, square, mean,
rsqrt, multiply, ...), each a full pass over memory; on a CPU that chain, not the
arithmetic, is what NormFormer's extra LayerNorms cost. `fused_norm.cc` does each
LayerNorm, its gradient, and NormFormer's gelu + standardization in one pass per row
(~2.5-3x faster than the chain, benchmarks/benchmark_encoder.py `+tf_ops`).
`fused_dropout.cc` does dropout in one pass with a counter-based random mask that the
backward pass redraws instead of storing (TensorFlow's dropout takes four passes and
keeps the mask). `fused_adamw.cc` does AdamW's decay, gradient scaling and Adam step
in one pass over a variable (`realformer_tf.optimization.AdamW`).

The ops are used only where they are safe, decided when a step is traced:

- inside `fused_cpu_kernels()`, which the training loop (`realformer_tf.training`)
  enters around every step it runs, and a Keras user may enter around `model.fit`;
  elsewhere (model building, SavedModel export, a user's own tf.function) the layers
  keep TensorFlow's ops, so exported graphs load without this library;
- on the TensorFlow backend, for float32 tensors, with no GPU or TPU visible;
- not under XLA (`jit_compile=True`, TPUs), which cannot compile a custom op.

`REALFORMER_TF_FUSED_KERNELS=0` turns them off everywhere. The library is built with
the C++ compiler in `$CXX` (default `g++`) into `$REALFORMER_TF_CACHE` (default
`~/.cache/realformer_tf`), keyed by the source, TensorFlow's version and the CPU; if
that fails, the layers warn once and keep TensorFlow's ops (same formulas, slower;
dropout masks come from TensorFlow's generator then).

    import numpy as np
    import tensorflow as tf
    from realformer_tf import kernels
    from realformer_tf.layers.normalization import LayerNorm

    layer = LayerNorm(epsilon=1e-12)
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 5, 24)), tf.float32)
    with kernels.fused_cpu_kernels():
        y = tf.function(layer)(x)  # traced here: uses RealformerLayerNorm where it can
"""

import contextlib
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from absl import logging

# Every C++ source here goes into one library; the headers only count for its cache key.
_SOURCES = sorted(Path(__file__).parent.glob("*.cc"))
_HEADERS = sorted(Path(__file__).parent.glob("*.h"))
_ENV_SWITCH = "REALFORMER_TF_FUSED_KERNELS"
_lock = threading.Lock()
_state = {"depth": 0, "library": None, "failed": False, "gradients_registered": False}

# An empty tensor for RealformerStandardizeGrad's `slope` input: no gelu to chain.
NO_SLOPE_SHAPE = (0,)


@contextlib.contextmanager
def fused_cpu_kernels():
    """Steps traced inside this context use the fused CPU kernels where they apply.

    Process-wide rather than per thread: MirroredStrategy traces each replica's step in
    a thread of its own."""
    with _lock:
        _state["depth"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["depth"] -= 1


def ops_for(x):
    """The fused op module if the step being traced may use it for tensor `x`, else None."""
    if _state["depth"] == 0 or os.environ.get(_ENV_SWITCH, "1").strip() in ("0", "false", "off"):
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


def load():
    """The op module (building the library first if needed), or None where it cannot be built."""
    with _lock:
        if _state["library"] is None and not _state["failed"]:
            try:
                _state["library"] = _load_library()
            except (OSError, RuntimeError, subprocess.SubprocessError) as error:
                _state["failed"] = True
                logging.warning("Fused CPU kernels unavailable, using TensorFlow's ops "
                                "(same formulas, slower): %s", error)
        return _state["library"]


def _load_library():
    import tensorflow as tf

    path = library_path()
    if not path.exists():
        _compile(path)
    library = tf.load_op_library(str(path))
    if not _state["gradients_registered"]:  # once per process (tests may reload)
        tf.RegisterGradient("RealformerDropout")(_dropout_gradient)
        _state["gradients_registered"] = True
    return library


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
        " ".join(_compile_command([], "")),
        platform.machine(), _cpu_signature(),
    ]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("REALFORMER_TF_CACHE", Path.home() / ".cache" / "realformer_tf"))
    return cache / f"fused_kernels-{key}.so"


def _compile(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    logging.info("Compiling the fused CPU kernels for this machine into %s (once)", path)
    # Build under a temporary name and rename: concurrent builders never load half a file.
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        partial = Path(scratch) / path.name
        result = subprocess.run(_compile_command(_SOURCES, partial), capture_output=True,
                                text=True, timeout=600)
        if result.returncode != 0:
            raise RuntimeError(f"compiling {', '.join(s.name for s in _SOURCES)} failed (exit {result.returncode}):\n"
                               + result.stderr[-2000:])
        os.replace(partial, path)
