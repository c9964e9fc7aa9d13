"""What every model config shares: `JsonConfig` (JSON files in and out, `from_dict` with
unknown-field errors and suggestions, required fields, size limits against hostile
files), `EncoderConfig` (the encoder and RealFormer / NormFormer fields of BertConfig
and EtcConfig, their one validation, and the block options they set) and the JSON
reader."""

import copy
import dataclasses
import difflib
import json
from typing import Optional

from absl import logging

from realformer_tf.errors import ConfigError
from realformer_tf.fileio import atomic_output, gfile
from realformer_tf.layers.activations import ACTIVATION_NAMES
from realformer_tf.layers.transformer import check_choice, check_norm_options


# Keys of the multilingual and Chinese Google BERT releases' bert_config.json. The
# original BertConfig copies every key onto itself and its model never reads these, so
# they are accepted and ignored here too.
IGNORED_RELEASE_FIELDS = (
    "directionality", "pooler_fc_size", "pooler_num_attention_heads",
    "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type",
)


# A config file is a few kilobytes (a Hugging Face one with thousands of labels a few
# hundred); anything far larger is not a config and is refused before it is read.
MAX_JSON_FILE_BYTES = 16 * 2**20

# Upper bounds of the size fields, checked before any model is built: far above every
# released model (the largest BERT-style vocab, XLM-R's, is 250,002; BERT-large is
# 24L/1024H/4096I; long-input ETC/BigBird use 4096-16384 positions), far below what a
# typo or a hostile file could ask for (a 1e9-row embedding table is 3 TB at hidden 768).
SIZE_LIMITS = {
    "vocab_size": 2**22,
    "hidden_size": 16384,
    "embedding_size": 16384,
    "num_hidden_layers": 512,
    "num_attention_heads": 1024,
    "intermediate_size": 65536,
    "max_position_embeddings": 2**17,
    "max_absolute_position_embeddings": 2**17,
    "type_vocab_size": 4096,
    "segment_vocab_size": 4096,
    "local_radius": 2**16,
    "relative_pos_max_distance": 2**15,
    "relative_vocab_size": 2**17,
}


def check_size_limits(config):
    """Raises ConfigError for a size field of `config` above `SIZE_LIMITS`."""
    for name, limit in SIZE_LIMITS.items():
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > limit:
            raise ConfigError(
                f"{name}={value} exceeds {limit}, the bound this package puts on it (no released "
                "model comes near it); is the config corrupt or the value a typo?")


def loads_json(raw, path):
    """JSON bytes -> value, every way it can fail a ConfigError naming `path`."""
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text ({e}); save it as UTF-8 JSON") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON ({e})") from None
    except RecursionError:
        raise ConfigError(f"{path} is not a config: its JSON is nested too deeply to read") from None


def read_json_file(path, limit=MAX_JSON_FILE_BYTES):
    """The JSON value of the file at `path` (no larger than `limit` bytes)."""
    with gfile().GFile(path, "rb") as f:
        raw = f.read(limit + 1)
    if len(raw) > limit:
        raise ConfigError(f"{path} is larger than {limit} bytes: not a config file")
    return loads_json(raw, path)


def check_field_names(values, known, ignored, source):
    """Returns `values` without the `ignored` keys (logging one line naming them).

    Raises ConfigError for any other key outside `known`, suggesting the closest known
    name when the key looks like a typo of one.
    """
    unknown = sorted(set(values) - set(known) - set(ignored))
    if unknown:
        named = []
        for name in unknown:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.8)
            named.append(f"{name} (did you mean {close[0]}?)" if close else name)
        raise ConfigError(
            f"{source}: unknown field(s) {', '.join(named)}; fix or remove them. Known fields "
            f"are {', '.join(sorted(known))}"
        )
    skipped = sorted(set(values) & set(ignored))
    if skipped:
        logging.warning("%s: ignoring %s (unused by the model, as in the original code)",
                        source, ", ".join(skipped))
    return {key: value for key, value in values.items() if key not in ignored}


# Transformer block option (realformer_tf.layers.transformer.BLOCK_OPTIONS, plus the
# stacks' num_layers) -> the config field that sets it: the one place the JSON names
# (unchanged, as bert_config.json files have them) meet the layers' keywords.
# layer_norm_epsilon comes from the config's layer_norm_eps (block_options).
BLOCK_OPTION_FIELDS = dict(
    num_layers="num_hidden_layers", num_heads="num_attention_heads",
    intermediate_size="intermediate_size", hidden_act="hidden_act",
    hidden_dropout="hidden_dropout_prob", attention_dropout="attention_probs_dropout_prob",
    layer_norm_type="layer_norm_type", residual_attention="residual_attention",
    use_running_mean="use_running_mean", head_scale_position="normformer_head_scale_position",
    use_residual_scale="normformer_residual_scale", initializer_range="initializer_range",
)


class JsonConfig:
    """JSON file I/O for the dataclass configs (BertConfig, EtcConfig): `from_dict`,
    `from_json_file`, `to_dict`, `to_json_file`. Subclasses set `file_description`,
    `required_fields` and `ignored_fields`."""

    file_description = "config file"
    required_fields = ()  # keys a file must have (the dataclass fields without default)
    ignored_fields = ()  # keys accepted and dropped (released configs' unused extras)
    # Whether a file without residual_attention leaves it unstated (None): BERT and ETC
    # releases ship the same file for vanilla and RealFormer weights. A family whose
    # files always say (a causal LM) takes the dataclass default instead.
    residual_attention_may_be_unstated = True

    @classmethod
    def from_dict(cls, values, source="config"):
        """The config of a JSON object `values`; every problem a ConfigError naming
        `source` and the field (unknown fields with the closest known name)."""
        if not isinstance(values, dict):
            raise ConfigError(f"{source}: expected a JSON object, got {type(values).__name__}")
        known = [f.name for f in dataclasses.fields(cls)]
        values = check_field_names(values, known, cls.ignored_fields, source)
        for name in cls.required_fields:
            if name not in values:
                raise ConfigError(f"{source}: the required field {name} is missing")
        # Google BERT and RealFormer releases ship the same eleven-field file, so a file
        # that omits residual_attention says nothing about it: None, unstated
        # (`variant_evidence` decides from the weights when weights are loaded).
        if cls.residual_attention_may_be_unstated:
            values = {"residual_attention": None, **values}
        try:
            return cls(**values)
        except ConfigError as e:
            raise ConfigError(f"{source}: {e}") from None

    @classmethod
    def from_json_file(cls, path):
        return cls.from_dict(cls._read_json_file(path), source=str(path))

    @classmethod
    def _read_json_file(cls, path):
        if not gfile().exists(path):
            raise ConfigError(f"{cls.file_description} {path} does not exist")
        return read_json_file(path)

    def to_dict(self):
        return copy.deepcopy(dataclasses.asdict(self))

    def to_json_string(self):
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path):
        with atomic_output(path) as f:
            f.write(self.to_json_string())


DEFAULT_LAYER_NORM_EPS = 1e-12  # BERT's


def _keyword(default):
    return dataclasses.field(default=default, kw_only=True)


@dataclasses.dataclass
class EncoderConfig(JsonConfig):
    """The fields BertConfig and EtcConfig share, their validation, and the transformer
    block options they set.

    The encoder sizes come first and positionally, in the original BertConfig's order;
    the RealFormer / NormFormer switches are keyword-only (the original had none).
    A subclass declares its own fields after these, names them in `positive_fields`,
    `non_negative_fields`, `bool_fields`, `string_fields` for the common checks, and
    adds its own in `_validate_own`.

    Example:
    >>> from realformer_tf.models.bert.config import BertConfig
    >>> BertConfig(100, 64, 2, 4, 128, layer_norm_type="pre").block_options()["head_scale_position"]
    'before_projection'
    """

    required_fields = ("vocab_size",)
    option_fields = {}  # block options a subclass sets from fields of its own: {option: field}
    positive_fields = ()
    non_negative_fields = ()
    bool_fields = ()
    string_fields = ()

    vocab_size: int
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    # RealFormer. None: unstated (a file without the field); a model built from such a
    # config computes with the default, on (`uses_residual_attention`), and loading
    # weights into it asks them first (`realformer_tf.families.variant_evidence`).
    residual_attention: Optional[bool] = _keyword(True)
    use_running_mean: bool = _keyword(False)
    # Normalization: "post" (BERT), "pre", "normformer" (Pre-LN + NormFormer's three ops)
    layer_norm_type: str = _keyword("post")
    normformer_head_scale_position: str = _keyword("before_projection")
    normformer_residual_scale: bool = _keyword(False)
    # Every LayerNorm's epsilon (BERT's 1e-12; Hugging Face's config.json name).
    layer_norm_eps: float = _keyword(DEFAULT_LAYER_NORM_EPS)

    def __post_init__(self):
        self._validate()

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    @property
    def residual_attention_stated(self):
        """Whether residual_attention was stated (False for a file that omits it)."""
        return self.residual_attention is not None

    @property
    def uses_residual_attention(self):
        """What a model built from this config computes: residual_attention, with the
        package's default (on) where it is unstated."""
        return self.residual_attention is not False

    def block_options(self):
        """Keyword arguments of the encoder stacks (TransformerEncoder and ETC's
        GlobalLocalEncoder) from this config's fields (`BLOCK_OPTION_FIELDS`)."""
        options = {option: getattr(self, field) for option, field in BLOCK_OPTION_FIELDS.items()}
        return dict(options, residual_attention=self.uses_residual_attention, layer_norm_epsilon=self.layer_norm_eps)

    def _validate(self):
        """Raises ConfigError naming the first bad field."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size") + self.positive_fields:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        for name in self.non_negative_fields:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        check_size_limits(self)
        for name in ("hidden_act", "layer_norm_type", "normformer_head_scale_position") + self.string_fields:
            if not isinstance(getattr(self, name), str):
                raise ConfigError(f"{name} must be a string, got {getattr(self, name)!r}")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise ConfigError(f"{name} must be in [0, 1), got {value!r}")
        for name in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ConfigError(f"{name} must be positive, got {value!r}")
        if self.residual_attention is not None and not isinstance(self.residual_attention, bool):
            raise ConfigError(f"residual_attention must be true, false or null (unstated), got "
                              f"{self.residual_attention!r}")
        for name in ("use_running_mean", "normformer_residual_scale") + self.bool_fields:
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"hidden_size ({self.hidden_size}) is not a multiple of num_attention_heads "
                f"({self.num_attention_heads})")
        check_choice("hidden_act", self.hidden_act, ACTIVATION_NAMES, ConfigError)
        check_norm_options(self.block_options(), ConfigError, names=dict(BLOCK_OPTION_FIELDS, **self.option_fields))
        self._validate_own()

    def _validate_own(self):
        """A subclass's checks of its own fields, after the common ones."""
