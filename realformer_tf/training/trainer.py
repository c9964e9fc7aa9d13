"""The one training loop shared by pretraining, classification and SQuAD.

Built on orbit (Model Garden's loop library): `iterations_per_loop` steps run inside
one compiled `tf.while_loop` call, as TPUEstimator did; checkpoints go through
`tf.train.CheckpointManager` (bounded count; the `checkpoint` index is updated only
after a save completes, so a crash never points at a half-written checkpoint); a rerun
with the same output_dir resumes from the latest checkpoint: weights, optimizer state,
global step and dropout seeds, and the data where it stopped (the dataset function is
told the step it starts at), so it ends where an uninterrupted run would.

A task supplies the model and, per batch, `{metric: (sum, count)}` pairs; the loss is
the sum of the means of the task's `loss_terms`, each normalized by the count over the
whole global batch, so N replicas compute exactly what one device would.

Two options change how a step runs, not what it computes. `jit_compile` compiles the
per-replica forward+backward (and the eval step) with XLA. `gradient_accumulation_steps`
= N sums the gradients of N consecutive batches before one optimizer step: the same
update as one N-times larger batch (each loss term is divided by its count over all N
batches and all replicas, the sum is clipped once, global_step and the learning rate
advance once).

The steps are traced inside `kernels.fused_cpu_kernels()`: on a CPU without XLA their
LayerNorms run as fused kernels (realformer_tf/kernels); the same model traced anywhere
else (export, a user's own function) keeps TensorFlow's ops.
"""

import math
import os
import time

import numpy as np
import orbit
import tensorflow as tf
from absl import logging

from realformer_tf import kernels
from realformer_tf.training import optimization
from realformer_tf.errors import UserError
from realformer_tf.fileio import atomic_output
from realformer_tf.errors import NonFiniteLossError  # noqa: F401  (raised here, public here)


def _orbit_log(message):
    """orbit prints every loop's output dict (several lines) besides logging it; the
    progress line below says the same in one line, so of orbit's messages only those
    about checkpoints reach stdout; all of them stay in the absl log."""
    logging.info(message)
    if message.startswith(("saved checkpoint", "restored")):
        print(message, flush=True)


orbit.controller._log = _orbit_log  # a module function orbit looks up on each call

# The local host's CPU: where the float64 metric sums live (never on a TPU/GPU).
_HOST = "/device:CPU:0"
JIT_COMPILE_CHOICES = ("auto", "true", "false")


class Task:
    """What a training job is about. Subclasses implement the three methods and name
    the metrics `metric_sums` returns; the loss is the sum of the `loss_terms` means."""

    metric_names = ("loss",)
    loss_terms = ("loss",)

    def build_model(self):
        """Returns the (unbuilt is fine) keras.Model."""
        raise NotImplementedError

    def initialize(self, model):
        """Called once for a fresh run (no checkpoint in output_dir), e.g. to load
        init_checkpoint. Returns a description for the log, or None."""
        return None

    def metric_sums(self, features, outputs):
        """{name: (sum over the local batch, count)} for the loss terms and metrics."""
        raise NotImplementedError


class _MetricAccumulator:
    """Sums of (sum, count) pairs over steps, kept in float64 variables on the host's CPU
    (TPUs have no float64; the sums arrive there already reduced over the replicas),
    so they can be updated inside orbit's compiled loop but outside the replica step."""

    def __init__(self, names):
        self.names = tuple(names)
        with tf.device(_HOST):
            self.sums = {n: tf.Variable(0.0, trainable=False, dtype=tf.float64) for n in self.names}
            self.counts = {n: tf.Variable(0.0, trainable=False, dtype=tf.float64) for n in self.names}

    def reset(self):
        for n in self.names:
            self.sums[n].assign(0.0)
            self.counts[n].assign(0.0)

    def add(self, strategy, per_replica_sums):
        reduced = {n: [strategy.reduce("SUM", x, axis=None) for x in per_replica_sums[n]] for n in self.names}
        # A count that does not depend on the data (a static batch size) must not be added
        # when reading the batch fails at the end of the data: gate every update on all
        # the reduced values.
        with tf.control_dependencies(tf.nest.flatten(reduced)), tf.device(_HOST):
            for n in self.names:
                self.sums[n].assign_add(tf.cast(reduced[n][0], tf.float64))
                self.counts[n].assign_add(tf.cast(reduced[n][1], tf.float64))

    def means(self, loss_terms):
        values = {n: float(self.sums[n].numpy() / max(self.counts[n].numpy(), 1e-12)) for n in self.names}
        values["loss"] = sum(values[t] for t in loss_terms)
        return values


class _OrbitRunner(orbit.StandardTrainer, orbit.StandardEvaluator):
    def __init__(self, trainer, train_dataset, eval_dataset):
        self._t = trainer
        self.train_metrics = None
        self.eval_metrics = None
        if train_dataset is not None:
            orbit.StandardTrainer.__init__(self, train_dataset)
        if eval_dataset is not None:
            orbit.StandardEvaluator.__init__(self, eval_dataset)

    # -- training ---------------------------------------------------------------------
    def train_loop_begin(self):
        if self.train_metrics is None:
            self.train_metrics = self._t.new_accumulator()
        self.train_metrics.reset()

    def train_step(self, iterator):
        # One optimizer step: the next gradient_accumulation_steps batches.
        batches = tuple(next(iterator) for _ in range(self._t.gradient_accumulation_steps))
        self.train_metrics.add(self._t.strategy, self._t.strategy.run(self._t.replica_train_step, (batches,)))

    def train_loop_end(self):
        values = self.train_metrics.means(self._t.task.loss_terms)
        values["learning_rate"] = float(self._t.current_learning_rate())
        return values

    # -- evaluation -------------------------------------------------------------------
    def eval_begin(self):
        if self.eval_metrics is None:
            self.eval_metrics = self._t.new_accumulator()
        self.eval_metrics.reset()

    def eval_step(self, iterator):
        self.eval_metrics.add(self._t.strategy, self._t.strategy.run(self._t.eval_step_fn, (next(iterator),)))

    def eval_end(self):
        return self.eval_metrics.means(self._t.task.loss_terms)


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


class Trainer:
    """Runs a Task under a tf.distribute strategy with checkpoints in `model_dir`.

    Args:
        task: the `Task` (model, metrics and loss terms).
        strategy: a `tf.distribute.Strategy`.
        model_dir: where checkpoints are written and resumed from.
        optimizer_fn: builds the optimizer (None: evaluation/prediction only).
        steps_per_loop: optimizer steps per compiled loop call (orbit).
        save_checkpoints_steps: checkpoint interval, in optimizer steps.
        max_checkpoints_to_keep: how many checkpoints the manager keeps.
        clip_norm: clip the global gradient norm to this (None/0: no clipping).
        global_batch_size: examples per batch over all replicas (for the progress line).
        jit_compile: `"auto"`, `"true"`, `"false"` or a bool: compile the per-replica
            forward+backward and eval step, and the optimizer update, with XLA
            (`resolve_jit_compile` states what `"auto"` picks where).
        gradient_accumulation_steps: batches per optimizer step; the gradients of
            `gradient_accumulation_steps` batches of `global_batch_size` are summed and
            applied once, exactly as one batch of their total size would be.
    """

    def __init__(
        self,
        task,
        strategy,
        model_dir,
        optimizer_fn=None,
        steps_per_loop=1000,
        save_checkpoints_steps=1000,
        max_checkpoints_to_keep=5,
        clip_norm=1.0,
        global_batch_size=None,
        jit_compile="auto",
        gradient_accumulation_steps=1,
    ):
        if int(gradient_accumulation_steps) < 1:
            raise ValueError(f"gradient_accumulation_steps={gradient_accumulation_steps}; use 1 or more")
        self.task = task
        self.gradient_accumulation_steps = int(gradient_accumulation_steps)
        self.jit_compile, self.jit_compile_update = resolve_jit_compile(jit_compile, strategy)
        self._compiled = {}
        self.strategy = strategy
        self.model_dir = model_dir
        self.steps_per_loop = max(1, int(steps_per_loop))
        self.clip_norm = clip_norm
        self.global_batch_size = global_batch_size
        with strategy.scope():
            self.model = task.build_model()
            self.model._ensure_built()
            self.optimizer = optimizer_fn() if optimizer_fn else None
            if self.optimizer is not None:
                self.optimizer.build(self.model.trainable_variables)
            self.global_step = orbit.utils.create_global_step()
        # The dropout seeds' states too: a resumed run then draws the dropout masks the
        # uninterrupted run would have.
        tracked = dict(model_weights=checkpointable_weights(self.model), global_step=self.global_step,
                       random_states=random_states(self.model))
        if self.optimizer is not None:
            tracked["optimizer"] = self.optimizer
        self.checkpoint = tf.train.Checkpoint(**tracked)
        # Every worker takes part in a save, but only the chief writes to model_dir;
        # the others write to a scratch folder of their own (TF's multi-worker rule).
        self.is_chief = is_chief(strategy)
        self.checkpoint_manager = tf.train.CheckpointManager(
            self.checkpoint,
            directory=model_dir if self.is_chief else _worker_dir(model_dir, strategy),
            max_to_keep=max_checkpoints_to_keep,
            step_counter=self.global_step,
            checkpoint_interval=max(1, int(save_checkpoints_steps)),
        )
        if self.checkpoint_manager.latest_checkpoint is None:
            # Save at multiples of save_checkpoints_steps, as TPUEstimator did: TF's manager
            # would save at the first loop's end and every interval after that.
            self.checkpoint_manager._last_checkpoint_step = 0
        self.init_message = None

    # -- set-up -------------------------------------------------------------------------
    def restore_or_initialize(self, weights_only=False):
        """Restores the latest checkpoint of model_dir (the chief's, on every worker), or
        runs the task's initializer. `weights_only` (prediction) leaves the optimizer
        state unread. Returns the restored path (None for a fresh run)."""
        path = tf.train.latest_checkpoint(self.model_dir)
        with self.strategy.scope():
            if path is None:
                self.init_message = self.task.initialize(self.model)
            elif weights_only or self.optimizer is None:
                # Prediction only: the checkpoint's optimizer slots are expected extras.
                self.checkpoint.restore(path).expect_partial()
            else:
                self.checkpoint.restore(path).assert_existing_objects_matched()
        if path:
            logging.info("Resumed from %s at global step %d", path, int(self.global_step.numpy()))
        return path

    def new_accumulator(self):
        return _MetricAccumulator(self.task.metric_names)

    def current_learning_rate(self):
        optimizer = getattr(self.optimizer, "inner_optimizer", self.optimizer)
        lr = optimizer.learning_rate
        return lr.numpy() if hasattr(lr, "numpy") else lr

    # -- per-replica steps --------------------------------------------------------------
    # Plain Python wrappers: autograph must not convert them (it mixed up the two, whose
    # bodies differ in one name, when several Trainers lived in one process).
    @tf.autograph.experimental.do_not_convert
    def train_gradients_fn(self, features, counts):
        """`replica_gradients`, compiled with XLA when `jit_compile`."""
        return self._maybe_compiled(self.replica_gradients)(features, counts)

    @tf.autograph.experimental.do_not_convert
    def eval_step_fn(self, features):
        """`replica_eval_step`, compiled with XLA when `jit_compile`."""
        return self._maybe_compiled(self.replica_eval_step)(features)

    def _maybe_compiled(self, fn):
        # Only what runs on one replica's data is compiled: a cross-replica sum under
        # MirroredStrategy is a host-side merge that XLA cannot hold. One compiled
        # function per replica: a trace captures that replica's copies of the variables.
        if not self.jit_compile:
            return fn
        replica = tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group)
        key = (fn.__name__, None if replica is None else int(replica))
        if key not in self._compiled:
            self._compiled[key] = tf.function(fn, jit_compile=True)
        return self._compiled[key]

    def loss_counts(self, batches):
        """{loss term: its count summed over `batches` and all replicas}: the divisor of
        each loss term, known before any gradient is taken (the counts of BERT's tasks
        depend on the features only; the inference forward pass this traces is unused
        and pruned from the graph, leaving only the count arithmetic)."""
        local = {t: 0.0 for t in self.task.loss_terms}
        for features in batches:
            outputs = self.model(features, training=False)
            with tf.GradientTape(persistent=True) as tape:
                tape.watch(tf.nest.flatten(outputs))
                sums = self.task.metric_sums(features, outputs)
            for t in self.task.loss_terms:
                if any(g is not None for g in tape.gradient(sums[t][1], tf.nest.flatten(outputs))):
                    raise ValueError(
                        f"{type(self.task).__name__}.metric_sums: the count of loss term {t!r} depends on "
                        "the model outputs; a loss divisor must depend on the features only")
                local[t] += sums[t][1]
        context = tf.distribute.get_replica_context()
        return {t: tf.maximum(context.all_reduce("SUM", c), 1e-5) for t, c in local.items()}

    def replica_gradients(self, features, counts):
        """Gradients (None for unused variables) of `sum over terms of sum / counts[term]`
        for one replica's batch, multiplied by the dynamic loss scale if there is one,
        and the batch's metric sums. No cross-replica communication."""
        variables = self.model.trainable_variables
        scale = getattr(self.optimizer, "dynamic_scale", None)
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            sums = self.task.metric_sums(features, outputs)
            loss = tf.add_n([sums[t][0] / counts[t] for t in self.task.loss_terms])
            scaled_loss = loss * tf.cast(scale, loss.dtype) if scale is not None else loss
        return tape.gradient(scaled_loss, variables), sums

    def replica_train_step(self, batches):
        """One optimizer step on `batches` (a tuple of gradient_accumulation_steps
        per-replica batches); returns their summed metric sums."""
        counts = self.loss_counts(batches)
        grads, sums = None, None
        for features in batches:
            g, s = self.train_gradients_fn(features, counts)
            grads = g if grads is None else [_add_gradients(a, b) for a, b in zip(grads, g)]
            sums = s if sums is None else tf.nest.map_structure(tf.add, sums, s)
        self._apply_gradients(grads)
        return sums

    def _apply_gradients(self, grads):
        variables = self.model.trainable_variables
        # Layers a task does not use (e.g. the pooler under a span head) get no gradient.
        pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
        grads, variables = [g for g, _ in pairs], [v for _, v in pairs]
        # Clip the global gradient (summed over replicas), not each replica's share:
        # reduce here, then hand Keras 1/N of it, whose own cross-replica sum restores it.
        grads = tf.distribute.get_replica_context().all_reduce("SUM", grads)
        if not self.jit_compile_update:
            return self.update(grads, variables)
        key = ("update", tuple(id(v) for v in variables))  # the same set on every trace
        if key not in self._compiled:
            self._compiled[key] = tf.function(lambda g: self.update(g, variables), jit_compile=True)
        return self._compiled[key](grads)

    def update(self, grads, variables):
        """The optimizer step from the replica-summed (loss-scaled) gradients
        (`clip_and_apply`), then the global step."""
        clip_and_apply(self.optimizer, grads, variables, self.clip_norm)
        self.global_step.assign_add(1)

    def replica_eval_step(self, features):
        outputs = self.model(features, training=False)
        return self.task.metric_sums(features, outputs)

    # -- public -------------------------------------------------------------------------
    def train(self, train_dataset_fn, num_train_steps, summary_dir=None, log_fn=print):
        """Trains until global step `num_train_steps`, checkpointing along the way.

        `train_dataset_fn(input_context, start_step)` is told how many batches the
        steps before this run consumed (global step x gradient_accumulation_steps), so
        that a resumed run can continue the data where it stopped
        (records.make_dataset_fn replays a seeded order)."""
        start_step = int(self.global_step.numpy()) * self.gradient_accumulation_steps
        dataset = self.strategy.distribute_datasets_from_function(
            lambda input_context: train_dataset_fn(input_context, start_step=start_step))
        runner = _OrbitRunner(self, dataset, None)
        examples_per_step = self.global_batch_size and self.global_batch_size * self.gradient_accumulation_steps
        progress = ProgressAction(self, num_train_steps, examples_per_step, log_fn)
        controller = orbit.Controller(
            strategy=self.strategy,
            trainer=runner,
            global_step=self.global_step,
            steps_per_loop=self.steps_per_loop,
            checkpoint_manager=self.checkpoint_manager,
            summary_dir=summary_dir if self.is_chief else None,
            summary_interval=self.steps_per_loop if summary_dir and self.is_chief else None,
            train_actions=[NonFiniteCheck(self), progress],
        )
        with kernels.fused_cpu_kernels():
            controller.train(steps=num_train_steps)
        return runner.train_metrics.means(self.task.loss_terms) if runner.train_metrics else {}

    def evaluate(self, eval_dataset_fn, num_steps, summary_dir=None):
        """Runs `num_steps` eval batches (-1: until the data ends); returns metric means."""
        dataset = self.strategy.distribute_datasets_from_function(eval_dataset_fn)
        runner = _OrbitRunner(self, None, dataset)
        controller = orbit.Controller(
            strategy=self.strategy, evaluator=runner, global_step=self.global_step,
            eval_summary_dir=summary_dir if self.is_chief else None,
        )
        with kernels.fused_cpu_kernels():
            results = controller.evaluate(steps=num_steps)
        results = {k: float(v) for k, v in results.items()}
        results["global_step"] = int(self.global_step.numpy())
        return results

    def predict(self, dataset_fn, output_keys, feature_keys=()):
        """Runs the model over the whole dataset; returns {key: np.ndarray} in input
        order, for the model outputs `output_keys` and the input features `feature_keys`."""
        dataset = self.strategy.distribute_datasets_from_function(dataset_fn)

        @tf.function
        def step(features):
            outputs = self.model(features, training=False)
            return dict({k: outputs[k] for k in output_keys}, **{k: features[k] for k in feature_keys})

        keys = tuple(output_keys) + tuple(feature_keys)
        collected = {k: [] for k in keys}
        with kernels.fused_cpu_kernels():
            for features in dataset:
                out = self.strategy.run(step, (features,))
                for k in keys:
                    collected[k].extend(np.asarray(p) for p in self.strategy.experimental_local_results(out[k]))
        return {k: np.concatenate(v) if v else np.zeros([0]) for k, v in collected.items()}


def clip_and_apply(optimizer, grads, variables, clip_norm):
    """One optimizer step from replica-summed (loss-scaled) gradients, clipped to global
    norm `clip_norm` (of the unscaled gradients; None: no clipping).

    One factor does the clipping and takes this replica's 1/N share (Keras' own
    cross-replica sum restores the whole); a LossScaleOptimizer gets the gradients
    still loss-scaled and unscales them itself. Our AdamW on one replica folds the
    factor into its update's single pass; otherwise it is one multiply per gradient,
    and none where it would be 1 (one replica, no clipping)."""
    context = tf.distribute.get_replica_context()
    scale = getattr(optimizer, "dynamic_scale", None)
    multiplier = 1.0 / context.num_replicas_in_sync
    if clip_norm:
        norm = tf.linalg.global_norm(grads)
        if scale is not None:
            norm = norm / tf.cast(scale, norm.dtype)
        multiplier = _clip_multiplier(norm, clip_norm) * multiplier
    if isinstance(multiplier, float) and multiplier == 1.0:
        optimizer.apply_gradients(zip(grads, variables))
    elif isinstance(optimizer, optimization.AdamW) and context.num_replicas_in_sync == 1:
        with optimizer.scaling_gradients(multiplier):
            optimizer.apply_gradients(zip(grads, variables))
    else:
        optimizer.apply_gradients(zip([_times(g, multiplier) for g in grads], variables))


def _clip_multiplier(norm, clip_norm):
    """tf.clip_by_global_norm's factor: min(1, clip_norm / norm), NaN where the norm is
    not finite (so a non-finite step stays non-finite, as there)."""
    return clip_norm * tf.minimum(1.0 / norm, 1.0 / clip_norm) + (norm - norm)


def _times(gradient, multiplier):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * tf.cast(multiplier, gradient.dtype), gradient.indices,
                                gradient.dense_shape)
    return gradient * tf.cast(multiplier, gradient.dtype)


def _add_gradients(a, b):
    """a + b for a variable's gradients; embedding gradients stay sparse (concatenated
    slices, as TF sums them), an unused variable's stay None."""
    if a is None:
        return None
    if isinstance(a, tf.IndexedSlices) or isinstance(b, tf.IndexedSlices):
        a, b = (x if isinstance(x, tf.IndexedSlices) else _as_slices(x) for x in (a, b))
        return tf.IndexedSlices(tf.concat([a.values, b.values], 0), tf.concat([a.indices, b.indices], 0),
                                a.dense_shape)
    return a + b


def _as_slices(dense):
    rows = tf.shape(dense, out_type=tf.int64)[0]
    return tf.IndexedSlices(dense, tf.range(rows), tf.shape(dense, out_type=tf.int64))


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


def _worker_dir(model_dir, strategy):
    """A non-chief worker's scratch checkpoint folder, emptied at start so that orbit's
    Controller never restores a stale one."""
    path = os.path.join(worker_scratch_dir(model_dir, strategy), "checkpoints")
    if tf.io.gfile.exists(path):
        tf.io.gfile.rmtree(path)
    return path


def checkpointable_weights(model):
    """{original BERT name: variable} of every model weight, for tf.train.Checkpoint.

    Keras 3 layers do not expose nested sublayers to TF's object-based checkpointing,
    so the training checkpoints track the weights explicitly, keyed by their original
    names: robust to code changes, and convertible without rebuilding the object graph.
    """
    from realformer_tf.checkpoints import names as checkpoint_names

    weights = checkpoint_names.named_variables(model)
    if len(weights) != len(model.weights):
        raise RuntimeError(
            f"{type(model).__name__} maps {len(weights)} of its {len(model.weights)} weights to names"
        )
    return weights


def random_states(model):
    """The model's random-number states (Keras seed generators: dropout), i.e. its
    variables that are not weights."""
    weights = {id(w) for w in model.weights}
    return [v for v in model.variables if id(v) not in weights]


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


def report_results(output_dir, results, heading="Eval results"):
    """Writes output_dir/eval_results.txt and prints the same lines; returns its path."""
    path = os.path.join(output_dir, "eval_results.txt")
    write_results(path, results)
    print(f"***** {heading} *****")
    for key in sorted(results):
        print(f"  {key} = {results[key]}")
    print(f"Written to {path}", flush=True)
    return path


def write_results(path, results):
    """Writes `key = value` lines, sorted by key, like the original eval_results.txt."""
    with atomic_output(path) as f:
        for key in sorted(results):
            f.write(f"{key} = {results[key]}\n")
