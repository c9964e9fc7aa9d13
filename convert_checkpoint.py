"""Converts between the checkpoint formats the models read (training checkpoints,
original-named BERT checkpoints, Hugging Face BERT folders).

A thin wrapper: the program is realformer_tf/app/convert_checkpoint.py (installed as a console
script too, see pyproject.toml); `python convert_checkpoint.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("convert_checkpoint")
