"""Generates text with a causal language model (run_pretraining.py --model_type=causal_lm).

A thin wrapper: the program is realformer_tf/app/generate.py (installed as a console
script too, see pyproject.toml); `python generate.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("generate")
