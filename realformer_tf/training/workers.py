"""Multi-worker roles: which worker writes outputs (the chief) and where the others
write theirs."""

import os

import tensorflow as tf


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
