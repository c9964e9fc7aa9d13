"""The DirectRunner's local worker processes (`--direct_running_mode=multi_processing`),
as `realformer_tf.data.beam_pretraining` runs them: their Beam logging set to errors, and
the lines each prints on start kept off the terminal they share with the program.
"""

import contextlib
import os
import sys
import threading

# Beam's own messages when imported without Google Cloud's client libraries: the pipeline
# reads and writes gs:// through tf.io.gfile, never through Beam's GCS I/O.
IMPORT_NOISE = ("Failed to import GCSFileSystem", "apitools not found")
# What each worker process prints on start, before it reads its log level
# (apache_beam/runners/worker/sdk_worker_main.py): the import notes, and its logging
# handler's line at the INFO level it starts with.
WORKER_START_NOISE = (*IMPORT_NOISE, "Logging handler created.")


@contextlib.contextmanager
def stderr_without(noise):
    """This process's stderr (file descriptor 2, which the DirectRunner's worker processes
    inherit) passed on line by line, less the lines holding one of `noise`: each worker
    prints Beam's start-up lines before its log level applies, once per worker. Anything
    else (errors, tracebacks, TensorFlow's own lines) passes as it comes."""
    noise = tuple(n.encode() for n in noise)
    sys.stderr.flush()
    terminal = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    os.close(write_end)

    def pass_on():
        with os.fdopen(read_end, "rb") as lines, os.fdopen(os.dup(terminal), "wb", buffering=0) as out:
            for line in lines:
                if not any(n in line for n in noise):
                    out.write(line)

    reader = threading.Thread(target=pass_on, name="stderr_without", daemon=True)
    reader.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # the pipe's last writer here; a worker still alive holds its own
        os.close(terminal)
        reader.join(timeout=10)


def with_quiet_local_workers(pipeline_args, runner):
    """`pipeline_args`, plus --default_sdk_harness_log_level=ERROR on the DirectRunner
    unless given: its worker processes write to this terminal, and at their default
    (INFO) each prints some twenty lines about its channels. Errors still show; on a
    cloud runner the workers' logs go to the service, untouched."""
    args = list(pipeline_args)
    if "direct" in str(runner).lower() and not any(a.startswith("--default_sdk_harness_log_level") for a in args):
        args.append("--default_sdk_harness_log_level=ERROR")
    return args
