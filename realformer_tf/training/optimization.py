"""BERT's optimizer recipe with Keras 3 optimizers.

Original BERT (optimization.py): Adam with decoupled weight decay 0.01, excluding
LayerNorm and bias; beta1 0.9, beta2 0.999, eps 1e-6; linear warmup to the peak
learning rate, then polynomial (power 1) decay to 0 at `num_train_steps`, where the decay
is computed from step 0 (not from the end of warmup); gradients clipped to global norm
1.0 (clipping is done by the training loop, after the cross-replica sum).
"""

import keras
from keras import ops

from realformer_tf import kernels
from realformer_tf.errors import UsageError

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
class InverseSqrtSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """fairseq's `--lr-scheduler inverse_sqrt` (the Transformer's schedule): `peak * step
    / warmup` up to `warmup`, then `peak * sqrt(warmup / step)`."""

    def __init__(self, peak_learning_rate, num_warmup_steps):
        self.peak_learning_rate = float(peak_learning_rate)
        self.num_warmup_steps = max(int(num_warmup_steps), 1)

    def __call__(self, step):
        step = ops.maximum(ops.cast(step, "float32"), 1.0)
        warmup = float(self.num_warmup_steps)
        return self.peak_learning_rate * ops.minimum(step / warmup, ops.sqrt(warmup / step))

    def get_config(self):
        return dict(peak_learning_rate=self.peak_learning_rate, num_warmup_steps=self.num_warmup_steps)


@keras.saving.register_keras_serializable(package="realformer_tf")
class AdamW(keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose update of a variable is one kernel on TensorFlow.

    Keras runs an AdamW step as about a dozen separate ops per variable, each a pass
    over memory. Here, on the TensorFlow backend:

    - with `fused_kernels` (default True), on CPU, float32, no XLA: the library's `RealformerApplyAdamW`, one pass over the
      variable, its two slots and the gradient that also applies the decay and the
      training loop's gradient scale (`apply(..., gradient_scale=...)`);
    - elsewhere: TensorFlow's `ResourceApplyAdam`, after one
      `ResourceApplyGradientDescent` for the decay.

    Same formula as Keras (its bias-corrected step size, epsilon outside the square
    root, the decay w -= w * weight_decay * lr before the Adam step), same variables
    and checkpoints. Other backends, and `amsgrad`, run Keras' update.

    Args: as `keras.optimizers.AdamW`, plus `fused_kernels` (bool, default True: the
    fused update where it applies; `realformer_tf.kernels`).

    Example:

        optimizer = AdamW(learning_rate=1e-4, weight_decay=0.01, epsilon=1e-6)
        optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
        # The update uses gradient * 0.5:
        optimizer.apply_gradients(zip(grads, model.trainable_variables), gradient_scale=0.5)
    """

    # The scale of the `apply` call in progress: Keras' apply -> update_step chain has no
    # argument for it, so `apply` holds it here for exactly the length of its call.
    _scale_of_this_apply = None

    def __init__(self, *args, fused_kernels=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.fused_kernels = bool(fused_kernels)

    def get_config(self):
        return dict(super().get_config(), fused_kernels=self.fused_kernels)

    def apply(self, grads, trainable_variables=None, gradient_scale=None):
        """`keras.optimizers.AdamW.apply`, with the update using `gradient *
        gradient_scale` (a float or scalar tensor; None: 1): the training loop's
        clipping factor, folded into the fused kernel's pass where it runs."""
        if gradient_scale is None:
            return super().apply(grads, trainable_variables)
        if self._scale_of_this_apply is not None:
            raise RuntimeError("AdamW.apply with a gradient_scale called inside another one")
        self._scale_of_this_apply = gradient_scale
        try:
            return super().apply(grads, trainable_variables)
        finally:
            self._scale_of_this_apply = None

    def apply_gradients(self, grads_and_vars, gradient_scale=None):
        """`keras.optimizers.AdamW.apply_gradients` with `gradient_scale` as in `apply`."""
        grads, trainable_variables = zip(*grads_and_vars)
        self.apply(grads, trainable_variables, gradient_scale=gradient_scale)
        return self._iterations

    def _tensorflow_update(self):
        return keras.backend.backend() == "tensorflow" and not self.amsgrad

    def _apply_weight_decay(self, variables):
        if not self._tensorflow_update():
            super()._apply_weight_decay(variables)
        # Else update_step decays each variable in its own kernels.

    def update_step(self, gradient, variable, learning_rate):
        scale = self._scale_of_this_apply
        if not self._tensorflow_update():
            if scale is not None:
                gradient = ops.multiply(ops.convert_to_tensor(gradient), ops.cast(scale, gradient.dtype))
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        dtype = variable.dtype
        lr = ops.cast(learning_rate, dtype)
        step = ops.cast(self.iterations + 1, dtype)
        index = self._get_variable_index(variable)
        var, m, v = (_resource(x) for x in (variable, self._momentums[index], self._velocities[index]))
        decay = lr * ops.cast(self.weight_decay, dtype) if self._decays(variable) else None
        hyper = dict(lr=lr, beta1=ops.cast(self.beta_1, dtype), beta2=ops.cast(self.beta_2, dtype),
                     epsilon=ops.cast(self.epsilon, dtype), beta1_power=ops.power(ops.cast(self.beta_1, dtype), step),
                     beta2_power=ops.power(ops.cast(self.beta_2, dtype), step))
        grad = tf.convert_to_tensor(ops.cast(gradient, dtype))  # sparse: densified, as Keras'
        fused = kernels.ops_for(variable, self.fused_kernels)
        if fused is not None:
            return fused.realformer_apply_adam_w(
                var=var, m=m, v=v, grad=grad, grad_scale=ops.cast(1.0 if scale is None else scale, dtype),
                decay=ops.cast(0.0, dtype) if decay is None else decay, **hyper)
        if scale is not None:
            grad = grad * ops.cast(scale, dtype)
        if decay is not None:  # Keras' order: decay, then the Adam step with the same lr
            tf.raw_ops.ResourceApplyGradientDescent(var=var, alpha=decay, delta=tf.convert_to_tensor(variable))
        tf.raw_ops.ResourceApplyAdam(var=var, m=m, v=v, grad=grad, **hyper)

    def _decays(self, variable):
        return bool(self.weight_decay) and self._use_weight_decay(variable)


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
    schedule="linear",
    beta_2=0.999,
    epsilon=1e-6,
):
    """Returns BERT's AdamW (or LAMB) with the warmup + linear-decay schedule; the
    translation job's `schedule="inverse_sqrt"`, `beta_2=0.98`, `epsilon=1e-8` make it
    fairseq's Transformer recipe."""
    if schedule == "linear":
        schedule = WarmupPolynomialDecay(learning_rate, num_train_steps, num_warmup_steps)
    elif schedule == "inverse_sqrt":
        schedule = InverseSqrtSchedule(learning_rate, num_warmup_steps)
    else:
        raise UsageError(f"schedule={schedule!r} is not one of linear, inverse_sqrt")
    adam = dict(learning_rate=schedule, weight_decay=weight_decay, beta_1=0.9, beta_2=beta_2, epsilon=epsilon)
    if name == "adamw":
        optimizer = AdamW(**adam)
    elif name == "lamb":
        optimizer = keras.optimizers.Lamb(**adam)
    else:
        raise UsageError(f"optimizer={name!r} is not one of {', '.join(OPTIMIZERS)}")
    optimizer.exclude_from_weight_decay(var_names=NO_WEIGHT_DECAY)
    if float16_loss_scaling:
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
