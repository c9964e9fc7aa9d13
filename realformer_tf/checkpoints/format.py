"""`CheckpointFormat`: a model family's checkpoint side (its models by kind, their
variable names and head prefixes, loading and saving).

A `realformer_tf.families.ModelFamily` holds one and adds configs, inputs and jobs; the
loaders here (`checkpoints.bert.load_bert_checkpoint`, `etc_official.load_etc_checkpoint`)
sit below the families and hand their format to `variant_evidence` when a config does
not state residual_attention.

    fmt = checkpoints.bert.FORMAT
    model = fmt.build_model(config, "classifier", num_labels=2)
    fmt.load_checkpoint(model, "bert_model.ckpt", skip_heads=True)
"""

from realformer_tf.checkpoints import tf_checkpoint as ckpt

# What a job asks a family to build.
KINDS = ("pretraining", "classifier", "squad", "encoder")


class CheckpointFormat:
    """One family's models and checkpoint names. Subclasses set the attributes and
    implement the methods that raise NotImplementedError.

    Attributes:
        name: the `--model_type` value.
        head_prefixes: {kind: variable-name prefixes of that kind's heads} (the one
            table: a checkpoint holds a kind's heads when it has a name under each
            prefix; a model of that kind owns the names under them when loading).
        classifier_weights_name: the classifier head's [num_labels, hidden] weights.
        max_length_field: the config field that bounds the input length (0: none).
    """

    name = None
    head_prefixes = {}
    classifier_weights_name = None
    max_length_field = None

    def model_classes(self):
        """{kind: Keras model class} (constructors take the config, and for the
        classifier `num_labels`)."""
        raise NotImplementedError

    def build_model(self, config, kind, num_labels=None, dtype=None):
        """The Keras model of `kind` (one of KINDS): the family's one builder."""
        classes = self.model_classes()
        if kind not in classes:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(classes)}")
        kwargs = {} if dtype is None else {"dtype": dtype}
        if kind == "classifier":
            kwargs["num_labels"] = num_labels
        return classes[kind](config, **kwargs)

    def max_length(self, config):
        """The longest input the config's models take (None: no limit)."""
        value = getattr(config, self.max_length_field)
        return value or None

    def adapt_features(self, features, config, options):
        """One batch of BERT-layout features as this family's model inputs (identity
        for BERT)."""
        return features

    def check_checkpoint_fits(self, config, prefix):
        """Raises CheckpointError when the checkpoint at `prefix` (resolved) does not
        have the sizes `config` gives, from its stored shapes alone: called before a
        model is built, so a config that does not describe the checkpoint (or a hostile
        one) fails at once instead of allocating a model first."""

    def load_checkpoint(self, model, prefix, skip_heads=False):
        """Loads a checkpoint under the family's names (or one of our training
        checkpoints) into `model`; returns the prefix read."""
        raise NotImplementedError

    def save_checkpoint(self, model, prefix):
        raise NotImplementedError

    def checkpoint_heads(self, prefix, kind, num_labels=None):
        """Whether the checkpoint at `prefix` holds the heads of `kind` (for a
        classifier with `num_labels`, one of that many labels)."""
        prefixes = tuple(self.head_prefixes.get(kind, ()))
        stored = ckpt.list_checkpoint(prefix)
        names = ckpt.original_names(stored) or {}
        if not prefixes or not all(any(n.startswith(p) for n in names) for p in prefixes):
            return False
        weights = names.get(self.classifier_weights_name)
        return kind != "classifier" or num_labels is None or (weights and stored[weights][0] == num_labels)
