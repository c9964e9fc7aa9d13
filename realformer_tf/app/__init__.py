"""The command-line programs, one module each: its absl flags and `main()`.

`main()` is what the installed console scripts run (`realformer-pretrain`, ...: see
`realformer_tf_launch`, which prepares the process before Keras is imported) and what
the repository's top-level scripts (`run_pretraining.py`, ...) call. The flags are the
original google-research/bert ones; everything below this package takes plain options.
"""

import os
import sys
import tempfile

from absl import app as absl_app
from absl import flags

from realformer_tf.jobs import cli
from realformer_tf.errors import require_tensorflow_backend

# Where the GPU driver exposes its devices; without them TensorFlow's CUDA probe can only fail.
_NVIDIA_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")
_HELP_FLAGS = ("--help", "-help", "--helpfull", "--helpshort", "--helpxml", "-h", "-?")
_CUDA_PROBE_NOISE = ("failed call to cuInit", "Could not find cuda drivers")


def run_main(main, doc, required_flags=()):
    """Runs an absl `main(argv)` as a TensorFlow job.

    Args:
      main: the program's `main(argv)`.
      doc: its module docstring, shown by `--help` (absl reads `__main__`'s, which for a
        console script is pip's generated wrapper).
      required_flags: flags absl must see on the command line.
    """
    main_module = sys.modules.get("__main__")
    if main_module is not None and not getattr(main_module, "__doc__", None):
        main_module.__doc__ = doc
    for name in required_flags:
        flags.mark_flag_as_required(name)
    start_devices_quietly()  # before absl's run: TensorFlow's after-init hook lists the GPUs
    try:
        absl_app.run(cli.run(_as_tensorflow_job(main)))
    except SystemExit as exit_:
        # absl exits 1 after printing the help it was asked for; asking is not an error.
        if exit_.code == 1 and any(arg.split("=")[0] in _HELP_FLAGS for arg in sys.argv[1:]):
            sys.exit(0)
        raise


def _as_tensorflow_job(main):
    def job(argv):
        require_tensorflow_backend(os.path.basename(sys.argv[0]) or "This program")  # one BackendError line otherwise
        return main(argv)

    return job


def has_nvidia_device():
    """Whether this machine exposes an NVIDIA (or WSL GPU) device to processes."""
    return any(os.path.exists(node) for node in _NVIDIA_DEVICE_NODES)


def start_devices_quietly():
    """Lets TensorFlow enumerate its devices, without the `E ... cuInit ... CUDA error`
    line a CUDA build prints on every machine without a GPU.

    On a machine with an NVIDIA device node nothing is filtered: there the line means a
    real driver problem. Elsewhere TensorFlow's stderr during the probe is kept, less
    the lines of the failed CUDA probe.
    """
    import tensorflow as tf

    if has_nvidia_device():
        tf.config.list_physical_devices()
        return
    with tempfile.TemporaryFile(mode="w+b") as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            tf.config.list_physical_devices()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        captured.seek(0)
        for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
            if not any(noise in line for noise in _CUDA_PROBE_NOISE):
                sys.stderr.write(line)
