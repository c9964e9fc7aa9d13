"""The first thing to run on a new TPU: every model variant, small, compiled and
trained for a few steps in bfloat16, with a checkpoint written and restored under
--output_dir; prints a one-screen report (see the README's TPU section).

  python tpu_smoke_check.py --tpu=local --output_dir=gs://my-bucket/smoke   # TPU VM
  python tpu_smoke_check.py --tpu=my-tpu --output_dir=gs://my-bucket/smoke  # TPU node
  python tpu_smoke_check.py --output_dir=/tmp/smoke                          # CPU / GPU
"""

import dataclasses
import sys

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.training import distribution
from realformer_tf.jobs import smoke_check
from realformer_tf.training import tpu
from realformer_tf.jobs.runner import RunOptions
from realformer_tf.jobs.smoke_check import VARIANTS, Size


def define_flags(fv):
    """tpu_smoke_check.py's flags on the FlagValues `fv`: the run scripts' TPU flags plus
    the check's size."""
    flags.DEFINE_string("tpu", None, "local on a TPU VM; else the TPU's name or grpc://IP:8470 address.", flag_values=fv)
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU (for a TPU name).", flag_values=fv)
    flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU (for a TPU name).", flag_values=fv)
    flags.DEFINE_integer("tpu_timeout_s", tpu.DEFAULT_TIMEOUT_S, "Seconds to find and start the TPU.", flag_values=fv)
    flags.DEFINE_enum("distribution_strategy", "auto", distribution.STRATEGIES,
                      "auto: tpu when --tpu is given, else as the run scripts decide.", flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Where the checkpoints go (gs://... for a TPU node); "
                        "a smoke_check-<time> folder inside it, removed when every variant passes.", flag_values=fv)
    flags.DEFINE_list("variants", list(VARIANTS), "Variants to check: " + ", ".join(VARIANTS), flag_values=fv)
    flags.register_validator("variants", lambda names: set(names) <= set(VARIANTS),
                             "--variants takes names from: " + ", ".join(VARIANTS), flag_values=fv)
    flags.DEFINE_enum("mixed_precision", "bfloat16", distribution.MIXED_PRECISION, "Mixed precision.", flag_values=fv)
    flags.DEFINE_integer("steps", 5, "Timed training steps per variant (after the compiling one).", flag_values=fv)
    for field in dataclasses.fields(Size):
        flags.DEFINE_integer(field.name, field.default, f"Model/batch size: {field.name}.", flag_values=fv)
    flags.DEFINE_bool("keep_checkpoints", False, "Keep the checkpoints even when every variant passes.", flag_values=fv)


def run_from_flags(f):
    """The whole check from define_flags()' flags; returns the VariantResults."""
    if not f.output_dir:
        raise tpu.TpuSetupError("--output_dir is required (on a TPU node, a gs:// folder)")
    strategy = distribution.strategy_from_options(cli.options(RunOptions, f))  # TPU checks, bounded
    size = Size(**{field.name: getattr(f, field.name) for field in dataclasses.fields(Size)})
    return smoke_check.run(strategy, f.output_dir, f.variants, size, f.steps, f.mixed_precision, f.keep_checkpoints)


def run(f):
    """The check from the parsed flags `f`; returns 1 when a variant failed."""
    results = run_from_flags(f)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"error: the smoke check failed for {', '.join(failed)} (tracebacks above)", file=sys.stderr)
        return 1
    return 0


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run)
