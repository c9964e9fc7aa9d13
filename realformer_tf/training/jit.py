"""The XLA policy: which parts of a training step compile with XLA where."""

import tensorflow as tf

JIT_COMPILE_CHOICES = ("auto", "true", "false")


def resolve_jit_compile(jit_compile, strategy=None):
    """Which parts of a step compile with XLA: returns `(steps, update)`, whether the
    per-replica forward+backward and eval steps do, and whether the optimizer update
    (unscale, clip, apply) does.

    `jit_compile` is a bool or one of `JIT_COMPILE_CHOICES`. `"true"`: both; the update
    only where one replica runs (a multi-replica update goes through the strategy's
    cross-replica merge, which XLA cannot hold). `"false"`: neither. `"auto"`: TPUs
    compile everything (TPUStrategy does anyway) and so do GPUs (XLA fuses the
    elementwise ops around the matmuls); CPUs compile nothing: XLA's CPU matmuls are
    slower than TensorFlow's oneDNN kernels, and an XLA update cannot use the fused
    AdamW kernel (benchmarks/benchmark_jit.py, the BERT pretraining Trainer step on a
    2-core CPU: everything compiled 1.2-2.1x the time of no XLA, the update alone
    0.96-1.07x; README, "Performance").
    """
    one_replica = strategy is None or strategy.num_replicas_in_sync == 1
    if not isinstance(jit_compile, str):
        return bool(jit_compile), bool(jit_compile) and one_replica
    value = jit_compile.strip().lower()
    if value not in JIT_COMPILE_CHOICES:
        raise ValueError(f"jit_compile={jit_compile!r}; use one of {', '.join(JIT_COMPILE_CHOICES)}")
    if value == "auto":
        accelerator = isinstance(strategy, tf.distribute.TPUStrategy) or bool(
            tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
        return accelerator, accelerator and one_replica
    return value == "true", value == "true" and one_replica
