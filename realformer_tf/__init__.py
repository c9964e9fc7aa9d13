"""realformer_tf: RealFormer (residual attention) and NormFormer BERT models for TF/Keras 3."""

import os

# Keras 3 with the TensorFlow backend is the only supported stack.
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"
