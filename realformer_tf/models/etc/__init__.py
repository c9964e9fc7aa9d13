"""ETC (global-local attention) with residual attention: config, Keras models, input features."""
