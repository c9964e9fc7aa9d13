"""tf.distribute strategy and mixed-precision set-up from the scripts' flags, the XLA
policy (which parts of a step compile where), and the workers' roles (which one writes
outputs)."""

import contextlib
import json
import os
import random

import keras
import numpy as np
import tensorflow as tf

from realformer_tf.errors import UsageError, require_tensorflow_backend
from realformer_tf.training import tpu as tpu_lib

STRATEGIES = ("auto", "default", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
MIXED_PRECISION = ("none", "float32", "bfloat16", "float16")


def resolve_strategy_name(distribution_strategy, tpu):
    """`auto` picks tpu when a TPU is named, multi-worker when TF_CONFIG lists several
    workers, mirrored with several GPUs, else the default strategy."""
    if distribution_strategy not in STRATEGIES:
        raise UsageError(
            f"distribution_strategy={distribution_strategy!r} is not one of {', '.join(STRATEGIES)}"
        )
    if distribution_strategy != "auto":
        return distribution_strategy
    if tpu:
        return "tpu"
    cluster = json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {})
    if len(cluster.get("worker", [])) + len(cluster.get("chief", [])) > 1:
        return "multi_worker_mirrored"
    if len(tf.config.list_physical_devices("GPU")) > 1:
        return "mirrored"
    return "default"


def strategy_from_options(options):
    """The strategy the options ask for (distribution_strategy, use_tpu, tpu / tpu_name /
    master, tpu_zone, gcp_project, tpu_timeout_s: `runner.RunOptions` fields, named after
    the flags), after the offline TPU checks; raises tpu.TpuSetupError for a TPU that
    cannot work."""
    f = options
    strategy_name = f.distribution_strategy
    if getattr(f, "use_tpu", False) and strategy_name == "auto":
        strategy_name = "tpu"
    tpu_lib.check_flags(f, strategy_name)
    flag_name, tpu = tpu_lib.tpu_flag(f)
    timeout_s = getattr(f, "tpu_timeout_s", None) or tpu_lib.DEFAULT_TIMEOUT_S
    return get_strategy(strategy_name, tpu=tpu, tpu_zone=getattr(f, "tpu_zone", None),
                        gcp_project=getattr(f, "gcp_project", None),
                        tpu_timeout_s=timeout_s, tpu_flag_name=flag_name)


def get_strategy(distribution_strategy="auto", tpu=None, tpu_zone=None, gcp_project=None,
                 tpu_timeout_s=tpu_lib.DEFAULT_TIMEOUT_S, tpu_flag_name="tpu"):
    """Builds the strategy. TPUs are found with TPUClusterResolver, as the original
    scripts' --tpu_name/--tpu_zone/--gcp_project did, within `tpu_timeout_s` seconds
    (see realformer_tf.training.tpu)."""
    require_tensorflow_backend("tf.distribute training")
    name = resolve_strategy_name(distribution_strategy, tpu)
    if name == "tpu":
        resolver = tpu_lib.connect(tpu or "local", tpu_zone, gcp_project, tpu_timeout_s, tpu_flag_name)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    if name == "one_device":
        device = "/gpu:0" if tf.config.list_physical_devices("GPU") else "/cpu:0"
        return tf.distribute.OneDeviceStrategy(device)
    return tf.distribute.get_strategy()


@contextlib.contextmanager
def run_settings(seed, mixed_precision):
    """The global settings of one run, restored when it ends: Keras's dtype policy for
    `mixed_precision`, and Python's, NumPy's, TensorFlow's and Keras's seeds from `seed`
    (left as they are for None). Yields whether float16 loss scaling is needed.

    Keras reads the policy and the seeds from process-wide state when layers and
    weights are made, so a run sets them; restoring them afterwards lets a process run
    several jobs, or a job and then its own code, without inheriting the job's settings.
    """
    from keras.src.backend.common import global_state  # the seed Keras keeps (no public getter/setter)
    from tensorflow.python.eager import context as eager_context  # the seed tf.random.set_seed set

    policy = keras.mixed_precision.global_policy()
    python_state, numpy_state = random.getstate(), np.random.get_state()
    tf_seed = eager_context.global_seed()
    keras_seed = {name: global_state.get_global_attribute(name) for name in _KERAS_SEED_STATE}
    try:
        if seed is not None:
            keras.utils.set_random_seed(seed)
        yield set_mixed_precision(mixed_precision)
    finally:
        keras.mixed_precision.set_global_policy(policy)
        if seed is not None:
            random.setstate(python_state)
            np.random.set_state(numpy_state)
            tf.random.set_seed(tf_seed)
            for name, value in keras_seed.items():
                global_state.set_global_attribute(name, value)


# Keras's global seed and the SeedGenerator made from it (keras.utils.set_random_seed).
_KERAS_SEED_STATE = ("global_random_seed", "global_seed_generator")


def set_mixed_precision(mixed_precision):
    """Sets the global Keras dtype policy; returns whether float16 loss scaling is needed.
    Jobs call it through `run_settings`, which restores the previous policy."""
    if mixed_precision not in MIXED_PRECISION:
        raise UsageError(
            f"mixed_precision={mixed_precision!r} is not one of {', '.join(MIXED_PRECISION)}"
        )
    policy = {"bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}.get(mixed_precision, "float32")
    keras.mixed_precision.set_global_policy(policy)
    return mixed_precision == "float16"


def per_replica_batch_size(global_batch_size, strategy, name):
    """`global_batch_size` over the strategy's replicas; `name`: what the caller calls
    the batch size (a program names its flag)."""
    replicas = strategy.num_replicas_in_sync
    if global_batch_size % replicas:
        raise UsageError(
            f"{name}={global_batch_size} is not divisible by the {replicas} replicas "
            f"of the distribution strategy; use a multiple of {replicas}"
        )
    return global_batch_size // replicas


# -- the XLA policy: which parts of a training step compile with XLA where ------------
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
        raise UsageError(f"jit_compile={jit_compile!r} is not one of {', '.join(JIT_COMPILE_CHOICES)}")
    if value == "auto":
        accelerator = isinstance(strategy, tf.distribute.TPUStrategy) or bool(
            tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))
        return accelerator, accelerator and one_replica
    return value == "true", value == "true" and one_replica


def distribute_dataset(strategy, dataset_fn):
    """`strategy.distribute_datasets_from_function(dataset_fn)`, without the copy to
    the devices when every replica is a CPU.

    By default the batches of several local replicas go through a
    `MultiDeviceIterator` that prefetches them onto each device. When the devices are
    CPUs (MirroredStrategy over logical CPUs, or CPU workers) there is nothing to copy
    to, and that iterator only adds background threads; deleting it was seen waiting
    tens of seconds, idle, on one of tf.data's threads when a finished run's iterator
    was garbage-collected. GPUs and TPUs keep the prefetch to the device."""
    options = None
    if strategy.num_replicas_in_sync > 1:  # (the default strategy has no device list)
        devices = strategy.extended.worker_devices
        if all(tf.DeviceSpec.from_string(d).device_type == "CPU" for d in devices):
            options = tf.distribute.InputOptions(experimental_fetch_to_device=False)
    return strategy.distribute_datasets_from_function(dataset_fn, options=options)


# -- multi-worker roles: which worker writes outputs (the chief), where the others do -
def is_chief(strategy):
    """The worker that writes outputs: the only one, the `chief`, or worker 0 of a
    cluster without a chief."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    return task_type == "worker" and task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()


def worker_scratch_dir(output_dir, strategy):
    """Where a non-chief worker writes what the chief writes to output_dir."""
    resolver = strategy.cluster_resolver
    return os.path.join(output_dir, f"tmp_{resolver.task_type}_{resolver.task_id}")


def worker_checkpoint_dir(model_dir, strategy):
    """A non-chief worker's scratch checkpoint folder, emptied at start so that orbit's
    Controller never restores a stale one."""
    path = os.path.join(worker_scratch_dir(model_dir, strategy), "checkpoints")
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
    return path
