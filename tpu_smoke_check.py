"""The first thing to run on a new TPU: every model variant, small, compiled and trained.

A thin wrapper: the program is realformer_tf/app/tpu_smoke_check.py (installed as a console
script too, see pyproject.toml); `python tpu_smoke_check.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("tpu_smoke_check")
