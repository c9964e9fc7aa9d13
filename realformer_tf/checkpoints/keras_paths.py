"""Checkpoints of the families whose names are simply their weights' Keras paths without
the model's own name (the causal LM, the translation model): one implementation of
naming, telling the model, loading and saving for each of them.

    names = KerasPathNames(marker="token_embeddings/embeddings", model_class="CausalLMModel",
                           owned_prefixes=("decoder/", "token_embeddings/"), module="models.causal_lm")
    names.save(model, "out/lm_model.ckpt"); names.load(model, "out/lm_model.ckpt", check_fits)
"""

from realformer_tf.checkpoints import tf_checkpoint as ckpt


class KerasPathNames:
    """Checkpoint I/O under Keras-path names for one model class.

    Args:
      marker: a weight every model of this class has.
      model_class: the class's name, for errors.
      module: where the class lives, for errors.
      owned_prefixes: the name prefixes a checkpoint of this model fills.
    """

    def __init__(self, marker, model_class, module, owned_prefixes):
        self.marker, self.model_class, self.module = marker, model_class, module
        self.owned_prefixes = tuple(owned_prefixes)

    def check_model(self, model):
        """Raises TypeError unless `model` is of this class (told by its weights' names)."""
        if hasattr(model, "_ensure_built"):
            model._ensure_built()
        # By class name: this tier imports no model class.
        if self.model_class not in (cls.__name__ for cls in type(model).__mro__) or \
                self.marker not in (v.path.split("/", 1)[-1] for v in model.weights):
            raise TypeError(f"{type(model).__name__} is not a {self.model_class} (realformer_tf.{self.module})")

    def variables(self, model, include_heads=True):
        """{name: variable} of every weight (`include_heads` is taken for the families'
        common signature: every weight is the model's own).

        Raises:
          TypeError for a model of another class.
        """
        self.check_model(model)
        return {v.path.split("/", 1)[1]: v for v in model.weights}

    def load(self, model, path, check_fits, allow_nonfinite=False):
        """Loads a checkpoint under these names (or a training checkpoint) into
        `model`, its sizes checked by `check_fits(config, prefix)` before an unbuilt
        model is built. Returns the prefix read.

        Raises:
          CheckpointError naming any missing, unexpected or mis-shaped weight.
        """
        if not model.built:
            check_fits(model.config, ckpt.resolve_checkpoint(path))
        return ckpt.load_named_variables(
            path, self.variables(model), self.owned_prefixes,
            description=f"{type(model).__name__} ({model.config.describe()})", allow_nonfinite=allow_nonfinite)

    def save(self, model, prefix):
        """Writes every weight under its name; returns the prefix written."""
        return ckpt.save_named_variables(prefix, self.variables(model))
