"""BertConfig: the original bert_config.json fields plus the RealFormer / NormFormer
switches; JSON I/O, defaults and clear errors."""

import json

import pytest

from realformer_tf import modeling
from realformer_tf.errors import ConfigError
from realformer_tf.models.bert.config import BertConfig

# An official RealFormer / BERT bert_config.json: exactly the original eleven fields.
OFFICIAL = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 512,
    "initializer_range": 0.02,
    "intermediate_size": 2048,
    "max_position_embeddings": 512,
    "num_attention_heads": 8,
    "num_hidden_layers": 4,
    "type_vocab_size": 2,
    "vocab_size": 30522,
}


def write_json(tmp_path, values, name="bert_config.json"):
    path = tmp_path / name
    path.write_text(values if isinstance(values, str) else json.dumps(values))
    return str(path)


def test_modeling_reexports_config():
    assert modeling.BertConfig is BertConfig
    assert issubclass(modeling.ConfigError, ValueError)


def test_official_realformer_config_loads_as_realformer(tmp_path):
    assert len(OFFICIAL) == 11
    config = BertConfig.from_json_file(write_json(tmp_path, OFFICIAL))
    for key, value in OFFICIAL.items():
        assert getattr(config, key) == value, key
    assert config.residual_attention is None and config.uses_residual_attention  # unstated: computes RealFormer
    assert config.use_running_mean is False
    assert config.layer_norm_type == "post"
    assert config.normformer_head_scale_position == "before_projection"
    assert config.normformer_residual_scale is False
    assert config.head_size == 64
    text = config.describe()
    assert "RealFormer" in text
    assert "residual attention on" in text
    assert "post-LN" in text
    assert "running mean off" in text
    assert "4L/8H/512/2048" in text


def test_vanilla_bert_config_and_describe(tmp_path):
    config = BertConfig.from_json_file(write_json(tmp_path, dict(OFFICIAL, residual_attention=False)))
    assert config.residual_attention is False
    text = config.describe()
    assert text.startswith("BERT")
    assert "residual attention off" in text
    assert "RealFormer" not in text


def test_official_realformer_running_mean_field(tmp_path):
    # The official RealFormer config's one extra field.
    config = BertConfig.from_json_file(write_json(tmp_path, dict(OFFICIAL, use_running_mean=True)))
    assert config.use_running_mean is True and config.uses_residual_attention is True
    assert "running mean on" in config.describe()


def test_describe_normformer_variants():
    config = BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2,
                        layer_norm_type="normformer",
                        normformer_head_scale_position="after_projection",
                        normformer_residual_scale=True)
    text = config.describe()
    assert "NormFormer" in text and "RealFormer" in text
    assert "after_projection" in text
    assert "residual scale on" in text
    vanilla = BertConfig(vocab_size=10, hidden_size=8, num_attention_heads=2,
                         layer_norm_type="normformer", residual_attention=False)
    assert "residual attention off" in vanilla.describe()
    assert "NormFormer" in vanilla.describe() and "RealFormer" not in vanilla.describe()
    assert "pre-LN" in BertConfig(vocab_size=10, layer_norm_type="pre").describe()


def test_json_round_trip(tmp_path):
    config = BertConfig(
        vocab_size=53, hidden_size=18, num_hidden_layers=3, num_attention_heads=3,
        intermediate_size=29, hidden_act="gelu_exact", hidden_dropout_prob=0.05,
        attention_probs_dropout_prob=0.0, max_position_embeddings=13, type_vocab_size=3,
        initializer_range=0.05, residual_attention=False, use_running_mean=True,
        layer_norm_type="normformer", normformer_head_scale_position="after_projection",
        normformer_residual_scale=True,
    )
    text = config.to_json_string()
    assert json.loads(text) == config.to_dict()
    path = write_json(tmp_path, text)
    again = BertConfig.from_json_file(path)
    assert again == config
    assert again.to_json_string() == text

    path2 = str(tmp_path / "written.json")
    config.to_json_file(path2)
    assert BertConfig.from_json_file(path2) == config
    assert BertConfig.from_dict(config.to_dict()) == config
    # to_dict is a copy.
    d = config.to_dict()
    d["vocab_size"] = 1
    assert config.vocab_size == 53


def test_unknown_field_is_named(tmp_path):
    path = write_json(tmp_path, dict(OFFICIAL, residual_atention=True, foo=1))
    with pytest.raises(ConfigError) as err:
        BertConfig.from_json_file(path)
    message = str(err.value)
    assert "residual_atention" in message and "foo" in message
    assert "unknown" in message
    assert "bert_config.json" in message  # which file
    with pytest.raises(TypeError, match="layers"):
        BertConfig(vocab_size=10, layers=3)


def test_hidden_size_not_divisible_by_heads():
    with pytest.raises(ConfigError) as err:
        BertConfig(vocab_size=10, hidden_size=20, num_attention_heads=3)
    assert "hidden_size" in str(err.value) and "num_attention_heads" in str(err.value)
    assert "20" in str(err.value)


def test_bad_layer_norm_type(tmp_path):
    with pytest.raises(ConfigError, match="layer_norm_type") as err:
        BertConfig.from_json_file(write_json(tmp_path, dict(OFFICIAL, layer_norm_type="sandwich")))
    assert "sandwich" in str(err.value)
    assert "normformer" in str(err.value)  # the allowed values are listed


def test_bad_head_scale_position_and_residual_scale():
    with pytest.raises(ConfigError, match="normformer_head_scale_position"):
        BertConfig(vocab_size=10, layer_norm_type="normformer",
                   normformer_head_scale_position="inside")
    with pytest.raises(ConfigError, match="normformer_residual_scale"):
        BertConfig(vocab_size=10, normformer_residual_scale=True)


def test_bad_values_name_the_field():
    with pytest.raises(ConfigError, match="hidden_act"):
        BertConfig(vocab_size=10, hidden_act="gelu_new")
    with pytest.raises(ConfigError, match="num_hidden_layers"):
        BertConfig(vocab_size=10, num_hidden_layers=0)
    with pytest.raises(ConfigError, match="vocab_size"):
        BertConfig(vocab_size="30522")
    with pytest.raises(ConfigError, match="hidden_dropout_prob"):
        BertConfig(vocab_size=10, hidden_dropout_prob=1.5)
    with pytest.raises(ConfigError, match="residual_attention"):
        BertConfig(vocab_size=10, residual_attention="false")


def test_invalid_json_file(tmp_path):
    path = write_json(tmp_path, '{"vocab_size": 10,')
    with pytest.raises(ConfigError, match="not valid JSON") as err:
        BertConfig.from_json_file(path)
    assert path in str(err.value)
    with pytest.raises(ConfigError, match="JSON object"):
        BertConfig.from_json_file(write_json(tmp_path, "[1, 2]", name="list.json"))


def test_config_not_utf8(tmp_path):
    path = tmp_path / "bert_config.json"
    path.write_bytes('{"vocab_size": 10, "comment": "caf\u00e9"}'.encode("latin-1"))
    with pytest.raises(ConfigError, match="bert_config.json is not UTF-8 text"):
        BertConfig.from_json_file(str(path))


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent" / "bert_config.json")
    with pytest.raises(ConfigError, match="does not exist") as err:
        BertConfig.from_json_file(path)
    assert path in str(err.value)


def test_missing_vocab_size(tmp_path):
    values = {k: v for k, v in OFFICIAL.items() if k != "vocab_size"}
    with pytest.raises(ConfigError, match="vocab_size"):
        BertConfig.from_json_file(write_json(tmp_path, values))
    with pytest.raises(ConfigError, match="vocab_size"):
        BertConfig.from_dict(values)


def test_model_accepts_config_dict():
    model = modeling.BertModel(dict(vocab_size=11, hidden_size=6, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=7))
    assert isinstance(model.config, BertConfig)
    assert model.config.uses_residual_attention is True
    with pytest.raises(ConfigError, match="bogus"):
        modeling.BertModel(dict(vocab_size=11, bogus=1))


# The six extra keys of the multilingual / Chinese Google BERT releases' configs, with
# their released values (multi_cased_L-12_H-768_A-12/bert_config.json).
RELEASE_EXTRAS = {
    "directionality": "bidi",
    "pooler_fc_size": 768,
    "pooler_num_attention_heads": 12,
    "pooler_num_fc_layers": 3,
    "pooler_size_per_head": 128,
    "pooler_type": "first_token_transform",
}


@pytest.mark.parametrize("field", sorted(RELEASE_EXTRAS))
def test_each_released_extra_field_loads_and_is_ignored(field, tmp_path, caplog):
    values = dict(OFFICIAL, residual_attention=False, **{field: RELEASE_EXTRAS[field]})
    with caplog.at_level("WARNING"):
        config = BertConfig.from_json_file(write_json(tmp_path, values))
    assert config == BertConfig.from_dict(dict(OFFICIAL, residual_attention=False))
    lines = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert len(lines) == 1 and field in lines[0] and "bert_config.json" in lines[0]


def test_multilingual_release_config_loads_with_one_line(tmp_path, caplog):
    values = dict(OFFICIAL, vocab_size=119547, hidden_size=768, num_attention_heads=12,
                  num_hidden_layers=12, intermediate_size=3072, **RELEASE_EXTRAS)
    with caplog.at_level("WARNING"):
        config = BertConfig.from_json_file(write_json(tmp_path, values))
    assert config.vocab_size == 119547 and config.type_vocab_size == 2
    lines = [r.getMessage() for r in caplog.records if "ignoring" in r.getMessage()]
    assert len(lines) == 1
    assert all(field in lines[0] for field in RELEASE_EXTRAS)
    assert not any(field in config.to_json_string() for field in RELEASE_EXTRAS)


def test_typo_of_a_known_field_names_the_field_file_and_suggestion(tmp_path):
    path = write_json(tmp_path, dict(OFFICIAL, num_hiden_layers=3, pooler_typ="x"))
    with pytest.raises(ConfigError) as err:
        BertConfig.from_json_file(path)
    message = str(err.value)
    assert "num_hiden_layers (did you mean num_hidden_layers?)" in message
    assert path in message
    # A typo of an ignored release key is not silently ignored either.
    assert "pooler_typ" in message
