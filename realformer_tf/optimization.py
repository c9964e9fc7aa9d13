"""The public optimizer API (`create_optimizer`, `AdamW`, `WarmupPolynomialDecay`), named
as google-research/bert's `optimization.py`; it lives in `realformer_tf.training.optimization`.
This module only re-exports."""

from realformer_tf.training.optimization import (  # noqa: F401
    NO_WEIGHT_DECAY, AdamW, WarmupPolynomialDecay, create_optimizer,
)
