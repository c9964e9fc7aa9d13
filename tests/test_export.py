"""SavedModel export for serving: in-graph tokenization parity with the training
tokenizer, the three signatures, loading without this package, saved_model_cli."""

import json
import os
import re
import shlex
import subprocess
import sys
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text
from official.nlp.data import classifier_data_lib as cdl
from official.nlp.data import squad_lib
from official.nlp.tools import tokenization

from helpers_data import flags, run_script
from realformer_tf import modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.serving import export, signatures, text_encoder
from realformer_tf.errors import CheckpointError
from realformer_tf.data import squad as squad_data
from realformer_tf.errors import InputError

VOCAB = [
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "the", "cat", "sees", "river", "a", "dog", "likes", "book", "in", "and", "art", "text",
    "cafe", "creme", "brulee", "zurich", "naive", "famous", "hello", "world", "un", "##aff",
    "##able", "##s", "##e", "caf", "5", "00", "i", "##stanbul", "οδος", "ss", "tm",
    ".", ",", "!", "?", "'", "(", ")", "-", "$", "“", "”", "—", "…",
    "東", "京", "日", "本", "語",
    "The", "Cat", "Café", "Zürich",  # only the cased tokenizer produces these
]

# Accents, CJK, punctuation glued to words, Unicode spaces / control / format
# characters, Greek final sigma, dotted I, ligature-like symbols, a >400-character
# word, inputs that need truncation, empty and whitespace-only texts, invalid UTF-8.
LONG = " ".join(["the cat sees the river"] * 6)
PAIRS = [
    ("The cat sees the river.", ""),
    ("Café crème brûlée in Zürich!", "naïve art (famous)"),
    ("東京 and 日本語 text", "hello, world?"),
    ("unaffable $5.00 — “quoted” text…", "A\u00a0dog\u200blikes\tthe\nbook\u3000in\u2028art"),
    ("ΟΔΟΣ İstanbul Straße ™ ½ ｆｕｌｌ", "\x00\ufffd control\x07chars\x85 and \ue000 private"),
    ("x" * 450 + " cat", "the " + "é" * 401),
    (LONG, "a dog"),
    ("a dog", LONG),
    (LONG, LONG + " book"),
    ("", "the cat sees"),
    ("the cat", "   \t "),
    ("   ", ""),
]
BYTES_PAIRS = [(b"caf\xc3 cat\xff the", b"\xe6\x9d\xb1 river")]  # invalid UTF-8 is dropped
MAX_SEQ_LENGTH = 24
MAX_QUERY_LENGTH = 6
LABELS = ["contradiction", "entailment", "neutral"]
BLOCKED = ("realformer_tf", "official")  # made unimportable in the loading process
NOT_LOADED = ("realformer_tf", "official")  # and neither gets imported
SIGNATURE_OPS = {"RegexSplitWithOffsets", "NormalizeUTF8", "WordpieceTokenizeWithOffsets"}


def _write_vocab(path):
    path.write_text("".join(t + "\n" for t in VOCAB), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return _write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt")


def _tokenizer(vocab_file, lower=True):
    return tokenization.FullTokenizer(vocab_file, do_lower_case=lower)


def _features(pairs, tokenizer, max_seq_length=MAX_SEQ_LENGTH):
    """convert_single_example (run_classifier's featurization) -> int32 arrays [B, max]."""
    rows = [cdl.convert_single_example(
        10, cdl.InputExample("x", a, b or None, "0"), ["0"], max_seq_length, tokenizer) for a, b in pairs]
    return {k: np.array([getattr(r, k) for r in rows], np.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}


def _encoder(vocab_file, lower=True, max_seq_length=MAX_SEQ_LENGTH, **kwargs):
    return text_encoder.BertTextEncoder(vocab_file, lower, max_seq_length, **kwargs)


def _strings(pairs, i):
    return tf.constant([p[i].encode("utf-8") if isinstance(p[i], str) else p[i] for p in pairs])


# -- fast: the in-graph text pipeline --------------------------------------------------------
def test_longest_first_truncation_matches_truncate_seq_pair():
    la, lb, m = (x.ravel() for x in np.meshgrid(np.arange(10), np.arange(10), np.arange(12), indexing="ij"))
    keep_a, keep_b = (x.numpy() for x in text_encoder.longest_first_lengths(la, lb, m))
    for i in range(len(la)):
        a, b = list(range(la[i])), list(range(lb[i]))
        cdl._truncate_seq_pair(a, b, m[i])
        assert (len(a), len(b)) == (keep_a[i], keep_b[i]), (la[i], lb[i], m[i])
    # tensorflow-text's ShrinkLongestTrimmer cuts the first segment on ties, the original
    # the second: it matches with the segments swapped, and differs as [a, b].
    ra = tf.RaggedTensor.from_row_lengths(tf.zeros([int(la.sum())]), la)
    rb = tf.RaggedTensor.from_row_lengths(tf.zeros([int(lb.sum())]), lb)
    tb, ta = tf_text.ShrinkLongestTrimmer(m.astype(np.int32)).trim([rb, ra])
    np.testing.assert_array_equal(ta.row_lengths(), keep_a)
    np.testing.assert_array_equal(tb.row_lengths(), keep_b)
    sa, _ = tf_text.ShrinkLongestTrimmer(m.astype(np.int32)).trim([ra, rb])
    assert (sa.row_lengths().numpy() != keep_a).any()


def _sample_code_points(step=7):
    """Every `step`-th code point assigned since Unicode 3.2 (stable across the Unicode
    versions of Python's unicodedata and TensorFlow's ICU/RE2), plus whole blocks where
    BERT's rules bite: Latin-1, general punctuation, CJK symbols, fullwidth forms."""
    old = unicodedata.ucd_3_2_0
    dense = [*range(0x0, 0x250), *range(0x2000, 0x2070), *range(0x3000, 0x3040), *range(0xFF00, 0xFF70)]
    sampled = range(0, 0x30000, step)
    return sorted({c for c in (*dense, *sampled)
                   if not 0xD800 <= c <= 0xDFFF and old.category(chr(c)) != "Cn"})


@pytest.mark.parametrize("lower", [True, False])
def test_tokenize_matches_full_tokenizer(vocab_file, lower):
    tokenizer = _tokenizer(vocab_file, lower)
    texts = [t for pair in PAIRS for t in pair]
    texts += [f"a{chr(c)}b {chr(c)}Ab{chr(c)}" for c in _sample_code_points()]
    got = _encoder(vocab_file, lower).tokenize(tf.constant([t.encode() for t in texts])).to_list()
    mismatches = [(t, tokenizer.tokenize(t), [g.decode() for g in row])
                  for t, row in zip(texts, got) if tokenizer.tokenize(t) != [g.decode() for g in row]]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("max_seq_length", [5, 9, MAX_SEQ_LENGTH, 64])
def test_encode_matches_convert_single_example(vocab_file, lower, max_seq_length):
    pairs = PAIRS + [(a.decode("utf-8", "ignore"), b.decode("utf-8", "ignore")) for a, b in BYTES_PAIRS]
    expected = _features(pairs, _tokenizer(vocab_file, lower), max_seq_length)
    raw = PAIRS + BYTES_PAIRS
    got = _encoder(vocab_file, lower, max_seq_length).encode(_strings(raw, 0), _strings(raw, 1))
    width = got["input_ids"].shape[1]
    assert width == expected["input_mask"].sum(1).max()  # padded to the batch's longest row
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key][:, :width], err_msg=key)
    padded = _encoder(vocab_file, lower, max_seq_length, pad_to_max_seq_length=True).encode(
        _strings(raw, 0), _strings(raw, 1))
    for key in expected:
        np.testing.assert_array_equal(padded[key], expected[key], err_msg=key)
    # Tokens map back to the ids.
    vocab = {t: i for i, t in enumerate(VOCAB)}
    ids = [[vocab[t.decode()] if t else 0 for t in row] for row in got["tokens"].numpy()]
    np.testing.assert_array_equal(ids, got["input_ids"])


def test_encoders_of_different_vocabs_never_share_a_table(tmp_path, monkeypatch):
    """TensorFlow names a file-backed table after str(filename). For an Asset that string
    holds the object's address, which a later Asset can reuse while the first table still
    lives: a second encoder then got the first one's vocab, silently (seen in a test
    run). Made deterministic here by giving every plain Asset the same string."""
    monkeypatch.setattr(tf.saved_model.Asset, "__repr__", lambda self: "<asset>")
    first = _write_vocab(tmp_path / "first.txt")
    (tmp_path / "second.txt").write_text("".join(t + "\n" for t in reversed(VOCAB)), encoding="utf-8")
    kept = _encoder(first)  # alive while the second is built
    second = _encoder(str(tmp_path / "second.txt"))
    ids = second.encode(_strings([("the cat", "")], 0), _strings([("", "")], 0))["input_ids"].numpy()[0]
    reversed_ids = {t: len(VOCAB) - 1 - i for i, t in enumerate(VOCAB)}
    assert ids[:4].tolist() == [reversed_ids[t] for t in ("[CLS]", "the", "cat", "[SEP]")]
    assert kept.encode(_strings([("the cat", "")], 0), _strings([("", "")], 0))["input_ids"].numpy()[0, 1] == 5


def _squad_reference(pairs, vocab_file, tmp_path, max_seq_length=MAX_SEQ_LENGTH):
    """run_squad's featurization (squad_lib): the first doc_stride window per question."""
    data = {"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": f"q{i}", "question": question, "answers": []}]}
        for i, (question, context) in enumerate(pairs)]}]}
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    examples = squad_lib.read_squad_examples(str(path), is_training=False, version_2_with_negative=False)
    features = squad_data.convert_examples(examples, _tokenizer(vocab_file), max_seq_length, doc_stride=8,
                                           max_query_length=MAX_QUERY_LENGTH, is_training=False)
    first = {}
    for f in features:
        first.setdefault(f.example_index, f)
    return {k: np.array([getattr(first[i], k) for i in range(len(pairs))], np.int32)
            for k in ("input_ids", "input_mask", "segment_ids")}


SQUAD_PAIRS = [(a, b) for a, b in PAIRS if b.strip() and a.strip()] + [
    ("What does the cat see in Zürich?", "The cat sees the river. " + LONG)]


def test_squad_encode_matches_squad_lib(vocab_file, tmp_path):
    expected = _squad_reference(SQUAD_PAIRS, vocab_file, tmp_path)
    got = _encoder(vocab_file, pair_truncation="squad", max_query_length=MAX_QUERY_LENGTH,
                   pad_to_max_seq_length=True).encode(_strings(SQUAD_PAIRS, 0), _strings(SQUAD_PAIRS, 1))
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key], err_msg=key)


# -- fast: versions and errors ---------------------------------------------------------------
def test_next_version(tmp_path):
    assert export.next_version(str(tmp_path / "missing")) == 1
    for name in ("1", "7", "temp-9-abc", "notes"):
        (tmp_path / name).mkdir()
    assert export.next_version(str(tmp_path)) == 8


def _tiny_config(**overrides):
    values = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=32, max_position_embeddings=64, type_vocab_size=2)
    values.update(overrides)
    return modeling.BertConfig(**values)


def _randomize(model, seed):
    """Weights far from the 0.02 initializer, so outputs depend visibly on every token."""
    rng = np.random.default_rng(seed)
    for name, var in bert_checkpoint.bert_variables(model).items():
        base = 1.0 if name.endswith(("gamma", "head_scale", "residual_scale")) else 0.0
        var.assign(base + rng.normal(0, 0.3, var.shape).astype(np.float32))


def _checkpoint(tmp_path, model, seed=0):
    bert_checkpoint.bert_variables(model)  # builds
    _randomize(model, seed)
    return bert_checkpoint.save_bert_checkpoint(model, str(tmp_path / "ckpt" / "bert_model.ckpt"))


def test_user_errors_before_export(vocab_file, tmp_path):
    config = _tiny_config()
    prefix = _checkpoint(tmp_path, modeling.BertClassifierModel(config, num_labels=3))
    common = dict(bert_config=config, init_checkpoint=prefix, vocab_file=vocab_file, do_lower_case=True,
                  max_seq_length=MAX_SEQ_LENGTH)
    out = str(tmp_path / "export")
    with pytest.raises(CheckpointError, match="output_weights"):  # 2 names, 3-label head
        export.export_from_checkpoint(out, label_names=["a", "b"], **common)
    with pytest.raises(export.ExportError, match="num_labels=2 but 3 label names"):
        export.export_from_checkpoint(out, num_labels=2, label_names=["a", "b", "c"], **common)
    with pytest.raises(export.ExportError, match="max_position_embeddings"):
        export.export_from_checkpoint(out, **dict(common, max_seq_length=65))
    with pytest.raises(export.ExportError, match="task 'qa'"):
        export.export_from_checkpoint(out, task="qa", **common)
    duplicate = tmp_path / "dup.txt"
    duplicate.write_text("[UNK]\n[CLS]\n[SEP]\nthe\nthe\n", encoding="utf-8")
    with pytest.raises(InputError, match="twice"):
        export.export_from_checkpoint(out, **dict(common, vocab_file=str(duplicate)))
    (tmp_path / "export" / "3").mkdir(parents=True)
    with pytest.raises(export.ExportError, match="already exists"):
        export.export_from_checkpoint(out, version=3, **common)
    assert os.listdir(out) == ["3"]  # nothing half-written
    encoder_ckpt = _checkpoint(tmp_path / "enc", modeling.BertModel(config))
    with pytest.raises(export.ExportError, match="no classifier head"):
        export.export_from_checkpoint(out, **dict(common, init_checkpoint=encoder_ckpt), task="classifier")
    assert export.infer_task(encoder_ckpt) == "encoder" and export.infer_task(prefix) == "classifier"


@pytest.mark.slow
def test_script_reports_user_errors(tmp_path, vocab_file):
    proc = run_script("export_saved_model.py", *flags(
        bert_config_file=tmp_path / "missing.json", init_checkpoint=tmp_path / "x",
        vocab_file=vocab_file, export_dir=tmp_path / "out"))
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"error: bert_config_file {tmp_path / 'missing.json'} does not exist"


def test_serving_functions_regression_and_limits(vocab_file):
    """The serving functions before saving: an STS-B-style regression head serves `score`;
    token ids longer than max_seq_length are refused with a clear message."""
    config = _tiny_config()
    model = modeling.BertClassifierModel(config, num_labels=1)
    bert_checkpoint.bert_variables(model)
    _randomize(model, 3)
    serving = signatures.ServingFunctions(model, "classifier", _encoder(vocab_file), is_regression=True)
    pairs = PAIRS[:4]
    out = serving.serve_text(_strings(pairs, 0), _strings(pairs, 1))
    assert sorted(out) == ["logits", "score"]
    feats = _features(pairs, _tokenizer(vocab_file))
    logits = model(feats, training=False)["logits"].numpy()
    np.testing.assert_allclose(out["score"], logits[:, 0], atol=1e-5)
    too_long = tf.zeros([1, MAX_SEQ_LENGTH + 1], tf.int32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"exceeds max_seq_length={MAX_SEQ_LENGTH}"):
        serving.serve_token_ids(too_long, too_long, too_long)


# -- slow: real exports, loaded in a fresh process ---------------------------------------------
VARIANTS = {
    # task: (config overrides, export kwargs)
    "classifier": (dict(), dict(label_names=LABELS)),  # RealFormer, post-LN
    "squad": (dict(residual_attention=False), dict(max_query_length=MAX_QUERY_LENGTH)),  # BERT
    "encoder": (dict(layer_norm_type="normformer", normformer_residual_scale=True), dict()),
}
MODEL_CLASSES = {"classifier": lambda c: modeling.BertClassifierModel(c, num_labels=len(LABELS)),
                 "squad": modeling.BertSquadModel, "encoder": modeling.BertModel}


@pytest.fixture(scope="module")
def exports(tmp_path_factory, vocab_file):
    """{task: (export path, config, checkpoint prefix, script stdout or None)}: the
    classifier through export_saved_model.py, the other two through the library."""
    root = tmp_path_factory.mktemp("exports")
    result = {}
    for seed, (task, (overrides, kwargs)) in enumerate(VARIANTS.items()):
        config = _tiny_config(**overrides)
        prefix = _checkpoint(root / task, MODEL_CLASSES[task](config), seed)
        if task == "classifier":
            config_path = root / "classifier_config.json"
            config.to_json_file(str(config_path))
            proc = run_script("export_saved_model.py", *flags(
                bert_config_file=config_path, init_checkpoint=prefix, vocab_file=vocab_file,
                do_lower_case=True, task_name="xnli", max_seq_length=MAX_SEQ_LENGTH,
                export_dir=root / "serving" / task))
            assert proc.returncode == 0, proc.stderr[-3000:]
            path = str(root / "serving" / task / "1")
            result[task] = (path, config, prefix, proc.stdout)
        else:
            path = export.export_from_checkpoint(
                str(root / "serving" / task), bert_config=config, init_checkpoint=prefix,
                vocab_file=vocab_file, do_lower_case=True, task=task, max_seq_length=MAX_SEQ_LENGTH,
                **kwargs)
            result[task] = (path, config, prefix, None)
    return result


# Runs in a fresh interpreter, from a directory outside the repository, without
# PYTHONPATH, with realformer_tf (and Model Garden) unimportable. (Keras cannot be
# blocked: `import tensorflow` 2.20 imports it when installed.)
LOADER = r'''
import importlib.abc, json, sys
import numpy as np
BLOCKED = set(sys.argv[2].split(","))

class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{name} is blocked in this test")
        return None

sys.meta_path.insert(0, Block())
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

jobs = json.load(open(sys.argv[1]))
report = {"unregistered_ops": {}, "signatures": {}, "importable": {}}
for task, job in jobs.items():  # ops that core TensorFlow lacks, before tensorflow_text
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(job["path"] + "/saved_model.pb", "rb").read())
    graph = proto.meta_graphs[0].graph_def
    ops = {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
    report["unregistered_ops"][task] = sorted(o for o in ops if op_def_registry.get(o) is None)
import tensorflow_text  # registers the tokenizer ops
for task, job in jobs.items():
    loaded = tf.saved_model.load(job["path"])
    report["signatures"][task] = sorted(loaded.signatures)
    outputs = {}
    for name, inputs in job["calls"].items():
        signature, args = name.split(":")[0], {}
        for k, v in inputs.items():
            text = k.startswith("text")
            args[k] = tf.constant([x.encode("latin-1") for x in v]) if text else tf.constant(v, tf.int32)
        outputs[name] = {}
        for k, v in loaded.signatures[signature](**args).items():
            v = v.numpy()
            text = v.dtype == object
            outputs[name][k] = [x.decode("utf-8", "replace") for x in v.ravel()] if text else v.tolist()
    json.dump(outputs, open(job["out"], "w"))
report["loaded_modules"] = sorted(m for m in sys.modules if m.split(".")[0] in sys.argv[4].split(","))
for name in BLOCKED:
    try:
        __import__(name)
        report["importable"][name] = True
    except ImportError:
        report["importable"][name] = False
json.dump(report, open(sys.argv[3], "w"))
'''


def _raw(text):
    """A text as JSON-safe latin-1 code points of its UTF-8 bytes (bytes pass through)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    return data.decode("latin-1")


@pytest.fixture(scope="module")
def served(exports, vocab_file, tmp_path_factory):
    """Calls every signature of every export in one fresh process; returns
    ({task: {call name: outputs}}, report, {task: python-side features})."""
    work = tmp_path_factory.mktemp("loader")
    tokenizer = _tokenizer(vocab_file)
    jobs, features = {}, {}
    for task, (path, _, _, _) in exports.items():
        if task == "squad":
            feats = _squad_reference(SQUAD_PAIRS, vocab_file, work)
            pairs = SQUAD_PAIRS
        else:
            pairs = PAIRS + BYTES_PAIRS
            decoded = PAIRS + [(a.decode("utf-8", "ignore"), b.decode("utf-8", "ignore")) for a, b in BYTES_PAIRS]
            feats = _features(decoded, tokenizer)
        features[task] = feats
        calls = {
            "serving_default": {"text_a": [_raw(a) for a, _ in pairs], "text_b": [_raw(b) for _, b in pairs]},
            "serve_token_ids": {k: v.tolist() for k, v in feats.items()},
            # dynamic length: the same rows cut to their longest real row
            "serve_token_ids:short": {k: v[:, :int(feats["input_mask"].sum(1).max())].tolist()
                                      for k, v in feats.items()},
        }
        if task != "squad":
            calls["serve_text_a"] = {"text_a": [_raw(a) for a, _ in pairs]}
            calls["serving_default:single"] = {"text_a": [_raw(a) for a, _ in pairs],
                                               "text_b": [""] * len(pairs)}
        jobs[task] = {"path": path, "calls": calls, "out": str(work / f"{task}.json")}
    (work / "jobs.json").write_text(json.dumps(jobs), encoding="utf-8")
    (work / "loader.py").write_text(LOADER, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_CONFIG")}
    env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [sys.executable, str(work / "loader.py"), str(work / "jobs.json"), ",".join(BLOCKED),
         str(work / "report.json"), ",".join(NOT_LOADED)],
        cwd=str(work), env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    outputs = {task: json.loads((work / f"{task}.json").read_text()) for task in jobs}
    return outputs, json.loads((work / "report.json").read_text()), features


@pytest.mark.slow
def test_loads_without_the_package_or_custom_objects(served):
    _, report, _ = served
    assert report["importable"] == {"realformer_tf": False, "official": False}
    assert report["loaded_modules"] == []
    for task in VARIANTS:
        # Beyond core TensorFlow, only three long-standing tensorflow-text ops.
        assert set(report["unregistered_ops"][task]) == SIGNATURE_OPS, report["unregistered_ops"][task]
    assert report["signatures"]["classifier"] == ["serve_text_a", "serve_token_ids", "serving_default"]
    assert report["signatures"]["squad"] == ["serve_token_ids", "serving_default"]


def _keras_outputs(task, config, prefix, feats):
    model = MODEL_CLASSES[task](config)
    bert_checkpoint.load_bert_checkpoint(model, prefix)
    out = model({k: tf.constant(v) for k, v in feats.items()}, training=False)
    if task == "classifier":
        return {"logits": out["logits"].numpy(), "probabilities": tf.nn.softmax(out["logits"]).numpy()}
    if task == "squad":
        return {"start_logits": out["start_logits"].numpy(), "end_logits": out["end_logits"].numpy()}
    return {"pooled_output": out["pooled_output"].numpy(), "sequence_output": out["sequence_output"].numpy()}


PER_TOKEN = ("start_logits", "end_logits", "sequence_output")  # [B, L, ...]: padding-dependent width


@pytest.mark.slow
@pytest.mark.parametrize("task", list(VARIANTS))
def test_signatures_equal_the_keras_model(task, exports, served, vocab_file):
    """serve_token_ids == the Keras model on the same (max_seq_length-padded) features, and
    == on the same rows cut to their longest real row; serving_default on the raw text ==
    both (it pads to the batch's longest row)."""
    outputs, _, features = served
    _, config, prefix, _ = exports[task]
    out, feats = outputs[task], features[task]
    expected = _keras_outputs(task, config, prefix, feats)
    longest = int(feats["input_mask"].sum(1).max())
    for call in ("serve_token_ids", "serve_token_ids:short", "serving_default"):
        for key, value in expected.items():
            got = np.array(out[call][key])
            if key in PER_TOKEN:
                width = MAX_SEQ_LENGTH if call == "serve_token_ids" else longest
                assert got.shape[1] == width, (call, key, got.shape)
                value = value[:, :width]
            np.testing.assert_allclose(got, value, atol=1e-5, err_msg=f"{call} vs keras: {key}")
    text = out["serving_default"]
    if task == "classifier":
        assert text["label_id"] == np.argmax(text["probabilities"], 1).tolist()
        assert text["label"] == [LABELS[i] for i in text["label_id"]]
        assert len(set(text["label_id"])) > 1  # the inputs do move the prediction
        np.testing.assert_allclose(out["serve_text_a"]["probabilities"],
                                   out["serving_default:single"]["probabilities"], atol=1e-6)
        single = _keras_outputs(task, config, prefix, _features([(a, "") for a, _ in PAIRS], _tokenizer(vocab_file)))
        np.testing.assert_allclose(np.array(out["serve_text_a"]["probabilities"])[:len(PAIRS)],
                                   single["probabilities"], atol=1e-5)
    else:
        np.testing.assert_array_equal(text["input_mask"], feats["input_mask"][:, :longest])
    if task == "squad":
        for key in ("input_ids", "segment_ids"):
            np.testing.assert_array_equal(text[key], feats[key][:, :longest])
        tokens = np.array(text["tokens"]).reshape(len(SQUAD_PAIRS), longest)
        vocab = {t: i for i, t in enumerate(VOCAB)}
        assert [[vocab[t] if t else 0 for t in row] for row in tokens] == text["input_ids"]


@pytest.mark.slow
def test_script_output_and_saved_model_cli(exports, served, vocab_file):
    path, _, _, stdout = exports["classifier"]
    assert "RealFormer: residual attention on, post-LN" in stdout.splitlines()[0]
    assert f"Exported classifier model to {path}" in stdout
    assert f"Labels: {', '.join(LABELS)}" in stdout
    info = export.read_export_info(path)
    assert info["label_names"] == LABELS and info["max_seq_length"] == MAX_SEQ_LENGTH
    saved_model_cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")

    show = subprocess.run([saved_model_cli, "show", "--dir", path, "--all"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert show.returncode == 0, show.stderr[-2000:]
    for name in ("serving_default", "serve_text_a", "serve_token_ids"):
        assert f"signature_def['{name}']" in show.stdout
    for name in ("text_a", "text_b", "input_ids", "input_mask", "segment_ids", "probabilities",
                 "label", "label_id"):
        assert f"['{name}'] tensor_info" in show.stdout

    # The ready-to-copy line the script printed, on a tricky pair.
    line = next(l.strip() for l in stdout.splitlines() if " run --dir " in l)
    argv = shlex.split(line)
    assert argv[argv.index("--dir") + 1] == path
    a, b = PAIRS[1]
    argv[argv.index("--input_exprs") + 1] = f"text_a={json.dumps([a])};text_b={json.dumps([b])}"
    run = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    printed = dict(re.findall(r"Result for output key (\w+):\n(.*?)(?=\nResult for|\Z)", run.stdout, re.S))
    probs = np.array([float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", printed["probabilities"])])
    outputs, _, _ = served
    np.testing.assert_allclose(probs, outputs["classifier"]["serving_default"]["probabilities"][1], atol=1e-5)
    assert LABELS[outputs["classifier"]["serving_default"]["label_id"][1]] in printed["label"]
