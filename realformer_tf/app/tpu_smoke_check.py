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


def define_flags():
    """tpu_smoke_check.py's flags: the run scripts' TPU flags plus the check's size."""
    flags.DEFINE_string("tpu", None, "local on a TPU VM; else the TPU's name or grpc://IP:8470 address.")
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU (for a TPU name).")
    flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU (for a TPU name).")
    flags.DEFINE_integer("tpu_timeout_s", tpu.DEFAULT_TIMEOUT_S, "Seconds to find and start the TPU.")
    flags.DEFINE_enum("distribution_strategy", "auto", distribution.STRATEGIES,
                      "auto: tpu when --tpu is given, else as the run scripts decide.")
    flags.DEFINE_string("output_dir", None, "Where the checkpoints go (gs://... for a TPU node); "
                        "a smoke_check-<time> folder inside it, removed when every variant passes.")
    flags.DEFINE_list("variants", list(VARIANTS), "Variants to check: " + ", ".join(VARIANTS))
    flags.register_validator("variants", lambda names: set(names) <= set(VARIANTS),
                             "--variants takes names from: " + ", ".join(VARIANTS))
    flags.DEFINE_enum("mixed_precision", "bfloat16", distribution.MIXED_PRECISION, "Mixed precision.")
    flags.DEFINE_integer("steps", 5, "Timed training steps per variant (after the compiling one).")
    for field in dataclasses.fields(Size):
        flags.DEFINE_integer(field.name, field.default, f"Model/batch size: {field.name}.")
    flags.DEFINE_bool("keep_checkpoints", False, "Keep the checkpoints even when every variant passes.")


def run_from_flags(f):
    """The whole check from define_flags()' flags; returns the VariantResults."""
    if not f.output_dir:
        raise tpu.TpuSetupError("--output_dir is required (on a TPU node, a gs:// folder)")
    strategy = distribution.strategy_from_options(cli.options(RunOptions))  # TPU checks, bounded
    size = Size(**{field.name: getattr(f, field.name) for field in dataclasses.fields(Size)})
    return smoke_check.run(strategy, f.output_dir, f.variants, size, f.steps, f.mixed_precision, f.keep_checkpoints)


define_flags()


def _main(argv):
    del argv
    results = run_from_flags(flags.FLAGS)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"error: the smoke check failed for {', '.join(failed)} (tracebacks above)", file=sys.stderr)
        sys.exit(1)


def main():
    """Console-script entry point (see realformer_tf_launch)."""
    app.run_main(_main, __doc__, required_flags=[])
