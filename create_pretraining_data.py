"""Creates pretraining TFRecords from raw text, with the original BERT flags.

A thin wrapper: the program is realformer_tf/app/create_pretraining_data.py (installed as a console
script too, see pyproject.toml); `python create_pretraining_data.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("create_pretraining_data")
