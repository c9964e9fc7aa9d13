"""A GPT-style causal language model with residual attention and NormFormer: config and Keras model."""
