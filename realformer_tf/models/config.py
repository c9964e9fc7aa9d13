"""What every model config shares: `JsonConfig` (JSON files in and out, unknown-field
errors with suggestions, size limits against hostile files) and the JSON reader."""

import copy
import dataclasses
import difflib
import json

from absl import logging

from realformer_tf.errors import ConfigError
from realformer_tf.fileio import atomic_output, gfile


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


class JsonConfig:
    """JSON file I/O for the dataclass configs (BertConfig, EtcConfig); subclasses
    define `from_dict(values, source)` and `file_description`."""

    file_description = "config file"
    ignored_fields = ()  # keys accepted and dropped (released configs' unused extras)
    # Not a field: False for a config read (from_dict / from_json_file) from a file that
    # omits residual_attention. Google BERT and RealFormer releases ship the same
    # eleven-field file, so the omission says nothing; `variant_evidence` then decides
    # from the weights when weights are loaded. The Python constructor's default (true)
    # counts as stated.
    residual_attention_stated = True

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

    @property
    def head_size(self):
        return self.hidden_size // self.num_attention_heads

    def block_options(self, layer_norm_epsilon):
        """Keyword arguments of the encoder stacks (TransformerEncoder and ETC's
        GlobalLocalEncoder) that both configs spell the same way."""
        return dict(
            num_layers=self.num_hidden_layers,
            num_heads=self.num_attention_heads,
            intermediate_size=self.intermediate_size,
            hidden_act=self.hidden_act,
            hidden_dropout=self.hidden_dropout_prob,
            attention_dropout=self.attention_probs_dropout_prob,
            layer_norm_type=self.layer_norm_type,
            residual_attention=self.residual_attention,
            use_running_mean=self.use_running_mean,
            head_scale_position=self.normformer_head_scale_position,
            use_residual_scale=self.normformer_residual_scale,
            initializer_range=self.initializer_range,
            layer_norm_epsilon=layer_norm_epsilon,
        )
