"""Untrusted weights, configs and serving inputs (issue 30's adversarial probes).

Every damaged or hostile file ends the scripts with exit 1 and one `error:` line naming
it (never a signal, a traceback, a huge allocation, or success with wrong numbers);
serving refuses out-of-range inputs with an InvalidArgumentError naming the input.
File cases run `convert_checkpoint.py` in a subprocess (a crash must not take pytest
down); the rest run in-process.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
import zipfile

import keras
import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import etc_official
from realformer_tf.families import family_of
from realformer_tf import etc_modeling, modeling
from realformer_tf.jobs import convert
from realformer_tf.serving import signatures, text_encoder
from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.errors import CheckpointError
from realformer_tf.errors import ConfigError
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.errors import UserError
from realformer_tf.families import get_family
from realformer_tf.jobs.runner import RunOptions

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "hf_bert_model_gelu_new")
WEIGHTS = "model.safetensors"


# -- helpers -------------------------------------------------------------------------------
def _folder(tmp_path, name="hf"):
    folder = tmp_path / name
    shutil.copytree(FIXTURE, folder)
    return folder


def _split(path):
    """(header dict, data bytes) of a safetensors file."""
    raw = open(path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def _write(path, header, data, length=None):
    body = header if isinstance(header, bytes) else json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(body) if length is None else length).to_bytes(8, "little") + body + data)


def _edit_weights(folder, edit):
    path = folder / WEIGHTS
    header, data = _split(path)
    result = edit(header, data)
    _write(path, *(result if isinstance(result, tuple) else (result, data)))


def _first_tensor(header, suffix="word_embeddings.weight"):
    return next(k for k in header if k.endswith(suffix))


def _edit_config(folder, **values):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def _convert(tmp_path, folder):
    return h.run_script("convert_checkpoint.py", f"--input_checkpoint={folder}",
                        f"--output_checkpoint={tmp_path / 'out' / 'ckpt'}", "--task=encoder", timeout=300)


# -- damaged / hostile Hugging Face folders (subprocess: a crash must not kill pytest) -----
def _lfs_pointer(folder):
    (folder / WEIGHTS).write_text("version https://git-lfs.github.com/spec/v1\n"
                                  "oid sha256:" + "0" * 64 + "\nsize 123456\n")


def _index(folder, shard):
    header, _ = _split(folder / WEIGHTS)
    os.remove(folder / WEIGHTS)
    (folder / (WEIGHTS + ".index.json")).write_text(json.dumps(
        {"weight_map": {name: shard for name in header if name != "__metadata__"}}))


def _truncate(folder):
    path = folder / WEIGHTS
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def _offsets_past_end(header, data):
    name = _first_tensor(header)
    start, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [start + len(data), end + len(data)]
    return header


def _no_shape(header, data):
    del header[_first_tensor(header)]["shape"]
    return header


def _relabel_i32(header, data):
    header[_first_tensor(header)]["dtype"] = "I32"  # same byte size as F32
    return header


def _nan(header, data):
    name = _first_tensor(header)
    start, _ = header[name]["data_offsets"]
    data = bytearray(data)
    data[start:start + 4] = np.array([np.nan], np.float32).tobytes()
    return header, bytes(data)


def _deep_json(folder):
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)


FOLDER_CASES = [
    # (id, how the folder is damaged, substrings of the error line)
    ("git-lfs-pointer", _lfs_pointer, [WEIGHTS, "git-lfs pointer"]),
    ("index-names-etc-passwd", lambda f: _index(f, "/etc/passwd"), ["/etc/passwd", "plain file names"]),
    ("index-names-parent-dir", lambda f: _index(f, "../x.safetensors"), ["../x.safetensors", "plain file names"]),
    ("index-shard-missing", lambda f: _index(f, "model-00001-of-00002.safetensors"),
     ["model-00001-of-00002.safetensors", "not in"]),
    ("truncated", _truncate, [WEIGHTS, "truncated?"]),
    ("truncated-inside-header", lambda f: _write(f / WEIGHTS, b'{"a": 1', b"", length=4096),
     [WEIGHTS, "ends inside its 4096-byte header"]),
    ("data-offsets-past-end", lambda f: _edit_weights(f, _offsets_past_end), [WEIGHTS, "outside the file"]),
    ("header-is-a-list", lambda f: _edit_weights(f, lambda hd, d: ([1, 2], d)), [WEIGHTS, "JSON list"]),
    ("header-lacks-shape", lambda f: _edit_weights(f, _no_shape), [WEIGHTS, "lacks dtype, shape or data_offsets"]),
    ("header-length-2**64-1", lambda f: _write(f / WEIGHTS, b"{}", b"", length=2**64 - 1),
     [WEIGHTS, "header length 18446744073709551615"]),
    ("f32-relabelled-i32", lambda f: _edit_weights(f, _relabel_i32), ["word_embeddings.weight (I32)", "floating point"]),
    ("nan-weights", lambda f: _edit_weights(f, _nan), ["NaN or Inf", "word_embeddings", "allow_nonfinite=True", "--allow_nonfinite_weights"]),
    ("hf-config-layer-norm-eps-string", lambda f: _edit_config(f, layer_norm_eps="x"),
     ["config.json", "layer_norm_eps must be positive"]),
    ("hf-config-hidden-act-list", lambda f: _edit_config(f, hidden_act=["gelu"]),
     ["config.json", "hidden_act must be a string"]),
    ("hf-config-vocab-1e9", lambda f: _edit_config(f, vocab_size=10**9), ["config.json", "vocab_size=1000000000 exceeds"]),
    ("hf-config-hidden-1e6", lambda f: _edit_config(f, hidden_size=10**6), ["config.json", "hidden_size=1000000 exceeds"]),
    ("hf-config-100000-layers", lambda f: _edit_config(f, num_hidden_layers=100_000),
     ["config.json", "num_hidden_layers=100000 exceeds"]),
    ("hf-config-nested-100000-deep", _deep_json, ["config.json", "nested too deeply"]),
]


def _convert_in_process(tmp_path, folder):
    """What convert_checkpoint.py does with a folder and no --bert_config_file."""
    config = hf_checkpoint.load_bert_config(str(folder))
    return convert.convert(config, str(folder), str(tmp_path / "out" / "ckpt"), "encoder")


@pytest.mark.parametrize("damage, expected", [c[1:] for c in FOLDER_CASES], ids=[c[0] for c in FOLDER_CASES])
def test_damaged_hf_folder_is_one_user_error(tmp_path, damage, expected):
    """In-process (fast): a UserError, which the scripts print as one `error:` line and
    exit 1 (app.run_program; test_cli_errors); the next test runs the script on the cases that
    crashed or silently succeeded before."""
    folder = _folder(tmp_path)
    damage(folder)
    with pytest.raises(UserError) as e:
        _convert_in_process(tmp_path, folder)
    error = str(e.value)
    assert "\n" not in error, error
    for text in expected:
        assert text in error, (text, error)
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


# The cases that segfaulted (exit 139) or loaded wrong numbers with exit 0 before.
SCRIPT_CASES = ("git-lfs-pointer", "index-names-etc-passwd", "header-length-2**64-1", "f32-relabelled-i32")


@pytest.mark.parametrize("case", SCRIPT_CASES)
def test_damaged_hf_folder_script_exits_1_with_one_error_line(tmp_path, case):
    _, damage, expected = next(c for c in FOLDER_CASES if c[0] == case)
    folder = _folder(tmp_path)
    damage(folder)
    error = h.one_error_line(_convert(tmp_path, folder))
    for text in expected:
        assert text in error, (text, error)


def test_nonfinite_weights_load_when_the_user_opts_in(tmp_path):
    folder = _folder(tmp_path)
    _edit_weights(folder, _nan)
    config = hf_checkpoint.load_bert_config(str(folder))
    convert.convert(config, str(folder), str(tmp_path / "out" / "ckpt"), "encoder", allow_nonfinite=True)


MEASURE = ("import resource, subprocess, sys, time; t = time.time(); "
           "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
           "sys.stderr.write(p.stderr); sys.stdout.write(p.stdout); "
           "print('MAXRSS_KB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, time.time() - t); "
           "sys.exit(p.returncode)")


def test_hostile_config_within_bounds_fails_before_building(tmp_path):
    """The largest config the bounds allow (a ~300 GB model) next to a tiny checkpoint:
    the stored shapes are compared first, so it ends at once with little memory."""
    folder = _folder(tmp_path)
    _edit_config(folder, vocab_size=2**22, hidden_size=16384, num_attention_heads=16,
                 intermediate_size=65536, num_hidden_layers=512)
    cmd = [sys.executable, "-c", MEASURE, sys.executable, os.path.join(h.ROOT, "convert_checkpoint.py"),
           f"--input_checkpoint={folder}", f"--output_checkpoint={tmp_path / 'out' / 'ckpt'}", "--task=encoder"]
    proc = subprocess.run(cmd, cwd=h.ROOT, env=h.script_env(), capture_output=True, text=True, timeout=300)
    error = h.one_error_line(proc)
    assert "does not fit" in error and "word_embeddings" in error and "4194304" in error, error
    rss_kb, seconds = proc.stdout.split("MAXRSS_KB")[1].split()
    assert int(rss_kb) < 2 * 2**20, f"peak RSS {int(rss_kb) / 2**10:.0f} MB"
    assert float(seconds) < 120, seconds


# -- configs (in-process) ------------------------------------------------------------------
@pytest.mark.parametrize("field, value, expected", [
    ("hidden_act", ["gelu"], "hidden_act must be a string"),
    ("layer_norm_type", {"x": 1}, "layer_norm_type must be a string"),
    ("hidden_size", "768", "hidden_size must be a positive integer"),
    ("hidden_dropout_prob", True, "hidden_dropout_prob must be in [0, 1)"),
    ("initializer_range", float("inf"), "initializer_range must be positive"),
    ("vocab_size", 10**9, "vocab_size=1000000000 exceeds"),
    ("num_hidden_layers", 100_000, "num_hidden_layers=100000 exceeds"),
])
def test_bert_config_json_wrong_types_and_sizes(tmp_path, field, value, expected):
    path = h.write_config(tmp_path / "bert_config.json", **{field: value})
    with pytest.raises(ConfigError, match=re.escape(str(tmp_path))) as e:
        BertConfig.from_json_file(path)
    assert expected in str(e.value)


def test_etc_config_wrong_types_and_sizes():
    for overrides, expected in ((dict(vocab_size=10**9), "vocab_size=1000000000 exceeds"),
                                (dict(num_hidden_layers=100_000), "num_hidden_layers=100000 exceeds"),
                                (dict(hidden_act=["gelu"]), "hidden_act must be a string"),
                                (dict(local_radius=10**7), "local_radius=10000000 exceeds")):
        with pytest.raises(ConfigError, match="etc.json") as e:
            etc_modeling.EtcConfig.from_dict(h.tiny_etc_config_dict(**overrides), source="etc.json")
        assert expected in str(e.value)


def test_deeply_nested_and_oversized_config_files(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        BertConfig.from_json_file(str(deep))
    big = tmp_path / "big.json"
    big.write_text(" " * (17 * 2**20) + "{}")
    with pytest.raises(ConfigError, match="not a config file"):
        BertConfig.from_json_file(str(big))


# -- name-based TF checkpoints: shapes before building, dtypes and NaN on loading ---------
def _tf_checkpoint(tmp_path, config, poison=None):
    model = modeling.BertModel(config)
    variables = {name: v.numpy() for name, v in bert_checkpoint.bert_variables(model).items()}
    if poison:
        variables[poison][0, 0] = np.inf
    return ckpt.save_named_variables(str(tmp_path / "ckpt" / "bert_model.ckpt"), variables)


def test_tf_checkpoint_sizes_are_checked_before_building(tmp_path):
    """A config whose model is far larger than the checkpoint is refused from the stored
    shapes, before building; a small mismatch is left to the loader's detailed check."""
    prefix = _tf_checkpoint(tmp_path, h.tiny_config())
    family = get_family("bert")
    for overrides, expected in (
            (dict(vocab_size=2**22), f"word_embeddings (checkpoint [{h.vocab_size()}, 16], config [4194304, 16])"),
            (dict(hidden_size=4096, num_attention_heads=2), "intermediate/dense/kernel (checkpoint [16, 32], "
                                                             "config [4096, 32])"),
            (dict(num_hidden_layers=512, hidden_size=256), "2 layers (config num_hidden_layers=512)")):
        config = h.tiny_config(**overrides)
        with pytest.raises(CheckpointError, match=re.escape(prefix)) as e:
            family.check_checkpoint_fits(config, prefix)
        assert "does not fit" in str(e.value) and expected in str(e.value), str(e.value)
        model = modeling.BertModel(config)
        with pytest.raises(CheckpointError, match="does not fit"):
            bert_checkpoint.load_bert_checkpoint(model, prefix)
        assert not model.built  # refused before any weight was allocated
    family.check_checkpoint_fits(h.tiny_config(), prefix)  # the right config passes
    family.check_checkpoint_fits(h.tiny_config(intermediate_size=64), prefix)  # cheap: the loader names it


def test_tf_checkpoint_with_inf_is_refused(tmp_path):
    prefix = _tf_checkpoint(tmp_path, h.tiny_config(), poison="bert/encoder/layer_1/output/dense/kernel")
    with pytest.raises(CheckpointError, match="NaN or Inf in bert/encoder/layer_1/output/dense/kernel"):
        bert_checkpoint.load_bert_checkpoint(modeling.BertModel(h.tiny_config()), prefix)
    bert_checkpoint.load_bert_checkpoint(modeling.BertModel(h.tiny_config()), prefix, allow_nonfinite=True)


def test_etc_checkpoint_sizes_are_checked_before_building(tmp_path):
    config = etc_modeling.EtcConfig(**h.tiny_etc_config_dict())
    prefix = etc_official.save_etc_checkpoint(etc_modeling.EtcModel(config), str(tmp_path / "etc" / "etc_model.ckpt"))
    get_family("etc").check_checkpoint_fits(config, prefix)
    hostile = etc_modeling.EtcConfig(**h.tiny_etc_config_dict(vocab_size=2**22, num_hidden_layers=3))
    model = etc_modeling.EtcModel(hostile)
    with pytest.raises(CheckpointError, match="etc/embeddings/word_embeddings"):
        etc_official.load_etc_checkpoint(model, prefix)
    assert not model.built


def test_check_config_fits_reads_hf_headers(tmp_path):
    folder = str(_folder(tmp_path))
    config = hf_checkpoint.load_hf_config(folder)
    bert_checkpoint.check_checkpoint_fits(config, folder)
    with pytest.raises(CheckpointError, match="does not fit"):
        bert_checkpoint.check_checkpoint_fits(BertConfig(**dict(config.to_dict(), vocab_size=2**22)), folder)


# -- .keras files --------------------------------------------------------------------------
def test_keras_file_rebuilds_its_weights_or_fails(tmp_path):
    config = h.tiny_config()
    model = modeling.BertClassifierModel(config, num_labels=2)
    x = {"input_ids": np.array([[2, 7, 9, 3]], np.int32)}
    want = model(x)["logits"].numpy()
    path = str(tmp_path / "m.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "weights not loaded" UserWarning
        loaded = keras.saving.load_model(path)
    assert len(loaded.weights) == len(model.weights)
    np.testing.assert_array_equal(loaded(x)["logits"].numpy(), want)

    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    for vocab, error, expected in ((10**9, ConfigError, "vocab_size=1000000000 exceeds"),
                                   (config.vocab_size + 1, ValueError, "could not be loaded")):
        values = json.loads(files["config.json"])
        values["config"]["config"]["vocab_size"] = vocab
        hostile = str(tmp_path / f"hostile_{vocab}.keras")
        with zipfile.ZipFile(hostile, "w") as z:
            for n, b in files.items():
                z.writestr(n, json.dumps(values) if n == "config.json" else b)
        with pytest.raises(error, match=expected):
            keras.saving.load_model(hostile)


def test_etc_keras_file_rebuilds_its_weights(tmp_path):
    model = etc_modeling.EtcModel(etc_modeling.EtcConfig(**h.tiny_etc_config_dict()))
    model.build()
    path = str(tmp_path / "etc.keras")
    model.save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = keras.saving.load_model(path)
    for a, b in zip(loaded.weights, model.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# -- serving -------------------------------------------------------------------------------
VOCAB = list(h.SPECIAL_TOKENS) + h.WORDS
MAX_SEQ = 16


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return h.write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")


def _serving(vocab_file, family="bert", task="classifier"):
    if family == "bert":
        model = modeling.BertClassifierModel(h.tiny_config(), num_labels=2)
        options = None
    else:
        model = etc_modeling.EtcClassifierModel(etc_modeling.EtcConfig(**h.tiny_etc_config_dict()), num_labels=2)
        options = RunOptions(etc_tokens_per_global=4, max_seq_length=MAX_SEQ)
    family_of(model).named_variables(model)  # builds
    fam = get_family(family)
    encoder = text_encoder.BertTextEncoder(vocab_file, True, MAX_SEQ, pad_to_max_seq_length=fam.static_length)
    return signatures.ServingFunctions(model, task, encoder, ["0", "1"], family=fam, input_options=options)


@pytest.mark.parametrize("family", ["bert", "etc"])
def test_serving_refuses_out_of_range_token_inputs(vocab_file, family):
    serving = _serving(vocab_file, family)
    vocab = serving.model.config.vocab_size
    types = 2 if family == "bert" else 16
    ok = np.array([[2, 7, 9, 3]], np.int32)
    ones, zeros = np.ones_like(ok), np.zeros_like(ok)
    good = serving.serve_token_ids(ok, ones, zeros)["logits"].numpy()
    np.testing.assert_allclose(good, serving._run(  # eager vs graph: float rounding only
        {"input_ids": ok, "input_mask": ones, "segment_ids": zeros})["logits"].numpy(), atol=1e-6)
    field = "type_vocab_size" if family == "bert" else "segment_vocab_size"
    for ids, mask, seg, expected in (
            (ok * 0 - 5, ones, zeros, f"input_ids must be in \\[0, vocab_size={vocab}\\)"),
            (ok * 0 + vocab, ones, zeros, "input_ids must be in"),
            (ok, ones, zeros - 1, f"segment_ids must be in \\[0, {field}={types}\\)"),
            (ok, ones, zeros + types, "segment_ids must be in"),
            (ok, ones * 2, zeros, "input_mask values must be 0 or 1"),
            (ok, ones * 1000, zeros, "input_mask values must be 0 or 1"),
            (ok[:, :0], ones[:, :0], zeros[:, :0], "at least one position")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=expected):
            serving.serve_token_ids(ids, mask, seg)


@pytest.mark.parametrize("family", ["bert", "etc"])
def test_serving_text_empty_batch_and_mismatched_rows(vocab_file, family):
    serving = _serving(vocab_file, family)
    empty = tf.constant([], tf.string)
    out = serving.serve_text(empty, empty)
    assert out["probabilities"].shape == (0, 2) and out["label"].shape == (0,)
    assert serving.serve_text_a(empty)["logits"].shape == (0, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="text_a and text_b must have the same number of rows"):
        serving.serve_text(tf.constant(["the cat sees", "a dog"]), tf.constant(["the book"]))
    # Valid rows still give one output each.
    out = serving.serve_text(tf.constant(["the cat sees", "a dog"]), tf.constant(["the book", ""]))
    assert out["logits"].shape == (2, 2)
