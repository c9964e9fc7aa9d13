"""What the BERT and ETC models share: building from the config alone, the config in
`get_config`, integer inputs of any batch size and length in every exported
signature, and the SQuAD span head."""

import keras

from realformer_tf.layers.heads import SpanLogits


class ConfigModel:
    """Mixin for a Keras model built from one config object (`self.config`, of
    `config_class`): `build()` creates every weight from the config alone, which `.keras`
    files and the checkpoint loaders rely on, and `get_config` is that config plus the
    constructor's own keywords (subclasses add theirs: `dict(super().get_config(), ...)`).

    Its inputs are a dict of integer tensors (token ids, masks, positions), so the
    signature Keras gives an export (`model.export`, `tf.saved_model.save(model)`) is
    int32 with every dimension dynamic (`input_specs`), where Keras would take the
    policy's float dtype (bfloat16 rounds ids above 256) and the first call's length.
    """

    config_class = None
    # The keys of the input dict a signature takes when no call has recorded them
    # (a model built from its config, e.g. loaded from a file, then exported).
    serving_inputs = ()

    @property
    def input_dtype(self):
        """int32 under any dtype policy: every input is an integer."""
        return "int32"

    def input_specs(self):
        """{name: keras.InputSpec}, int32 with every dimension dynamic: the keys (and
        ranks) of the dict this model was first called with, where Keras recorded it
        (so side inputs a model was trained with stay in its signature), else
        `serving_inputs`, each [batch, length]."""
        shapes = (keras.Model.get_build_config(self) or {}).get("input_shape")
        if not isinstance(shapes, dict) or not shapes:
            shapes = {name: (None, None) for name in self.serving_inputs}
        return {name: keras.InputSpec(shape=(None,) * len(shape), dtype="int32", name=name)
                for name, shape in sorted(shapes.items())}

    def export(self, filepath, format="tf_saved_model", verbose=None, input_signature=None, **kwargs):
        """`keras.Model.export` with `[self.input_specs()]` as the default signature. On
        TensorFlow, the SavedModel's `serve` returns list outputs (per-layer tensors)
        flattened to `name_0`, `name_1`, ..., as a signature needs."""
        if input_signature is None:
            input_signature = [self.input_specs()]
        if kwargs or format != "tf_saved_model" or keras.backend.backend() != "tensorflow":
            return super().export(filepath, format=format, verbose=verbose, input_signature=input_signature, **kwargs)
        archive = keras.export.ExportArchive()
        archive.track(self)
        archive.add_endpoint("serve", lambda inputs: _flat_outputs(self(inputs, training=False)),
                             input_signature=input_signature)
        archive.write_out(filepath, verbose=True if verbose is None else verbose)

    @property
    def _default_save_signature(self):
        """`tf.saved_model.save(model)`'s `serving_default` (TensorFlow asks a Keras model
        for it; Keras would fix the batch size and length of the first call):
        `input_specs()`, with list outputs (per-layer tensors) flattened to
        `name_0`, `name_1`, ... as a signature needs."""
        import tensorflow as tf

        specs = {name: tf.TensorSpec(spec.shape, tf.int32, name=name) for name, spec in self.input_specs().items()}

        @tf.function(input_signature=[specs])
        def serving_default(inputs):
            return _flat_outputs(self(inputs))

        return serving_default

    def _ensure_built(self):
        if not self.built:
            self.build()

    def get_build_config(self):
        """Saved in `.keras` files: `build` needs nothing but the config, so loading
        rebuilds every weight before reading them (Keras would otherwise return a
        model without weights, with only a warning)."""
        return {"from_config": True}

    def build_from_config(self, build_config):
        self.build()

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        keywords = dict(config)
        return cls(cls.config_class.from_dict(keywords.pop("config")), **keywords)


def _flat_outputs(outputs):
    """A model's output dict with each list value spread over `key_0`, `key_1`, ..."""
    flat = {}
    for key, value in outputs.items():
        if isinstance(value, (list, tuple)):
            flat.update({f"{key}_{i}": item for i, item in enumerate(value)})
        else:
            flat[key] = value
    return flat


class SpanHead:
    """Mixin for a model with heads (`_BertWithHead`, `_EtcWithHead`): the SQuAD span head
    (`squad/output_weights` [2, hidden]) on every token of the encoder's sequence output.
    Outputs: `start_logits`, `end_logits` [B, L] (float32).

    Subclasses name the encoder attribute (`encoder_attribute`) and the key of its
    per-token output (`sequence_output_key`), and call `_add_span_head()` in `__init__`.
    """

    encoder_attribute = None
    sequence_output_key = None

    def _add_span_head(self):
        self.span = SpanLogits(initializer_range=self.config.initializer_range, name="squad",
                               dtype=self.dtype_policy)

    def _build_heads(self, hidden):
        self.span.build((None, None, hidden))

    def call(self, inputs, training=None):
        encoder = getattr(self, self.encoder_attribute)
        return self.span(encoder(inputs, training=training)[self.sequence_output_key])
