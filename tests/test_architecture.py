"""The package's shape as docs/ARCHITECTURE.md states it: tiers, no import cycle (every
import statement counted, and the package `__init__`s an import runs), at most 8 root modules, no module over 450 lines, no script
on absl's global FLAGS; and the public import paths the README shows."""

import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
import check_architecture  # noqa: E402


def test_package_shape_has_no_violations():
    assert check_architecture.violations() == []


def test_checker_sees_cycles_and_upward_imports():
    # The checker itself, on a made-up graph: a cycle and an upward edge are found.
    assert check_architecture.cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert check_architecture.tier("layers.attention") < check_architecture.tier("models.bert.model")
    with pytest.raises(KeyError, match="in no tier"):
        check_architecture.tier("nowhere")


def test_checker_counts_the_package_inits_an_import_runs():
    # checkpoints.bert -> hf.reading runs hf/__init__, which imports hf.writing, which
    # imports checkpoints.bert: a cycle through a package __init__ (the one this package
    # had); a package importing its own children is none.
    known = {"c": "c/__init__.py", "c.b": "c/b.py", "c.h": "c/h/__init__.py", "c.h.r": "c/h/r.py",
             "c.h.w": "c/h/w.py", "f": "f/__init__.py", "f.x": "f/x.py", "f.y": "f/y.py"}
    explicit = {"c.b": {"c.h.r"}, "c.h": {"c.h.r", "c.h.w"}, "c.h.w": {"c.b"}, "f": {"f.x", "f.y"}, "f.x": {"f.y"}}
    edges = {m: explicit.get(m, set()) | (check_architecture.parents(m) & set(known)) for m in known}
    assert check_architecture.package_cycles(edges, known) == [["c.b", "c.h", "c.h.r", "c.h.w"]]
    del explicit["c.h.w"]
    edges = {m: explicit.get(m, set()) | (check_architecture.parents(m) & set(known)) for m in known}
    assert check_architecture.package_cycles(edges, known) == []


def test_checker_sees_absl_global_flags(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("from absl import flags\n"
                      "flags.DEFINE_string('a', None, 'global')\n"
                      "def define_flags(fv):\n"
                      "    flags.DEFINE_integer('b', 1, 'own', flag_values=fv)\n"
                      "    flags.mark_flag_as_required('b')\n"
                      "FLAGS = flags.FLAGS\n")
    assert check_architecture.global_flag_uses(str(script)) == [2, 5, 6]


@pytest.mark.parametrize("module, names", [
    ("realformer_tf.modeling", ["BertConfig", "BertModel", "BertPretrainingModel", "BertClassifierModel",
                                "BertSquadModel", "CheckpointError", "ConfigError", "transformer_model",
                                "get_assignment_map_from_checkpoint", "gelu", "get_shape_list"]),
    ("realformer_tf.optimization", ["create_optimizer", "AdamW", "WarmupPolynomialDecay"]),
    ("realformer_tf.etc_modeling", ["EtcConfig", "EtcModel", "EtcClassifierModel", "EtcPretrainingModel"]),
    ("realformer_tf.layers", ["TransformerEncoder", "ResidualMultiHeadAttention", "TransformerEncoderBlock"]),
])
def test_public_import_paths(module, names):
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert not missing, f"{module} lacks {missing}"


def test_facades_only_re_export():
    from realformer_tf import etc_modeling, modeling, optimization
    from realformer_tf.models.bert.model import BertModel
    from realformer_tf.models.etc.model import EtcModel
    from realformer_tf.training.optimization import AdamW

    assert modeling.BertModel is BertModel and etc_modeling.EtcModel is EtcModel
    assert optimization.AdamW is AdamW
