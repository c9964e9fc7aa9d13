"""The task protocol: what a training job supplies to `training.trainer.Trainer`.

A task builds the model and, per batch, returns `{metric: (sum, count)}` pairs; the loss
is the sum of the means of its `loss_terms`, each normalized by the count over the whole
global batch (`Trainer.loss_counts`), so N replicas compute exactly what one device
would.

    class Classifier(Task):
        metric_names = ("loss", "accuracy")

        def build_model(self):
            return BertClassifierModel(config, num_labels=2)

        def metric_sums(self, features, outputs):
            labels = features["label_ids"]
            count = tf.cast(tf.size(labels), tf.float32)
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, outputs["logits"])
            hits = tf.equal(tf.argmax(outputs["logits"], -1, output_type=labels.dtype), labels)
            return {"loss": (tf.reduce_sum(xent), count),
                    "accuracy": (tf.reduce_sum(tf.cast(hits, tf.float32)), count)}

The three tasks of the jobs are in realformer_tf/jobs/tasks/. The trainer keeps the
sums in `MetricAccumulator`s.
"""

import tensorflow as tf


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


# -- metric sums over the steps of one compiled loop, where every device can add -----
# The local host's CPU: where the float64 metric sums live (never on a TPU/GPU).
_HOST = "/device:CPU:0"


class MetricAccumulator:
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
