"""BERT's optimizer recipe with Keras 3 optimizers.

Original BERT (optimization.py): Adam with decoupled weight decay 0.01, excluding
LayerNorm and bias; beta1 0.9, beta2 0.999, eps 1e-6; linear warmup to the peak
learning rate, then polynomial (power 1) decay to 0 at `num_train_steps`, where the decay
is computed from step 0 (not from the end of warmup); gradients clipped to global norm
1.0 (clipping is done by the training loop, after the cross-replica sum).
"""

import keras
from keras import ops

OPTIMIZERS = ("adamw", "lamb")

# Keras 3 searches these in the variable's name: "gamma" / "output_bias" on JAX and
# PyTorch, but the TensorFlow variable's "layer_norm/gamma:0" on TensorFlow, where Keras
# hands the optimizer the tf.Variable. LayerNorm's gamma and beta must match both.
NO_WEIGHT_DECAY = [r"(^|/)gamma(:\d+)?$", r"(^|/)beta(:\d+)?$", "bias", "head_scale", "residual_scale"]


@keras.saving.register_keras_serializable(package="realformer_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """`peak * step / warmup` for step < warmup, else `peak * (1 - step / total)`."""

    def __init__(self, peak_learning_rate, num_train_steps, num_warmup_steps, end_learning_rate=0.0):
        self.peak_learning_rate = float(peak_learning_rate)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.end_learning_rate = float(end_learning_rate)
        self._decay = keras.optimizers.schedules.PolynomialDecay(
            self.peak_learning_rate, max(self.num_train_steps, 1), self.end_learning_rate, power=1.0
        )

    def __call__(self, step):
        step = ops.cast(step, "float32")
        decayed = ops.cast(self._decay(step), "float32")
        if self.num_warmup_steps <= 0:
            return decayed
        warmup = self.peak_learning_rate * step / float(self.num_warmup_steps)
        return ops.where(step < self.num_warmup_steps, warmup, decayed)

    def get_config(self):
        return dict(
            peak_learning_rate=self.peak_learning_rate,
            num_train_steps=self.num_train_steps,
            num_warmup_steps=self.num_warmup_steps,
            end_learning_rate=self.end_learning_rate,
        )


@keras.saving.register_keras_serializable(package="realformer_tf")
class AdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose Adam step runs, on the TensorFlow backend, as
    TensorFlow's fused `ResourceApplyAdam` kernel: one pass over each variable and its two
    slots instead of Keras' ten separate ops, each a pass of its own. Same formula (Keras'
    bias-corrected step size and epsilon outside the square root), same variables and
    checkpoints. The decoupled weight decay, w -= w * weight_decay * lr, is one
    `ResourceApplyGradientDescent` kernel per variable instead of three ops. Other
    backends, and `amsgrad`, run Keras' update.

    Args: as `keras.optimizers.AdamW`.

    Example:

        optimizer = AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
        optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    """

    def _fused(self):
        return keras.backend.backend() == "tensorflow" and not self.amsgrad

    def _apply_weight_decay(self, variables):
        if not self._fused():
            super()._apply_weight_decay(variables)
        # Else update_step decays each variable (one kernel instead of Keras' three ops).

    def update_step(self, gradient, variable, learning_rate):
        if not self._fused():
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        if self.weight_decay and self._use_weight_decay(variable):
            # Keras' decoupled decay, w -= w * weight_decay * lr, before the Adam step
            # with the same lr, as keras.optimizers.AdamW orders them.
            tf.raw_ops.ResourceApplyGradientDescent(
                var=_resource(variable), alpha=lr * ops.cast(self.weight_decay, dtype),
                delta=tf.convert_to_tensor(variable))
        step = ops.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_resource(variable), m=_resource(self._momentums[index]),
            v=_resource(self._velocities[index]),
            beta1_power=ops.power(ops.cast(self.beta_1, dtype), step),
            beta2_power=ops.power(ops.cast(self.beta_2, dtype), step),
            lr=lr, beta1=ops.cast(self.beta_1, dtype), beta2=ops.cast(self.beta_2, dtype),
            epsilon=ops.cast(self.epsilon, dtype),
            grad=tf.convert_to_tensor(ops.cast(gradient, dtype)))  # sparse: densified, as Keras'


def _resource(variable):
    """The TensorFlow resource handle of a Keras or tf.Variable (under a distribution
    strategy's update, the current device's copy)."""
    return (variable.value if isinstance(variable, keras.Variable) else variable).handle


def create_optimizer(
    name,
    learning_rate,
    num_train_steps,
    num_warmup_steps,
    weight_decay=0.01,
    float16_loss_scaling=False,
):
    """Returns BERT's AdamW (or LAMB) with the warmup + linear-decay schedule."""
    schedule = WarmupPolynomialDecay(learning_rate, num_train_steps, num_warmup_steps)
    if name == "adamw":
        optimizer = AdamW(
            learning_rate=schedule, weight_decay=weight_decay,
            beta_1=0.9, beta_2=0.999, epsilon=1e-6,
        )
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(
            learning_rate=schedule, weight_decay=weight_decay,
            beta_1=0.9, beta_2=0.999, epsilon=1e-6,
        )
    else:
        raise ValueError(f"--optimizer={name!r}; use one of {', '.join(OPTIMIZERS)}")
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    if float16_loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
