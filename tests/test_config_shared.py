"""BertConfig and EtcConfig share one base (EncoderConfig): one validation of the
RealFormer / NormFormer fields (the layers' own check, raising ConfigError with the
JSON field names), one from_dict, and one config-field -> block-option table."""

import pytest

from realformer_tf.errors import ConfigError
from realformer_tf.etc_modeling import EtcConfig
from realformer_tf.layers import TransformerEncoder
from realformer_tf.layers.etc import GlobalLocalEncoder
from realformer_tf.layers.transformer import BLOCK_OPTION_NAMES, BLOCK_OPTIONS, check_norm_options
from realformer_tf.modeling import BertConfig
from realformer_tf.models.config import BLOCK_OPTION_FIELDS

CONFIGS = [BertConfig, EtcConfig]


def test_every_block_option_has_one_config_field():
    # NormFormer's switches one by one are the causal LM config's (CausalLMConfig.option_fields);
    # BERT and ETC configs leave them to layer_norm_type.
    # Admin's residual scale and the cross-attention path are the translation config's.
    from realformer_tf.layers.transformer import NORMFORMER_SWITCHES, TRANSLATION_OPTIONS
    from realformer_tf.models.causal_lm.config import CausalLMConfig

    assert set(BLOCK_OPTION_FIELDS) == {"num_layers"} | set(BLOCK_OPTION_NAMES) - {"layer_norm_epsilon"} - set(
        NORMFORMER_SWITCHES) - set(TRANSLATION_OPTIONS)
    assert set(CausalLMConfig.option_fields) == set(NORMFORMER_SWITCHES)
    # The JSON names stay as released bert_config.json files spell them.
    assert BLOCK_OPTION_FIELDS["use_residual_scale"] == "normformer_residual_scale"
    assert BLOCK_OPTION_FIELDS["head_scale_position"] == "normformer_head_scale_position"


@pytest.mark.parametrize("cls", CONFIGS)
def test_block_options_build_the_stack_unchanged(cls):
    config = cls(vocab_size=10, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                 intermediate_size=16, layer_norm_type="normformer", normformer_residual_scale=True,
                 normformer_head_scale_position="after_projection", use_running_mean=True)
    options = config.block_options()
    stack = (TransformerEncoder if cls is BertConfig else GlobalLocalEncoder)(**options)
    block = stack.blocks[1]
    for option, field in BLOCK_OPTION_FIELDS.items():
        if option != "num_layers":
            assert getattr(block, option) == getattr(config, field), option
    assert stack.get_config()["use_residual_scale"] is True


@pytest.mark.parametrize("cls", CONFIGS)
@pytest.mark.parametrize("field, value, message", [
    ("layer_norm_type", "sandwich", "layer_norm_type='sandwich' is not one of post, pre, normformer"),
    ("normformer_head_scale_position", "inside",
     "normformer_head_scale_position='inside' is not one of before_projection, after_projection"),
    ("normformer_residual_scale", True,
     "normformer_residual_scale is a NormFormer option: it needs layer_norm_type='normformer'"),
    ("hidden_act", "swoosh", "hidden_act='swoosh' is not one of"),
])
def test_both_configs_give_the_same_config_error(cls, field, value, message):
    with pytest.raises(ConfigError) as e:
        cls.from_dict({"vocab_size": 10, field: value}, source="c.json")
    assert str(e.value).startswith("c.json: " + message), str(e.value)


def test_layers_raise_value_error_from_the_same_check():
    with pytest.raises(ValueError, match="layer_norm_type='sandwich' is not one of") as e:
        check_norm_options(dict(layer_norm_type="sandwich"))
    assert not isinstance(e.value, ConfigError)
    with pytest.raises(ValueError, match="use_residual_scale is a NormFormer option"):
        TransformerEncoder(num_layers=1, num_heads=2, intermediate_size=4, use_residual_scale=True)
    with pytest.raises(ValueError, match="head_scale_position='x' is not one of"):
        GlobalLocalEncoder(num_layers=1, num_heads=2, intermediate_size=4, head_scale_position="x")


@pytest.mark.parametrize("cls", CONFIGS)
def test_from_dict_unknown_and_required_fields(cls):
    with pytest.raises(ConfigError, match=r"c.json: unknown field\(s\) layer_norm_typ \(did you mean layer_norm_type\?\)"):
        cls.from_dict({"vocab_size": 10, "layer_norm_typ": "pre"}, source="c.json")
    with pytest.raises(ConfigError, match="c.json: the required field vocab_size is missing"):
        cls.from_dict({"hidden_size": 8, "num_attention_heads": 2}, source="c.json")
    config = cls.from_dict({"vocab_size": 10}, source="c.json")
    assert config.residual_attention_stated is False
    assert cls.from_dict(config.to_dict()) == config


def test_positional_arguments_are_the_shared_encoder_sizes():
    """BertConfig keeps the original eleven positional arguments; EtcConfig takes the
    eight it shares with it positionally and the rest by keyword."""
    bert = BertConfig(30, 64, 2, 4, 128, "relu", 0.2, 0.3, 256, 3, 0.05)
    assert (bert.max_position_embeddings, bert.type_vocab_size, bert.initializer_range) == (256, 3, 0.05)
    etc = EtcConfig(30, 64, 2, 4, 128, "relu", 0.2, 0.3, local_radius=5)
    assert (etc.hidden_size, etc.attention_probs_dropout_prob, etc.local_radius) == (64, 0.3, 5)
    with pytest.raises(TypeError):
        BertConfig(30, 64, 2, 4, 128, "relu", 0.2, 0.3, 256, 3, 0.05, False)  # switches: by keyword
    assert BLOCK_OPTIONS["layer_norm_type"] == BertConfig(10).layer_norm_type == EtcConfig(10).layer_norm_type


def test_block_configs_keep_the_keys_saved_keras_files_have():
    """The layer keywords did not change: a block's get_config has the keys files saved
    before had, and from_config of such a dict rebuilds it."""
    from realformer_tf.layers import TransformerEncoderBlock

    saved = dict(num_heads=2, intermediate_size=8, hidden_act="relu", hidden_dropout=0.0,
                 attention_dropout=0.0, layer_norm_type="normformer", residual_attention=True,
                 use_running_mean=True, layer_index=1, head_scale_position="after_projection",
                 use_residual_scale=True, initializer_range=0.03, layer_norm_epsilon=1e-6,
                 name="layer_1")
    block = TransformerEncoderBlock.from_config(saved)
    config = block.get_config()
    assert {k: config[k] for k in saved} == saved
    assert {"kernel_initializer", "bias_initializer", "kernel_regularizer"} <= set(config)
