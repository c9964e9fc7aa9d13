"""Metric sums over the steps of one compiled loop, kept where every device can add
to them."""

import tensorflow as tf

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
