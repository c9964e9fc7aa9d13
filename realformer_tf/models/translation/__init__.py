"""An encoder-decoder Transformer for translation (post-LN, Admin, residual attention on three paths): config and Keras model."""
