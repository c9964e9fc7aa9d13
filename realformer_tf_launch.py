"""Console-script launcher of realformer_tf (a module of its own, outside the package).

The jobs need Keras on TensorFlow, and the backend is fixed when Keras is first
imported, which `import realformer_tf` does. So the console scripts start here: the
process is prepared first, then the program's module is imported and run. A
`KERAS_BACKEND` the user set is kept (a TensorFlow-only job then ends with one
BackendError line); `import realformer_tf` itself never changes the backend.

    realformer-pretrain --input_file=... --bert_config_file=... --output_dir=...
"""

import glob
import importlib
import importlib.util
import os
import sys


def has_tpu_device():
    """Whether this machine exposes TPU chips (/dev/accel* up to v4, /dev/vfio/N from v5e)."""
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def _prepare_process():
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")  # before Keras reads ~/.keras/keras.json
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up INFO/WARNING lines
    if not has_tpu_device():
        # tensorflow-tpu loads libtpu when imported, and libtpu aborts the process on a
        # machine without TPU chips; plain tensorflow ignores the variable.
        os.environ.setdefault("TPU_LOAD_LIBRARY", "0")


def run(program):
    """Runs `realformer_tf.app.<program>.main(sys.argv)` in a prepared process and exits
    with its status."""
    _prepare_process()
    if importlib.util.find_spec("tensorflow") is None:
        sys.exit(f"error: {os.path.basename(sys.argv[0])} needs TensorFlow, which is not installed: "
                 "pip install 'realformer_tf[cpu]' (or [gpu]); on a TPU VM, `make install-tpu`")
    sys.exit(importlib.import_module(f"realformer_tf.app.{program}").main(sys.argv))


def pretrain():
    run("run_pretraining")


def classifier():
    run("run_classifier")


def squad():
    run("run_squad")


def export():
    run("export_saved_model")


def convert():
    run("convert_checkpoint")


def create_pretraining_data():
    run("create_pretraining_data")


def tpu_smoke_check():
    run("tpu_smoke_check")


def make_vocab():
    run("make_vocab")


def generate():
    run("generate")


def translation():
    run("run_translation")
