"""The family seam: the models carry no checkpoint I/O; `realformer_tf.checkpoints.bert`
/ `.etc_official` name their weights (one name map each: the weights' paths) and hold
the one head-prefix table per family, importing no model, family or job; each family is
one object that builds its models (one builder) and owns their checkpoints."""

import numpy as np
import pytest

import helpers_data as h
from realformer_tf import etc_modeling, modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import etc_official, hf
from realformer_tf.families import KINDS, family_of, get_family

BERT_CLASSES = {"encoder": modeling.BertModel, "pretraining": modeling.BertPretrainingModel,
                "classifier": modeling.BertClassifierModel, "squad": modeling.BertSquadModel}


def test_models_carry_no_checkpoint_io():
    for cls in list(BERT_CLASSES.values()) + [etc_modeling.EtcModel, etc_modeling.EtcClassifierModel]:
        for name in ("load_bert_checkpoint", "save_bert_checkpoint", "save_hf_folder",
                     "bert_checkpoint_variables", "load_etc_checkpoint", "etc_checkpoint_variables",
                     "hf_architecture", "_head_prefixes"):
            assert not hasattr(cls, name), f"{cls.__name__}.{name}"


def test_one_head_prefix_table_per_family():
    for module, model_type in ((bert_checkpoint, "bert"), (etc_official, "etc")):
        family = get_family(model_type)
        assert family.name == model_type and family.head_prefixes is module.HEAD_PREFIXES
        assert set(module.HEAD_PREFIXES) == set(KINDS)
    assert set(hf.HF_ARCHITECTURES) == set(KINDS)


def test_checkpoints_import_no_model_family_or_job():
    import ast
    import pathlib

    import realformer_tf.checkpoints as package

    for path in pathlib.Path(package.__file__).parent.rglob("*.py"):
        source = path.read_text()
        assert "build_model" not in source and "print(" not in source, path
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [f"{node.module}.{alias.name}" for alias in node.names]
                for module in modules:  # configs are data; models, families and jobs are not
                    assert not module.startswith(("realformer_tf.families", "realformer_tf.jobs")), (path, module)
                    assert not (module.startswith("realformer_tf.models") and ".config" not in module), (path, module)


@pytest.mark.parametrize("kind", KINDS)
def test_bert_variables_name_every_weight_and_the_heads_by_the_table(kind):
    family = get_family("bert")
    model = family.build_model(h.tiny_config(), kind, num_labels=3)
    assert type(model) is BERT_CLASSES[kind] and not model.built
    names = bert_checkpoint.bert_variables(model)  # builds from the config
    assert bert_checkpoint.model_kind(model) == kind
    assert model.built and {id(v) for v in names.values()} == {id(v) for v in model.weights}
    encoder = bert_checkpoint.bert_variables(model, include_heads=False)
    assert all(n.startswith("bert/") for n in encoder)
    heads = set(names) - set(encoder)
    prefixes = bert_checkpoint.HEAD_PREFIXES[kind]
    assert all(n.startswith(prefixes) for n in heads)
    assert all(any(n.startswith(p) for n in heads) for p in prefixes)  # each prefix names a head
    assert family_of(model) is family and family.named_variables(model).keys() == names.keys()


def test_etc_variables_and_the_dispatch():
    config = etc_modeling.EtcConfig(**h.tiny_etc_config_dict())
    model = get_family("etc").build_model(config, "classifier", num_labels=2)
    assert family_of(model) is get_family("etc") and etc_official.model_kind(model) == "classifier"
    names = family_of(model).named_variables(model)
    assert names.keys() == etc_official.etc_variables(model).keys()
    assert len(names) == len(model.weights)
    heads = [n for n in names if not n.startswith("etc/")]
    assert heads and all(n.startswith(etc_official.HEAD_PREFIXES["classifier"]) for n in heads)
    with pytest.raises(TypeError, match="not a BertModel"):
        bert_checkpoint.model_kind(model)
    with pytest.raises(TypeError, match="not an EtcModel"):
        etc_official.model_kind(modeling.BertModel(h.tiny_config()))


def test_round_trip_through_the_functions(tmp_path):
    """save then load: the values of every original name come back (compared as arrays)."""
    source = modeling.BertClassifierModel(h.tiny_config(), num_labels=2)
    rng = np.random.default_rng(3)
    want = {}
    for name, var in bert_checkpoint.bert_variables(source).items():
        want[name] = rng.normal(0, 0.1, var.shape).astype(np.float32)
        var.assign(want[name])
    prefix = bert_checkpoint.save_bert_checkpoint(source, str(tmp_path / "bert_model.ckpt"))
    target = modeling.BertClassifierModel(h.tiny_config(), num_labels=2)
    bert_checkpoint.load_bert_checkpoint(target, prefix)
    for name, var in bert_checkpoint.bert_variables(target).items():
        np.testing.assert_array_equal(var.numpy(), want[name], err_msg=name)


def test_one_builder_per_family():
    from realformer_tf.jobs import convert
    from realformer_tf.serving import export

    assert not hasattr(convert, "build_model") and not hasattr(export, "build_model")
    squad = get_family("bert").build_model(h.tiny_config(), "squad")
    assert squad.bert.pooler.trainable is False  # the family's builder: the span head has no pooler gradient
