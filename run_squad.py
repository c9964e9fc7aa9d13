"""Fine-tunes a BERT / RealFormer / NormFormer model on SQuAD v1.1 or v2.0.

A thin wrapper: the program is realformer_tf/app/run_squad.py (installed as a console
script too, see pyproject.toml); `python run_squad.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("run_squad")
