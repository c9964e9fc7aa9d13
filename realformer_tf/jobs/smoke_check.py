"""The first thing to run on a new TPU (tpu_smoke_check.py): for every model variant,
at a small size, the package's own Trainer compiles the train step on the strategy's
devices, runs a few steps in bfloat16 on synthetic pretraining batches, and writes and
restores a checkpoint under --output_dir; one screen reports devices, compile time,
steps/s, loss and the checkpoint round trip.

On a TPU the step is compiled by XLA as every TPU step is; on a single CPU or GPU it is
compiled with `jit_compile=True` (XLA), so the same check runs anywhere.
"""

import dataclasses
import functools
import os
import sys
import time
import traceback

import keras
import numpy as np
import tensorflow as tf

from realformer_tf.errors import UsageError
from realformer_tf.training import distribution
from realformer_tf.models.etc import model as etc_modeling
from realformer_tf.training import optimization
from realformer_tf.models import variants as variants_lib
from realformer_tf.families import get_family
from realformer_tf.jobs.runner import RunOptions
from realformer_tf.jobs.tasks.pretraining import PretrainingTask
from realformer_tf.training.trainer import Trainer

# What the check builds: every named variant (realformer_tf.models.variants) as a BertConfig,
# and "etc": an EtcConfig with ETC's defaults and the "realformer" variant applied.
ETC = "etc"
VARIANTS = (*variants_lib.VARIANTS, ETC)
NAME_WIDTH = max(map(len, VARIANTS)) + 1  # the report's first column


@dataclasses.dataclass
class Size:
    """The smoke check's model and batch size (small: compile time dominates)."""

    hidden_size: int = 128
    num_layers: int = 2
    num_heads: int = 2
    seq_length: int = 128
    max_predictions: int = 20
    batch_size: int = 8  # per replica
    vocab_size: int = 512
    etc_tokens_per_global: int = 16


def variant_config(name, size):
    """The BertConfig (EtcConfig for "etc") of a variant at `size`, dropout on."""
    common = dict(vocab_size=size.vocab_size, hidden_size=size.hidden_size, num_hidden_layers=size.num_layers,
                  num_attention_heads=size.num_heads, intermediate_size=4 * size.hidden_size)
    if name == ETC:
        radius = min(16, size.seq_length // 2)
        return variants_lib.apply_variant(
            etc_modeling.EtcConfig(**common, local_radius=radius, relative_pos_max_distance=4,
                                   relative_vocab_size=12), "realformer")
    return variants_lib.variant_config(name, **common, max_position_embeddings=size.seq_length, type_vocab_size=2)


def synthetic_examples(count, size, seed=0):
    """Random, well-formed pretraining features ({name: [count, ...]} int32 / float32,
    as decoded from create_pretraining_data.py records): a padded tail, two segments,
    up to `max_predictions` masked positions."""
    rng = np.random.default_rng(seed)
    L, P = size.seq_length, size.max_predictions
    ids = rng.integers(5, size.vocab_size, size=(count, L)).astype(np.int32)
    lengths = rng.integers(L // 2, L + 1, size=count)
    mask = (np.arange(L)[None] < lengths[:, None]).astype(np.int32)
    positions = np.zeros((count, P), np.int32)
    weights = np.zeros((count, P), np.float32)
    for i, length in enumerate(lengths):
        n = min(P, int(length) - 1)
        positions[i, :n] = np.sort(rng.choice(np.arange(1, length), size=n, replace=False))
        weights[i, :n] = 1.0
    labels = np.take_along_axis(ids, positions, axis=1) * (weights > 0)
    np.put_along_axis(ids, positions, np.where(weights > 0, 4, np.take_along_axis(ids, positions, 1)), 1)
    return {
        "input_ids": ids * mask, "input_mask": mask,
        "segment_ids": (np.arange(L)[None] >= (lengths // 2)[:, None]).astype(np.int32) * mask,
        "masked_lm_positions": positions, "masked_lm_ids": labels.astype(np.int32),
        "masked_lm_weights": weights,
        "next_sentence_labels": rng.integers(0, 2, size=(count, 1)).astype(np.int32),
    }


def dataset_fn(examples, config, size):
    """`dataset_fn(input_context)` repeating `examples` in per-replica batches (static
    shapes), with ETC's global tokens added in the pipeline for an EtcConfig."""

    def fn(input_context=None, start_step=0):
        per_replica = input_context.get_per_replica_batch_size(
            size.batch_size * input_context.num_replicas_in_sync) if input_context else size.batch_size
        return tf.data.Dataset.from_tensor_slices(examples).repeat().batch(per_replica, drop_remainder=True)

    family = _family(config)
    return family.adapt_dataset_fn(fn, config, RunOptions(etc_tokens_per_global=size.etc_tokens_per_global))


def _family(config):
    return get_family("etc" if isinstance(config, etc_modeling.EtcConfig) else "bert")


def make_trainer(config, strategy, model_dir, num_steps):
    """The package's Trainer with the pretraining task of `config` and BERT's AdamW."""
    task = PretrainingTask(config, family=_family(config))
    trainer = Trainer(task, strategy, model_dir,
                      optimizer_fn=lambda: optimization.create_optimizer("adamw", 1e-4, num_steps, 1),
                      save_checkpoints_steps=num_steps, max_checkpoints_to_keep=1)
    trainer.restore_or_initialize()
    return trainer


def is_tpu_strategy(strategy):
    return isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))


def compile_mode(strategy):
    """How the replica step gets compiled: TPUs always use XLA; one CPU/GPU device
    uses jit_compile where this TensorFlow build can; several GPUs run the step as a
    plain tf.function."""
    if is_tpu_strategy(strategy):
        return "XLA (TPU)"
    if strategy.num_replicas_in_sync > 1:
        return "tf.function (no XLA)"
    if not host_xla_available():
        return "tf.function (no XLA: this TensorFlow build, e.g. tensorflow-tpu, has no XLA for this device)"
    return "XLA (jit_compile)"


@functools.lru_cache(maxsize=None)
def host_xla_available():
    """Whether `jit_compile=True` works on this machine's default device. tensorflow-tpu
    is built without XLA's CPU backend ("could not find registered transfer manager
    for platform Host"), which matters when the check runs on a TPU VM's CPU alone."""
    try:
        tf.function(lambda x: x + 1.0, jit_compile=True)(tf.constant(1.0)).numpy()
        return True
    except (tf.errors.OpError, RuntimeError):
        return False


def compiled_step(trainer, replica_fn):
    """`step(iterator) -> per-replica metric sums`: one replicated `replica_fn` call,
    compiled as compile_mode() says."""
    strategy = trainer.strategy
    if compile_mode(strategy) == "XLA (jit_compile)":
        replica_fn = tf.function(replica_fn, jit_compile=True)

    @tf.function
    def step(iterator):
        return strategy.run(replica_fn, (next(iterator),))

    return step


def mean_loss(trainer, sums):
    """The task's loss from one step's per-replica (sum, count) pairs."""
    strategy = trainer.strategy
    total = 0.0
    for term in trainer.task.loss_terms:
        value, count = (float(strategy.reduce("SUM", x, axis=None)) for x in sums[term])
        total += value / max(count, 1e-5)
    return total


@dataclasses.dataclass
class VariantResult:
    name: str
    description: str = ""
    compile_s: float = float("nan")
    steps_per_s: float = float("nan")
    first_loss: float = float("nan")
    last_loss: float = float("nan")
    checkpoint: str = ""
    error: str = ""

    @property
    def ok(self):
        return not self.error


def check_variant(name, strategy, size, steps, run_dir):
    """Builds, compiles, trains `steps` steps and round-trips a checkpoint of one variant."""
    config = variant_config(name, size)
    result = VariantResult(name, config.describe())
    model_dir = os.path.join(run_dir, name)
    trainer = make_trainer(config, strategy, model_dir, steps + 1)
    examples = synthetic_examples(2 * size.batch_size * strategy.num_replicas_in_sync, size)
    iterator = iter(distribution.distribute_dataset(strategy, dataset_fn(examples, config, size)))
    step = compiled_step(trainer, lambda batch: trainer.replica_train_step((batch,)))  # one batch per step

    start = time.perf_counter()
    result.first_loss = mean_loss(trainer, step(iterator))  # reading the loss waits for the step
    result.compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(steps):
        sums = step(iterator)
    result.last_loss = mean_loss(trainer, sums)
    result.steps_per_s = steps / (time.perf_counter() - start)
    if not (np.isfinite(result.first_loss) and np.isfinite(result.last_loss)):
        raise FloatingPointError(f"loss {result.first_loss} -> {result.last_loss} is not finite")

    result.checkpoint = round_trip_checkpoint(trainer, config, strategy, model_dir)
    return result


def round_trip_checkpoint(trainer, config, strategy, model_dir):
    """Saves a training checkpoint, restores it into a freshly built Trainer and
    compares every weight and the step; returns a short verdict."""
    path = trainer.checkpoint_manager.save(checkpoint_number=int(trainer.global_step.numpy()))
    restored = make_trainer(config, strategy, model_dir, 1)
    if restored.checkpoint_manager.latest_checkpoint != path:
        raise RuntimeError(f"saved {path} but the checkpoint index points at "
                           f"{restored.checkpoint_manager.latest_checkpoint}")
    differing = [w.path for w, v in zip(trainer.model.weights, restored.model.weights)
                 if not np.array_equal(w.numpy(), v.numpy())]
    if differing or int(restored.global_step.numpy()) != int(trainer.global_step.numpy()):
        raise RuntimeError(f"restored {path} differs in {len(differing)} weights "
                           f"({', '.join(differing[:3])}) or in the global step")
    return f"{os.path.basename(path)} restored OK"


def describe_devices(strategy):
    """E.g. `8 x TPU on /job:worker/replica:0/task:0` (device type counts per host)."""
    try:
        devices = strategy.extended.worker_devices
    except RuntimeError:  # the default strategy: TensorFlow's default placement
        devices = [(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name]
    groups = {}
    for device in devices:
        spec = tf.DeviceSpec.from_string(device)
        host = f"/job:{spec.job}/replica:{spec.replica}/task:{spec.task}" if spec.job else "this machine"
        groups.setdefault((spec.device_type, host), []).append(spec.device_index)
    return "; ".join(f"{len(ids)} x {kind} on {host}" for (kind, host), ids in groups.items())


def report_header(strategy, size, steps, mixed_precision, run_dir):
    replicas = strategy.num_replicas_in_sync
    return [
        "RealFormer TPU smoke check",
        f"devices: {describe_devices(strategy)}",
        f"strategy: {type(strategy).__name__}, {replicas} replica(s); step compiled with {compile_mode(strategy)}",
        f"size: {size.num_layers} layers, hidden {size.hidden_size}, {size.num_heads} heads, "
        f"seq {size.seq_length}, batch {size.batch_size * replicas} ({size.batch_size} per replica), "
        f"mixed precision {mixed_precision}, {steps} timed steps",
        f"checkpoints: {run_dir}",
        "",
        f"{'variant':<{NAME_WIDTH}} {'compile s':>9} {'steps/s':>8}  {'loss first -> last':<19} checkpoint",
    ]


def report_row(r):
    if not r.ok:
        return f"{r.name:<{NAME_WIDTH}} FAILED: {r.error}"
    return (f"{r.name:<{NAME_WIDTH}} {r.compile_s:>9.1f} {r.steps_per_s:>8.2f}  "
            f"{r.first_loss:>7.3f} -> {r.last_loss:<8.3f} {r.checkpoint}")


def run(strategy, output_dir, variants=VARIANTS, size=None, steps=5, mixed_precision="bfloat16",
        keep_checkpoints=False, print_fn=print):
    """Checks each variant in turn, printing the report as it goes; returns the
    VariantResults. A failing variant's traceback goes to stderr after the table.

    Args:
        strategy: the tf.distribute strategy whose devices run the steps.
        output_dir: the checkpoints go to a `smoke_check-<time>` folder inside it
            (removed when every variant passes, unless `keep_checkpoints`).
        variants: names from `VARIANTS` (the named variants and "etc").
        size: a `Size` (default: 2 layers, hidden 128, sequence 128, 8 per replica).
        steps: timed training steps per variant, after the first (compiling) one.
        mixed_precision: one of distribution.MIXED_PRECISION; the caller's global
            Keras policy is restored afterwards.
        keep_checkpoints: keep the checkpoint folder even when all variants pass.
        print_fn: receives each report line.
    """
    size = size or Size()
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise UsageError(f"--variants: unknown {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    run_dir = os.path.join(output_dir, time.strftime("smoke_check-%Y%m%d-%H%M%S"))
    previous_policy = keras.mixed_precision.global_policy().name
    previous_log_level = tf.get_logger().level
    distribution.set_mixed_precision(mixed_precision)
    # Each variant traces its own step function; TensorFlow would warn about retracing.
    tf.get_logger().setLevel("ERROR")
    start = time.perf_counter()
    results, failures = [], []
    try:
        for line in report_header(strategy, size, steps, mixed_precision, run_dir):
            print_fn(line)
        for name in variants:
            try:
                result = check_variant(name, strategy, size, steps, run_dir)
            except Exception as e:  # reported per variant; the other variants still run
                result = VariantResult(name, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                failures.append(traceback.format_exc())
            results.append(result)
            print_fn(report_row(result))
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
        tf.get_logger().setLevel(previous_log_level)
    passed = sum(r.ok for r in results)
    print_fn("")
    print_fn(f"{'OK' if passed == len(results) else 'FAILED'}: {passed} of {len(results)} variants compiled, "
             f"trained with a finite loss and restored their checkpoint ({time.perf_counter() - start:.0f} s)")
    for failure in failures:
        print(failure, file=sys.stderr)
    if passed == len(results) and not keep_checkpoints and tf.io.gfile.exists(run_dir):
        tf.io.gfile.rmtree(run_dir)
    return results
