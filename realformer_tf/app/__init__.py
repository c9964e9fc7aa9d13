"""The command-line programs, one module each: `define_flags(flag_values)` and
`main(argv) -> int`.

Each program defines its flags on a `flags.FlagValues` of its own, made anew by every
`main(argv)` call, so the programs import side by side in one process and `main` runs
any number of times there with different flags (a notebook, a test, a pipeline). The
installed console scripts (`realformer-pretrain`, ...: see `realformer_tf_launch`,
which prepares the process before Keras is imported) and the repository's top-level
scripts (`run_pretraining.py`, ...) call `sys.exit(main(sys.argv))`. The flags are the
original google-research/bert ones; everything below this package takes plain options.
"""

import contextlib
import os
import sys
import tempfile

from absl import flags
from absl import logging

from realformer_tf.errors import UserError, require_tensorflow_backend

# Where the GPU driver exposes its devices; without them TensorFlow's CUDA probe can only fail.
_NVIDIA_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg")
_HELP_FLAGS = ("--help", "-help", "--helpfull", "--helpshort", "--helpxml", "-h", "-?")
_CUDA_PROBE_NOISE = ("failed call to cuInit", "Could not find cuda drivers")

# Errors a user can cause (config, checkpoint, input, divergence, flags: all UserError);
# anything else is a bug and keeps its traceback.
USER_ERRORS = (UserError,)


def run_program(argv, doc, define_flags, job, required_flags=(), needs_tensorflow=True,
                pass_unknown_flags=False):
    """Parses `argv` into a fresh FlagValues and runs `job(flag_values)`.

    Args:
      argv: the command line, program name first (`sys.argv` when None).
      doc: the program's module docstring, printed by `--help`.
      define_flags: `define_flags(flag_values)`, the program's flags.
      job: `job(flag_values)`; returns None (success) or an exit status. A UserError
        it raises becomes one `error:` line on stderr and status 1.
      required_flags: flags that must be given.
      needs_tensorflow: whether the job runs Keras on TensorFlow (checked first).
      pass_unknown_flags: whether flags the program does not define are handed on
        instead of refused: then `job(flag_values, unparsed)` gets them as a list (e.g.
        Apache Beam pipeline options, which another parser reads).

    Returns:
      The exit status: 0 on success or help, 1 for a user error (bad flags included).
    """
    argv = list(sys.argv if argv is None else argv)
    program = os.path.basename(argv[0]) if argv else "program"
    flag_values = program_flags(define_flags, required_flags)
    if any(arg.split("=")[0] in _HELP_FLAGS for arg in argv[1:]):
        print(f"{doc.strip()}\n\nFlags:\n{flag_values.get_help()}")
        return 0
    try:
        unparsed = flag_values(argv, known_only=pass_unknown_flags)[1:]
    except flags.Error as e:
        print(f"error: {e} (see {program} --helpfull)", file=sys.stderr)
        return 1
    with _logging_verbosity(flag_values["verbosity"].value):
        try:
            if needs_tensorflow:
                start_devices_quietly()
                require_tensorflow_backend(program)  # one BackendError line otherwise
            status = job(flag_values, unparsed) if pass_unknown_flags else job(flag_values)
        except USER_ERRORS as e:
            if flag_values["verbosity"].present:
                logging.error("%s", e)
            print(f"error: {e}", file=sys.stderr)
            return 1
    return int(status or 0)


def program_flags(define_flags, required_flags=()):
    """A new FlagValues with the program's flags and `--verbosity`, not yet parsed."""
    flag_values = flags.FlagValues()
    define_flags(flag_values)
    flags.DEFINE_integer("verbosity", None, "absl logging verbosity for this run (0: INFO, 1: DEBUG); "
                         "default: warnings and errors only (the programs print their own progress).",
                         flag_values=flag_values)
    flags.mark_flags_as_required(list(required_flags), flag_values=flag_values)
    return flag_values


@contextlib.contextmanager
def _logging_verbosity(verbosity):
    """absl's verbosity for the run (WARNING unless asked), restored afterwards: orbit and
    the programs print their progress, and absl INFO would repeat it."""
    previous = logging.get_verbosity()
    logging.set_verbosity(logging.WARNING if verbosity is None else verbosity)
    try:
        yield
    finally:
        logging.set_verbosity(previous)


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
