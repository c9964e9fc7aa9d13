"""Trains and evaluates a translation model (encoder-decoder; Admin; residual attention).

A thin wrapper: the program is realformer_tf/app/run_translation.py (installed as a console
script too, see pyproject.toml); `python run_translation.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("run_translation")
