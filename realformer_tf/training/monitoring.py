"""Per-loop actions of the training loop (orbit train_actions): the stop on a
non-finite loss and the progress line."""

import math
import time

import numpy as np

from realformer_tf.errors import NonFiniteLossError


class NonFiniteCheck:
    """Stops training on a NaN/Inf loss, before that state is checkpointed."""

    def __init__(self, trainer):
        self.trainer = trainer

    def __call__(self, output):
        loss = output.get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            step = int(self.trainer.global_step.numpy())
            last = self.trainer.checkpoint_manager.latest_checkpoint or "none (no checkpoint yet)"
            raise NonFiniteLossError(
                f"loss became {loss} in the steps ending at global step {step}; training "
                f"stopped. Last good checkpoint: {last}. Lower the learning rate or use "
                "float32, then rerun (it resumes from that checkpoint)."
            )


class ProgressAction:
    """Prints one progress line per loop: step, steps/s, examples/s, ETA, loss."""

    def __init__(self, trainer, total_steps, global_batch_size, log_fn):
        self.trainer = trainer
        self.total_steps = total_steps
        self.global_batch_size = global_batch_size
        self.log_fn = log_fn
        self.last_time = time.time()
        self.last_step = int(trainer.global_step.numpy())

    def __call__(self, output):
        now, step = time.time(), int(self.trainer.global_step.numpy())
        rate = (step - self.last_step) / max(now - self.last_time, 1e-9)
        self.last_time, self.last_step = now, step
        eta = (self.total_steps - step) / rate if rate > 0 else float("inf")
        examples = f" | {rate * self.global_batch_size:.1f} examples/s" if self.global_batch_size else ""
        metrics = " | ".join(
            f"{k} {v:.4g}" for k, v in sorted(output.items()) if isinstance(v, (int, float, np.floating))
        )
        self.log_fn(
            f"step {step}/{self.total_steps} ({100.0 * step / max(self.total_steps, 1):.0f}%)"
            f" | {rate:.2f} steps/s{examples} | ETA {_format_seconds(eta)} | {metrics}"
        )


def _format_seconds(seconds):
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
