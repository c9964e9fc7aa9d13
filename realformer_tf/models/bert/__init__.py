"""BERT / RealFormer / NormFormer: config, Keras models, and the original modeling.py API."""
