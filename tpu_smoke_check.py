"""The first thing to run on a new TPU: every model variant, small, compiled and
trained for a few steps in bfloat16, with a checkpoint written and restored under
--output_dir; prints a one-screen report (see the README's TPU section).

  python tpu_smoke_check.py --tpu=local --output_dir=gs://my-bucket/smoke   # TPU VM
  python tpu_smoke_check.py --tpu=my-tpu --output_dir=gs://my-bucket/smoke  # TPU node
  python tpu_smoke_check.py --output_dir=/tmp/smoke                          # CPU / GPU
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is imported

from absl import app, flags

from realformer_tf import cli, smoke_check

smoke_check.define_flags()


def main(argv):
    del argv
    results = smoke_check.run_from_flags(flags.FLAGS)
    failed = [r.name for r in results if not r.ok]
    if failed:
        print(f"error: the smoke check failed for {', '.join(failed)} (tracebacks above)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(cli.run(main))
