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

On a CPU without XLA the model's LayerNorms and dropouts and the AdamW update run as
fused kernels in training steps, by their own `fused_kernels` option
(realformer_tf/kernels), as in any Keras `model.fit`; eval and predict steps, like every
inference call, run TensorFlow's ops.

Its parts in training/: task (the protocol and the metric sums), distribution (the
strategy, the XLA policy, the chief), gradients (clipping, accumulation), orbit_runner,
monitoring (NaN stop, progress); what a checkpoint tracks of a model is at the end of
this module. The results files are the jobs' (`jobs/outputs.py`).
"""

import numpy as np
import orbit
import tensorflow as tf
from absl import logging

from realformer_tf.families import family_of
from realformer_tf.training.distribution import (
    distribute_dataset, is_chief, resolve_jit_compile, worker_checkpoint_dir)
from realformer_tf.training.gradients import add_gradients, clip_and_apply
from realformer_tf.training.monitoring import NonFiniteCheck, ProgressAction
from realformer_tf.training.orbit_runner import OrbitRunner, orbit_messages_filtered
from realformer_tf.training.task import MetricAccumulator


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
            directory=model_dir if self.is_chief else worker_checkpoint_dir(model_dir, strategy),
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
        return MetricAccumulator(self.task.metric_names)

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
            grads = g if grads is None else [add_gradients(a, b) for a, b in zip(grads, g)]
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
        (records.make_dataset_fn replays a seeded order). A run that has already
        reached `num_train_steps` says so and reads no input."""
        if int(self.global_step.numpy()) >= num_train_steps:
            log_fn(f"Training already finished: step {int(self.global_step.numpy())} of {num_train_steps}")
            return {}
        start_step = int(self.global_step.numpy()) * self.gradient_accumulation_steps
        dataset = distribute_dataset(
            self.strategy, lambda input_context: train_dataset_fn(input_context, start_step=start_step))
        runner = OrbitRunner(self, dataset, None)
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
        with orbit_messages_filtered():
            controller.train(steps=num_train_steps)
        return runner.train_metrics.means(self.task.loss_terms) if runner.train_metrics else {}

    def evaluate(self, eval_dataset_fn, num_steps, summary_dir=None):
        """Runs `num_steps` eval batches (-1: until the data ends); returns metric means."""
        dataset = distribute_dataset(self.strategy, eval_dataset_fn)
        runner = OrbitRunner(self, None, dataset)
        controller = orbit.Controller(
            strategy=self.strategy, evaluator=runner, global_step=self.global_step,
            eval_summary_dir=summary_dir if self.is_chief else None,
        )
        with orbit_messages_filtered():
            results = controller.evaluate(steps=num_steps)
        results = {k: float(v) for k, v in results.items()}
        results["global_step"] = int(self.global_step.numpy())
        return results

    def predict(self, dataset_fn, output_keys, feature_keys=()):
        """Runs the model over the whole dataset; returns {key: np.ndarray} in input
        order, for the model outputs `output_keys` and the input features `feature_keys`."""
        dataset = distribute_dataset(self.strategy, dataset_fn)

        @tf.function
        def step(features):
            outputs = self.model(features, training=False)
            return dict({k: outputs[k] for k in output_keys}, **{k: features[k] for k in feature_keys})

        keys = tuple(output_keys) + tuple(feature_keys)
        collected = {k: [] for k in keys}
        for features in dataset:
            out = self.strategy.run(step, (features,))
            for k in keys:
                collected[k].extend(np.asarray(p) for p in self.strategy.experimental_local_results(out[k]))
        return {k: np.concatenate(v) if v else np.zeros([0]) for k, v in collected.items()}


# -- what a training checkpoint tracks of a model besides the optimizer ---------------
def checkpointable_weights(model):
    """{original BERT name: variable} of every model weight, for tf.train.Checkpoint.

    Keras 3 layers do not expose nested sublayers to TF's object-based checkpointing,
    so the training checkpoints track the weights explicitly, keyed by their original
    names: robust to code changes, and convertible without rebuilding the object graph.
    """
    weights = family_of(model).named_variables(model)
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
