"""Pretrains a BERT / RealFormer / NormFormer (or ETC) model: masked LM + next sentence.

A thin wrapper: the program is realformer_tf/app/run_pretraining.py (installed as a console
script too, see pyproject.toml); `python run_pretraining.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("run_pretraining")
