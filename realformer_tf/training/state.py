"""What a training checkpoint tracks of a model besides the optimizer: its weights by
original name and its random-number states."""

from realformer_tf.checkpoints import names as checkpoint_names


def checkpointable_weights(model):
    """{original BERT name: variable} of every model weight, for tf.train.Checkpoint.

    Keras 3 layers do not expose nested sublayers to TF's object-based checkpointing,
    so the training checkpoints track the weights explicitly, keyed by their original
    names: robust to code changes, and convertible without rebuilding the object graph.
    """
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
