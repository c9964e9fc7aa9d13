"""What the BERT and ETC models share: building from the config alone, the config in
`get_config`, and the SQuAD span head."""

from realformer_tf.layers.heads import SpanLogits


class ConfigModel:
    """Mixin for a Keras model built from one config object (`self.config`, of
    `config_class`): `build()` creates every weight from the config alone, which `.keras`
    files and the checkpoint loaders rely on, and `get_config` is that config plus the
    constructor's own keywords (subclasses add theirs: `dict(super().get_config(), ...)`).
    """

    config_class = None

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
