"""realformer_tf.models.variants: the one table of named variants."""

import numpy as np
import pytest

import helpers_data as h
from realformer_tf import modeling
from realformer_tf.errors import UsageError
from realformer_tf.models import variants
from realformer_tf.models.etc.config import EtcConfig

# The documented table (models/variants.py docstring), written out independently.
EXPECTED = {
    "bert": dict(residual_attention=False),
    "realformer": dict(residual_attention=True),
    "realformer_mean": dict(residual_attention=True, use_running_mean=True),
    "pre_ln": dict(residual_attention=False, layer_norm_type="pre"),
    "normformer": dict(residual_attention=False, layer_norm_type="normformer"),
    "normformer_residual_scale": dict(residual_attention=False, layer_norm_type="normformer",
                                      normformer_residual_scale=True),
    "realformer_normformer": dict(residual_attention=True, layer_norm_type="normformer"),
}
OFF = dict(residual_attention=False, use_running_mean=False, layer_norm_type="post",
           normformer_residual_scale=False)
SIZES = dict(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=16, type_vocab_size=2)


def test_the_fields_are_exactly_those_documented():
    assert list(variants.VARIANTS) == list(EXPECTED)
    for name, fields in EXPECTED.items():
        variant = variants.get_variant(name)
        assert dict(variant.fields) == fields, name
        assert variant.settings == {**OFF, **fields}, name
        assert variant.description and "\n" not in variant.description
    assert len({v.title for v in variants.VARIANTS.values()}) == len(EXPECTED)


def test_unknown_name_is_a_usage_error_naming_the_choices():
    with pytest.raises(UsageError, match="unknown variant 'postln'; choose from bert, realformer"):
        variants.get_variant("postln")
    with pytest.raises(UsageError, match="realformer_normformer or 'all'"):
        variants.parse_names("bert,nope")
    with pytest.raises(UsageError, match=r"\(none given\)"):
        variants.parse_names(" , ")
    assert variants.parse_names("all") == list(EXPECTED)
    assert variants.parse_names("pre_ln, bert") == ["pre_ln", "bert"]


def test_old_names_map_to_the_new_ones():
    assert variants.canonical_name("post") == "bert"
    assert variants.canonical_name("pre") == "pre_ln"
    assert variants.canonical_name("bert_post_ln") == "bert"
    assert variants.canonical_name("vanilla") == "bert"
    assert variants.canonical_name("realformer_running_mean") == "realformer_mean"
    assert variants.canonical_name("realformer") == "realformer"
    with pytest.raises(UsageError):
        variants.canonical_name("nope")
    # an old name is no flag value
    with pytest.raises(UsageError):
        variants.get_variant("post")


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_variant_builds_and_runs(name):
    config = variants.variant_config(name, **SIZES)
    assert isinstance(config, modeling.BertConfig)
    for field, value in {**OFF, **EXPECTED[name]}.items():
        assert getattr(config, field) == value, field
    assert config.hidden_size == 16 and config.vocab_size == 50
    model = modeling.BertModel(config)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, size=(2, 8)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 5:] = 0
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}, training=False)
    sequence = np.asarray(out["sequence_output"])
    assert sequence.shape == (2, 8, 16)
    assert np.all(np.isfinite(sequence))


def test_apply_variant_resets_the_other_switches():
    config = variants.variant_config("realformer_normformer", **SIZES)
    config = variants.apply_variant(config, "normformer_residual_scale")
    assert (config.residual_attention, config.layer_norm_type, config.normformer_residual_scale) == (
        False, "normformer", True)
    back = variants.apply_variant(config, "realformer_mean")
    assert (back.residual_attention, back.use_running_mean, back.layer_norm_type,
            back.normformer_residual_scale) == (True, True, "post", False)
    assert back.hidden_size == 16 and back.max_position_embeddings == 16
    assert variants.apply_variant(dict(hidden_size=8, use_running_mean=True), "bert") == dict(hidden_size=8, **OFF)
    with pytest.raises(UsageError, match="set by the variant"):
        variants.variant_config("bert", layer_norm_type="pre", **SIZES)
    with pytest.raises(UsageError, match="no variant switches"):
        variants.apply_variant(object(), "bert")


def test_apply_variant_to_an_etc_config():
    etc = EtcConfig(**h.tiny_etc_config_dict(residual_attention=False))
    real = variants.apply_variant(etc, "realformer")
    assert isinstance(real, EtcConfig)
    assert real.residual_attention and real.layer_norm_type == "post" and real.local_radius == etc.local_radius
    assert variants.apply_variant(etc, "normformer").layer_norm_type == "normformer"
