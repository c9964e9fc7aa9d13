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
    if not runs_tests or os.environ.get("KERAS_BACKEND", "tensorflow") != "tensorflow":
        return
    try:
        import tensorflow as tf
    except ImportError:  # a Keras-only install: no strategy tests to serve
        return
    from realformer_tf.app import start_devices_quietly

    start_devices_quietly()  # (without the CUDA probe's error line on this GPU-less machine)
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)



@pytest.fixture(scope="session")
def two_replicas():
    """`tf.distribute.MirroredStrategy` over the two logical CPUs, one per test process."""
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
