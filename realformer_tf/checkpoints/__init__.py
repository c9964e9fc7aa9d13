"""Checkpoint formats beside the models: TF1 name-based I/O, the original BERT and official ETC names, Hugging Face folders, and what a checkpoint says about its variant."""
