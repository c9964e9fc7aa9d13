"""`keras.layers.Dropout` that runs as one fused op in training on CPU.

Everywhere else it is Keras' Dropout, unchanged (same config, same seed generator and
state variable, same name). With its `fused_kernels` option on (the default), with
TensorFlow on CPU in float32 and no XLA, it draws its mask with the
`RealformerDropout` op: one pass forward, one pass backward and no stored
mask, where TensorFlow's dropout takes four passes and keeps the mask (about 7% of a
BERT-Base training step on 2 CPU cores, benchmarks/profile_encoder.py). The masks come
from a different generator than TensorFlow's Philox, with the same keep probability
`1 - rate` and the same scale `1 / (1 - rate)`; each call draws a fresh seed from the
layer's `SeedGenerator`, as Keras does.

    import numpy as np
    import tensorflow as tf
    from realformer_tf import kernels
    from realformer_tf.layers.dropout import Dropout

    layer = Dropout(0.1, seed=3)
    x = tf.ones((4, 7, 24))
    y = tf.function(lambda x: layer(x, training=True))(x)
    print(float(tf.reduce_mean(tf.cast(y == 0, tf.float32))))  # about 0.1
"""

import keras

from realformer_tf import kernels


@keras.saving.register_keras_serializable(package="realformer_tf")
class Dropout(keras.layers.Dropout):
    """Keras' Dropout; one fused op in training on CPU.

    Args:
        rate: float in [0, 1], the fraction of inputs set to zero in training.
        noise_shape: as in `keras.layers.Dropout`; a layer with one uses Keras' op.
        seed: int or None, seeds the layer's `SeedGenerator`.
        fused_kernels: bool, draw the mask with the library's fused op where it
            applies (TensorFlow on CPU, float32, outside XLA). Default True.
        **kwargs: standard layer arguments (`name`, `dtype`, ...).
    """

    def __init__(self, rate, noise_shape=None, seed=None, fused_kernels=True, **kwargs):
        super().__init__(rate, noise_shape=noise_shape, seed=seed, **kwargs)
        self.fused_kernels = bool(fused_kernels)

    def get_config(self):
        return dict(super().get_config(), fused_kernels=self.fused_kernels)

    def call(self, inputs, training=False):
        fused = self._fused_ops(inputs, training)
        if fused is None:
            return super().call(inputs, training=training)
        return fused.realformer_dropout(inputs, self.seed_generator.next(), rate=self.rate)

    def _fused_ops(self, inputs, training):
        if not training or self.noise_shape is not None or not 0 < self.rate < 1:
            return None
        return kernels.ops_for(inputs, self.fused_kernels)
