"""Fine-tunes a BERT / RealFormer / NormFormer model on GLUE or XNLI.

A thin wrapper: the program is realformer_tf/app/run_classifier.py (installed as a console
script too, see pyproject.toml); `python run_classifier.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("run_classifier")
