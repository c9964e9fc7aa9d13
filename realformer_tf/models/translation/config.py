"""`TranslationConfig`: an encoder-decoder Transformer for translation, as RealFormer's
Table 7 runs it: post-LN (fairseq's `transformer_wmt_en_de`), optionally Admin's
profiled residual scale, and RealFormer's residual attention on each of the three
attention paths separately.

| field                         | path / what it adds                                      |
|-------------------------------|----------------------------------------------------------|
| `residual_attention`          | the encoder's self-attention scores                      |
| `decoder_residual_attention`  | the decoder's (causal) self-attention scores             |
| `cross_residual_attention`    | the decoder's cross-attention scores                     |
| `admin_residual_scale`        | LN(w * x + f(x)), w profiled at initialization (Admin)   |

The two decoder fields left unset (null) follow `residual_attention`.
"""

import dataclasses
from typing import Optional

from realformer_tf.errors import ConfigError
from realformer_tf.layers.transformer import check_choice
from realformer_tf.models.config import EncoderConfig, _keyword

POSITION_EMBEDDINGS = ("sinusoidal", "learned")


@dataclasses.dataclass
class TranslationConfig(EncoderConfig):
    """Configuration of an encoder-decoder translation model: one vocabulary (a joint
    SentencePiece model) shared by the source, the target and the output projection
    (fairseq's `--share-all-embeddings`), embeddings scaled by sqrt(hidden_size),
    sinusoidal (or learned) positions, `num_hidden_layers` encoder and
    `num_decoder_layers` decoder blocks.

    Defaults are `transformer_wmt_en_de` (6 + 6 layers, 512, 8 heads, 2048, ReLU,
    dropout 0.1, LayerNorm epsilon 1e-5); the ids are those of a
    `make_vocab.py --vocab_type=sentencepiece` model (<pad> 0, <s> 2, </s> 3).

    Example:
    >>> config = TranslationConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
    ...                            num_decoder_layers=2, num_attention_heads=4,
    ...                            intermediate_size=64, admin_residual_scale=True,
    ...                            residual_attention=True)
    >>> config.describe()
    'Translation, Admin: residual attention on encoder self, decoder self, cross, post-LN [2+2L/4H/32/64, vocab 100]'
    """

    file_description = "translation config file"
    positive_fields = ("max_position_embeddings", "num_decoder_layers")
    non_negative_fields = ("pad_id", "bos_id", "eos_id")
    bool_fields = ("admin_residual_scale",)
    string_fields = ("position_embedding",)
    option_fields = {"admin_residual_scale": "admin_residual_scale",
                     "cross_residual_attention": "cross_residual_attention"}
    residual_attention_may_be_unstated = False

    hidden_size: int = 512
    num_hidden_layers: int = 6
    num_attention_heads: int = 8
    intermediate_size: int = 2048
    hidden_act: str = "relu"
    num_decoder_layers: int = _keyword(6)
    max_position_embeddings: int = _keyword(1024)
    position_embedding: str = _keyword("sinusoidal")
    initializer_range: float = _keyword(0.02)
    layer_norm_eps: float = _keyword(1e-5)
    residual_attention: Optional[bool] = _keyword(False)
    decoder_residual_attention: Optional[bool] = _keyword(None)
    cross_residual_attention: Optional[bool] = _keyword(None)
    admin_residual_scale: bool = _keyword(False)
    pad_id: int = _keyword(0)
    bos_id: int = _keyword(2)
    eos_id: int = _keyword(3)
    # What the file is (every translation config file says so).
    model_type: str = _keyword("translation")

    def paths(self):
        """{"encoder self", "decoder self", "cross": on} of residual attention."""
        own = bool(self.residual_attention)
        follow = lambda value: own if value is None else value  # noqa: E731
        return {"encoder self": own, "decoder self": follow(self.decoder_residual_attention),
                "cross": follow(self.cross_residual_attention)}

    def block_options(self):
        """The encoder stack's options (its self-attention path)."""
        options = super().block_options()
        options.update(admin_residual_scale=self.admin_residual_scale, cross_residual_attention=None)
        return options

    def decoder_options(self):
        """The decoder stack's options (its self- and cross-attention paths)."""
        paths = self.paths()
        return dict(self.block_options(), num_layers=self.num_decoder_layers,
                    residual_attention=paths["decoder self"], cross_residual_attention=paths["cross"])

    @classmethod
    def from_dict(cls, values, source="config"):
        """As `JsonConfig.from_dict`, refusing another family's config with one line."""
        if isinstance(values, dict) and values.get("model_type", "translation") != "translation" \
                or isinstance(values, dict) and "type_vocab_size" in values:
            kind = values.get("model_type") or "BERT (masked-LM)"
            raise ConfigError(f"{source} is a {kind} config, not a translation model's (model_type "
                              "translation); give a translation config")
        return super().from_dict(values, source)

    def _validate_own(self):
        if self.model_type != "translation":
            raise ConfigError(f"model_type must be 'translation', got {self.model_type!r}")
        check_choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS, ConfigError)
        for name in ("residual_attention", "decoder_residual_attention", "cross_residual_attention"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ConfigError(f"{name} must be true, false or null, got {value!r}")
        if self.residual_attention is None:
            raise ConfigError("residual_attention must be true or false: a translation config states its variant")
        special = {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}
        for name, value in special.items():
            if value >= self.vocab_size:
                raise ConfigError(f"{name}={value} is outside the vocabulary (vocab_size {self.vocab_size})")
        if len(set(special.values())) < 3:
            raise ConfigError(f"pad_id, bos_id and eos_id must differ, got {special}")

    def describe(self):
        """One line that names the variant, for the first lines of every program."""
        on = [path for path, value in self.paths().items() if value]
        name = "Translation" + (", Admin" if self.admin_residual_scale else "")
        parts = [f"residual attention on {', '.join(on)}" if on else "residual attention off",
                 "post-LN" if self.layer_norm_type == "post" else f"{self.layer_norm_type}-LN"]
        if on and self.use_running_mean:
            parts.append("running mean on")
        size = (f"{self.num_hidden_layers}+{self.num_decoder_layers}L/{self.num_attention_heads}H/"
                f"{self.hidden_size}/{self.intermediate_size}, vocab {self.vocab_size}")
        return f"{name}: {', '.join(parts)} [{size}]"
