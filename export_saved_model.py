"""Exports a fine-tuned BERT / RealFormer / NormFormer model as a SavedModel for serving.

A thin wrapper: the program is realformer_tf/app/export_saved_model.py (installed as a console
script too, see pyproject.toml); `python export_saved_model.py --helpfull` lists its flags."""

import realformer_tf_launch

if __name__ == "__main__":
    realformer_tf_launch.run("export_saved_model")
