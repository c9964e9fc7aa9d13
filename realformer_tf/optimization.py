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

# Keras 3 matches these against the variable's own name (e.g. "gamma", "output_bias").
NO_WEIGHT_DECAY = ["^gamma$", "^beta$", "bias", "head_scale", "residual_scale"]


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
        optimizer = keras.optimizers.AdamW(
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
