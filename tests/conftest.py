"""What every test process shares.

Two logical CPU devices: the MirroredStrategy tests split this machine's CPU into two
replicas and run in the test process. TensorFlow fixes its devices when its runtime
starts, so they are set here, before any test module is imported; every other test
places its ops on /cpu:0 as it would with one device. The pytest-xdist controller runs
no test and is left alone, as are the runs on the other Keras backends, which never
start TensorFlow.

One MirroredStrategy over them (`two_replicas`) serves every test of a process: each
strategy numbers its collective ops from the same start, so a second one in the same
process would collide with the first's (TensorFlow aborts with "Shape mismatch in the
collective instance").
"""

import os

import pytest


def pytest_configure(config):
    runs_tests = hasattr(config, "workerinput") or getattr(config.option, "numprocesses", None) in (None, 0)
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    if runs_tests and backend != "tensorflow":
        _one_thread_per_op(backend)
    if not runs_tests or backend != "tensorflow":
        return
    try:
        import tensorflow as tf
    except ImportError:  # a Keras-only install: no strategy tests to serve
        return
    from realformer_tf.app import start_devices_quietly

    start_devices_quietly()  # (without the CUDA probe's error line on this GPU-less machine)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    # One thread per op: three workers share two cores, and the tests' tiny ops gain
    # nothing from being split (measured on six test files: 211 s against 233 s with
    # TensorFlow's default pool). Inter-op stays default: MirroredStrategy's replicas run
    # side by side.
    tf.config.threading.set_intra_op_parallelism_threads(1)


# The files that keep a test worker busy for a minute or more, longest first (measured
# in a full run). pytest-xdist's loadfile hands out whole files in collection order, so
# these start first and the three workers end close together instead of one finishing
# a long file alone at the end. A file not named here keeps its place after them.
LONGEST_FILES_FIRST = (
    "test_training_xla.py", "test_keras_export_routes.py", "test_study.py", "test_pretraining.py",
    "test_reliability.py", "test_variant_evidence.py", "test_gradient_accumulation.py",
    "test_causal_lm_data.py", "test_distribution.py", "test_translation.py", "test_causal_lm.py",
    "test_beam_pretraining.py", "test_cli_errors.py", "test_make_vocab.py", "test_onnx_export.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept


@pytest.fixture(scope="session")
def two_replicas():
    """`tf.distribute.MirroredStrategy` over the two logical CPUs, one per test process."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


@pytest.fixture(scope="module")
def hf_modules_cache(tmp_path_factory):
    """transformers' copies of remote code (and anything else it would cache) go to a
    temporary folder for one test module; nothing is fetched from the Hub. transformers
    imports those copies as the package `transformers_modules` rooted in the cache: it
    is dropped from sys.modules on both sides, or a second module's cache (another file
    on the same xdist worker) would not be found under the first's."""
    import sys

    from transformers import dynamic_module_utils

    def forget_copies():
        for name in [m for m in sys.modules if m == "transformers_modules" or m.startswith("transformers_modules.")]:
            del sys.modules[name]

    home = tmp_path_factory.mktemp("hf_home")
    forget_copies()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dynamic_module_utils, "HF_MODULES_CACHE", str(home / "modules"))
        patch.setenv("HF_HOME", str(home))
        patch.setenv("HF_MODULES_CACHE", str(home / "modules"))
        patch.setenv("HF_HUB_OFFLINE", "1")
        patch.setattr(sys, "path", list(sys.path))  # init_hf_modules appends the cache
        yield home
    forget_copies()


def _one_thread_per_op(backend):
    """JAX and PyTorch as TensorFlow below: one thread per op for the workers that share
    the two cores (the tests' ops are tiny). XLA reads its flags when JAX starts its CPU
    backend, after this."""
    if backend == "jax":
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
    elif backend == "torch":
        import torch

        torch.set_num_threads(1)
