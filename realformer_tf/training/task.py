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

The three tasks of the jobs are in realformer_tf/jobs/tasks/.
"""


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
