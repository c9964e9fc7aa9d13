"""ONNX export (export_saved_model.py --output_format=onnx): for every BERT-family
variant and task, onnxruntime gives the SavedModel's `serve_token_ids` outputs; the
graph passes onnx.checker; tokenizer.json gives the SavedModel's token ids; the int8
model runs and stays close; ETC exports; bad flag combinations are one error line.

Exports shared by the tests: every task of the default variant, the classifier of the
others (a module fixture per variant)."""

import os

import numpy as np
import pytest
import tensorflow as tf

import helpers_data as h
from helpers_data import flags, one_error_line, run_script
from realformer_tf import etc_modeling, modeling
from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import etc_official
from realformer_tf.families import get_family
from realformer_tf.models import variants
from realformer_tf.serving import export, onnx_export, text_encoder

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("tf2onnx")
tokenizers = pytest.importorskip("tokenizers")

VARIANTS = ("bert", "realformer", "realformer_mean", "normformer", "realformer_normformer")
TASKS = ("classifier", "squad", "encoder")
LABELS = ["neg", "neutral", "pos"]
MAX_SEQ_LENGTH = 24
MAX_QUERY_LENGTH = 6
TOLERANCE = 1e-5  # float32: onnxruntime vs the SavedModel
# int8 (dynamic quantization) vs float32 onnxruntime on the tiny models' probabilities:
# measured 0.004-0.027 over these batches and the five variants; allowed 0.08.
INT8_TOLERANCE = 0.08
# English, accented and CJK words (both casings) for the tokenizer checks.
WORDS = tuple(h.WORDS) + (
    "The", "cats", "##s", "sat", "on", "mat", ",", "didn", "'", "t", "they", "?", "le", "Le", "cafe", "Café",
    "etait", "était", "tres", "très", "naif", "naïf", "à", "zurich", "Zürich", "我", "喜", "欢", "中", "文",
    "。", "bert", "BERT", "test", "unknown", "Unknown", "w", "##ord", "wö", "##rd", ":", "and", "!", "東", "京",
    "日", "本", "語", "ss", "straße")
TEXTS = [
    "The cats sat on the mat, didn't they?",
    "Le Café était très naïf à Zürich.",
    "我喜欢中文。BERT 中文 test",
    "Unknown wörds: ß and 東京 日本語!",
    "the cat sees the river today .",
]
SIZES = {k: v for k, v in h.tiny_config_dict(vocab_size=h.vocab_size(words=WORDS), max_position_embeddings=32).items()
         if k not in variants.SWITCHES}
MODEL_CLASSES = {"classifier": lambda c: modeling.BertClassifierModel(c, num_labels=len(LABELS)),
                 "squad": modeling.BertSquadModel, "encoder": modeling.BertModel}


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    return h.write_vocab(tmp_path_factory.mktemp("vocab") / "vocab.txt", words=WORDS)


def _randomize(variables, seed):
    """Weights far from the 0.02 initializer, so outputs depend visibly on every token."""
    rng = np.random.default_rng(seed)
    for name, var in variables.items():
        base = 1.0 if name.endswith(("gamma", "head_scale", "residual_scale")) else 0.0
        var.assign(base + rng.normal(0, 0.3, var.shape).astype(np.float32))


def _export_flags(config_path, prefix, vocab_file, export_dir, **extra):
    return flags(bert_config_file=config_path, init_checkpoint=prefix, vocab_file=vocab_file, do_lower_case=True,
                 max_seq_length=MAX_SEQ_LENGTH, max_query_length=MAX_QUERY_LENGTH, export_dir=export_dir,
                 output_format="onnx", **extra)


def _export_variant(variant, tasks, root, vocab_file):
    """{task: (ONNX version folder, SavedModel version folder)}: one checkpoint per task,
    exported as ONNX (the classifier by export_saved_model.py --output_format=onnx
    --onnx_quantize=int8, the others by the library function the program calls) and as a
    SavedModel."""
    result = {}
    for seed, task in enumerate(tasks):
        config = variants.variant_config(variant, **SIZES)
        model = MODEL_CLASSES[task](config)
        _randomize(bert_checkpoint.bert_variables(model), seed)
        prefix = bert_checkpoint.save_bert_checkpoint(model, str(root / task / "bert_model.ckpt"))
        common = dict(bert_config=config, init_checkpoint=prefix, vocab_file=vocab_file, do_lower_case=True,
                      task=task, max_seq_length=MAX_SEQ_LENGTH, max_query_length=MAX_QUERY_LENGTH,
                      label_names=LABELS if task == "classifier" else None)
        if task == "classifier":
            config_path = root / task / "bert_config.json"
            config.to_json_file(str(config_path))
            proc = run_script("export_saved_model.py", *_export_flags(
                config_path, prefix, vocab_file, root / "onnx" / task, task=task, label_names=",".join(LABELS),
                onnx_quantize="int8"))
            assert proc.returncode == 0, proc.stderr[-3000:]
            onnx_path = str(root / "onnx" / task / "1")
            assert f"as ONNX to {onnx_path}" in proc.stdout and "max |difference|" in proc.stdout, proc.stdout
        else:
            onnx_path = onnx_export.export_from_checkpoint(str(root / "onnx" / task), **common)
        saved = export.export_from_checkpoint(str(root / "saved_model" / task), **common)
        result[task] = (onnx_path, saved)
    return result


@pytest.fixture(scope="module")
def default_export(tmp_path_factory, vocab_file):
    """The package's default variant (RealFormer) exported for every task."""
    return "realformer", _export_variant("realformer", TASKS, tmp_path_factory.mktemp("realformer"), vocab_file)


# The other variants differ from the default in the encoder's graph only, which every
# task shares: their classifier is exported (with the command line and int8), with the
# slow tests.
OTHER_VARIANTS = [pytest.param(v, marks=pytest.mark.slow) for v in VARIANTS if v != "realformer"]


@pytest.fixture(scope="module", params=["default"] + OTHER_VARIANTS)
def exported(request, tmp_path_factory, vocab_file, default_export):
    """(variant, {task: (ONNX folder, SavedModel folder)}): every task for the default
    variant, the classifier for the others."""
    if request.param == "default":
        return default_export
    variant = request.param
    root = tmp_path_factory.mktemp(variant)
    return variant, _export_variant(variant, ("classifier",), root, vocab_file)


def _batch(vocab_size, batch, length, seed):
    """Token ids with [CLS] first, rows of different real lengths, two segments."""
    rng = np.random.default_rng(seed)
    real = np.array([length] + [max(1, length - 1 - 3 * i) for i in range(1, batch)])[:batch]
    mask = (np.arange(length)[None, :] < real[:, None]).astype(np.int32)
    ids = (rng.integers(5, vocab_size, (batch, length)) * mask).astype(np.int32)
    ids[:, 0] = 2
    segments = ((np.arange(length)[None, :] >= real[:, None] // 2) & (mask == 1)).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _session(path):
    return onnx_export.session(path)


def _assert_same(want, got, tolerance, context):
    assert sorted(got) == sorted(want), context
    for name, value in want.items():
        value = np.asarray(value)
        if value.dtype == object:  # the classifier's label names
            assert [v.decode() for v in value] == list(got[name]), (context, name)
        elif value.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], value, err_msg=f"{context} {name}")
        else:
            assert got[name].dtype == np.float32, (context, name)
            np.testing.assert_allclose(got[name], value, rtol=0, atol=tolerance, err_msg=f"{context} {name}")


def test_onnxruntime_gives_the_saved_models_outputs(exported):
    """Each exported task, 3 lengths x 2 batch sizes: every output of the SavedModel's
    serve_token_ids (less the encoder's echo of its input_mask input) within 1e-5, labels
    equal."""
    variant, exports = exported
    for task, paths in exports.items():
        _check_outputs(variant, task, *paths)


def _check_outputs(variant, task, onnx_path, saved_path):
    serve = tf.saved_model.load(saved_path).signatures["serve_token_ids"]
    runner = _session(os.path.join(onnx_path, onnx_export.ONNX_FILE))
    names = [o.name for o in runner.get_outputs()]
    worst = 0.0
    for batch in (1, 4):
        for length in (3, 11, MAX_SEQ_LENGTH):
            feed = _batch(SIZES["vocab_size"], batch, length, seed=batch * 100 + length)
            want = {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in feed.items()}).items()
                    if k != "input_mask"}
            got = dict(zip(names, runner.run(names, feed)))
            _assert_same(want, got, TOLERANCE, (variant, task, batch, length))
            worst = max(worst, onnx_export.max_difference(want, got))
    assert worst <= TOLERANCE


def test_the_graph_passes_the_checker_with_dynamic_axes(exported):
    variant, exports = exported
    for task, (onnx_path, _) in exports.items():
        path = os.path.join(onnx_path, onnx_export.ONNX_FILE)
        onnx.checker.check_model(path, full_check=True)
        model = onnx.load(path)
        assert {o.domain: o.version for o in model.opset_import}[""] == onnx_export.DEFAULT_OPSET
        assert {n.domain for n in model.graph.node} <= {"", "ai.onnx.ml"}
        for value in model.graph.input:
            assert value.type.tensor_type.elem_type == onnx.TensorProto.INT32
            assert [d.dim_param for d in value.type.tensor_type.shape.dim] == ["batch", "sequence"]
        assert [o.type.tensor_type.shape.dim[0].dim_param for o in model.graph.output] == ["batch"] * len(
            model.graph.output)
        info = export.read_export_info(onnx_path)
        assert info["format"] == "onnx" and info["task"] == task and info["opset"] == onnx_export.DEFAULT_OPSET
        assert info["check"]["max_abs_difference"] <= TOLERANCE
        expected = {"classifier": ["label", "label_id", "logits", "probabilities"],
                    "squad": ["end_logits", "start_logits"], "encoder": ["pooled_output", "sequence_output"]}[task]
        assert sorted(info["outputs"]) == expected
        files = {onnx_export.ONNX_FILE, onnx_export.TOKENIZER_FILE, onnx_export.INFO_FILE}
        if task == "classifier":
            files.add(onnx_export.INT8_FILE)
        assert set(os.listdir(onnx_path)) == files


def test_int8_model_runs_and_stays_close(exported):
    """onnxruntime's dynamic int8 quantization of the classifier: integer matmuls on
    int8 kernels, probabilities within INT8_TOLERANCE of the float32 model's."""
    variant, exports = exported
    onnx_path = exports["classifier"][0]
    float_file, int8_file = (os.path.join(onnx_path, f) for f in (onnx_export.ONNX_FILE, onnx_export.INT8_FILE))
    quantized = onnx.load(int8_file)
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= {n.op_type for n in quantized.graph.node}
    # The kernels are stored as int8 (on these tiny models the file is no smaller: the
    # scales and zero points outweigh the saving).
    assert any(i.data_type == onnx.TensorProto.INT8 and len(i.dims) == 2 for i in quantized.graph.initializer)
    floats, ints = _session(float_file), _session(int8_file)
    worst = 0.0
    for batch, length in ((1, 3), (4, 11), (4, MAX_SEQ_LENGTH)):
        feed = _batch(SIZES["vocab_size"], batch, length, seed=length)
        want, got = (s.run(["probabilities"], feed)[0] for s in (floats, ints))
        worst = max(worst, float(np.abs(want - got).max()))
    assert worst <= INT8_TOLERANCE, (variant, worst)


def _docs_example():
    """The first Python block of docs/serving.md's ONNX section."""
    with open(os.path.join(h.ROOT, "docs", "serving.md"), encoding="utf-8") as f:
        section = f.read().split("\n## ONNX\n", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_docs_example_serves_raw_text_like_the_saved_model(default_export, tmp_path):
    """The serving example of docs/serving.md, run as written (the folder aside) in a
    fresh interpreter where TensorFlow and this package cannot be imported, gives the
    probabilities and labels of the SavedModel's raw-text serving_default (once: the
    tokenizer and the serving code do not depend on the variant)."""
    _, exports = default_export
    onnx_path, saved_path = exports["classifier"]
    code = _docs_example()
    assert 'folder = "/tmp/mrpc_onnx/1"' in code
    code = code.replace('folder = "/tmp/mrpc_onnx/1"', "import json, sys; folder = sys.argv[1]")
    code += 'print(json.dumps({"probabilities": probabilities.tolist(), "labels": list(labels)}))\n'
    got = h.run_without_package(code, onnx_path, cwd=tmp_path, blocked=("realformer_tf", "tensorflow", "keras"))
    import tensorflow_text  # noqa: F401  (the SavedModel's tokenizer ops)

    serve = tf.saved_model.load(saved_path).signatures["serving_default"]
    want = serve(text_a=tf.constant(["The cat sat.", "A single sentence."]),
                 text_b=tf.constant(["A cat was sitting.", ""]))
    np.testing.assert_allclose(got["probabilities"], want["probabilities"].numpy(), rtol=0, atol=TOLERANCE)
    assert got["labels"] == [v.decode() for v in want["label"].numpy()]


def _tokenizer(onnx_path):
    return tokenizers.Tokenizer.from_file(os.path.join(onnx_path, onnx_export.TOKENIZER_FILE))


def _ids(encoded):
    return {"input_ids": [e.ids for e in encoded], "input_mask": [e.attention_mask for e in encoded],
            "segment_ids": [e.type_ids for e in encoded]}


def _graph_ids(encoder, text_a, text_b=None):
    features = encoder.encode(tf.constant(text_a), None if text_b is None else tf.constant(text_b))
    return {k: features[k].numpy().tolist() for k in ("input_ids", "input_mask", "segment_ids")}


@pytest.mark.parametrize("do_lower_case", [True, False])
def test_tokenizer_json_gives_the_saved_models_ids(vocab_file, tmp_path, do_lower_case):
    """English, accented and CJK text, single and paired, padded in a batch and cut at
    max_seq_length: tokenizer.json's ids, mask and segments are the SavedModel's text
    encoder's (realformer_tf's WordPiece in the TensorFlow graph)."""
    tokens = text_encoder.read_vocab(vocab_file)
    path = tmp_path / "tokenizer.json"
    onnx_export.tokenizer(tokens, do_lower_case, MAX_SEQ_LENGTH).save(str(path))
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    encoder = text_encoder.BertTextEncoder(vocab_file, do_lower_case, MAX_SEQ_LENGTH)
    long_text = " ".join(TEXTS)  # > max_seq_length WordPieces
    singles = TEXTS + [long_text]
    assert _ids(tokenizer.encode_batch(singles)) == _graph_ids(encoder, singles)
    pairs = [(TEXTS[i], TEXTS[(i + 1) % len(TEXTS)]) for i in range(len(TEXTS))] + [(long_text, TEXTS[2])]
    assert _ids(tokenizer.encode_batch(pairs)) == _graph_ids(encoder, [a for a, _ in pairs], [b for _, b in pairs])
    known = [tokenizer.token_to_id(t) for t in ("cafe", "zurich", "我", "中") if do_lower_case] or [
        tokenizer.token_to_id(t) for t in ("Café", "Zürich", "我", "中")]
    assert set(known) <= {i for row in tokenizer.encode_batch(TEXTS) for i in row.ids}  # not [UNK]s


def test_squad_tokenizer_cuts_the_context(vocab_file, default_export):
    """The squad export's tokenizer.json: question + context, the context cut to the rest
    of max_seq_length, as the SavedModel's squad signature (questions within
    max_query_length)."""
    _, exports = default_export
    tokenizer = _tokenizer(exports["squad"][0])
    encoder = text_encoder.BertTextEncoder(vocab_file, True, MAX_SEQ_LENGTH, pair_truncation="squad",
                                           max_query_length=MAX_QUERY_LENGTH)
    pairs = [("where did the cat sit?", " ".join(TEXTS)), ("我喜欢中文?", TEXTS[1]), ("Café?", TEXTS[0])]
    assert _ids(tokenizer.encode_batch(pairs)) == _graph_ids(encoder, [a for a, _ in pairs], [b for _, b in pairs])


def test_pair_truncation_differs_only_on_odd_ties(vocab_file):
    """tokenizers' longest_first gives the odd WordPiece of a pair cut to an odd budget
    (max_seq_length - 3) to the second text when the first is not longer; BERT's
    _truncate_seq_pair (the SavedModel) gives it to the first. Nowhere else do they differ
    (docs/serving.md states this rule)."""
    tokens = text_encoder.read_vocab(vocab_file)
    for max_seq_length in (8, 9):
        tokenizer = onnx_export.tokenizer(tokens, True, max_seq_length)
        encoder = text_encoder.BertTextEncoder(vocab_file, True, max_seq_length)
        budget = max_seq_length - 3
        pairs = [(" ".join(["cat"] * a), " ".join(["dog"] * b)) for a in range(1, 10) for b in range(1, 10)]
        got = _ids(tokenizer.encode_batch(pairs))["input_ids"]
        want = _graph_ids(encoder, [a for a, _ in pairs], [b for _, b in pairs])["input_ids"]
        for (a, b), g, w in zip(pairs, got, want):
            la, lb = len(a.split()), len(b.split())
            tie = budget % 2 == 1 and min(la, lb) > budget // 2 and la <= lb
            kept = [(row.count(tokenizer.token_to_id("cat")), row.count(tokenizer.token_to_id("dog"))) for row in (g, w)]
            if tie:
                assert kept == [(budget // 2, budget // 2 + 1), (budget // 2 + 1, budget // 2)], (max_seq_length, la, lb)
            else:
                assert g == w[:len(g)] and not any(w[len(g):]), (max_seq_length, la, lb)


@pytest.mark.slow  # ETC's graph: ~20 s of conversion and export on 2 busy cores
def test_etc_exports_padded_to_max_seq_length(tmp_path, vocab_file):
    """ETC converts when its serving graph runs at max_seq_length (no length-bucket
    switch_case); its outputs equal the ETC SavedModel's."""
    config = etc_modeling.EtcConfig(**h.tiny_etc_config_dict(vocab_size=SIZES["vocab_size"],
                                                             max_absolute_position_embeddings=32))
    model = etc_modeling.EtcClassifierModel(config, num_labels=len(LABELS))
    _randomize(etc_official.etc_variables(model), 7)
    family = get_family("etc")
    prefix = family.save_checkpoint(model, str(tmp_path / "etc" / "etc_model.ckpt"))
    config_path = tmp_path / "etc_config.json"
    config.to_json_file(str(config_path))
    proc = run_script("export_saved_model.py", *_export_flags(
        config_path, prefix, vocab_file, tmp_path / "onnx", model_type="etc", etc_tokens_per_global=4,
        label_names=",".join(LABELS)))
    assert proc.returncode == 0, proc.stderr[-3000:]
    onnx_path = str(tmp_path / "onnx" / "1")
    assert export.read_export_info(onnx_path)["length_buckets"] == [MAX_SEQ_LENGTH]
    from realformer_tf.jobs.runner import RunOptions

    saved = export.export_from_checkpoint(
        str(tmp_path / "saved_model"), family=family, config=config, init_checkpoint=prefix, vocab_file=vocab_file,
        do_lower_case=True, task="classifier", label_names=LABELS, max_seq_length=MAX_SEQ_LENGTH,
        input_options=RunOptions(etc_tokens_per_global=4, max_seq_length=MAX_SEQ_LENGTH))
    serve = tf.saved_model.load(saved).signatures["serve_token_ids"]
    runner = _session(os.path.join(onnx_path, onnx_export.ONNX_FILE))
    names = [o.name for o in runner.get_outputs()]
    for batch, length in ((1, 5), (3, 17), (2, MAX_SEQ_LENGTH)):
        feed = _batch(SIZES["vocab_size"], batch, length, seed=length)
        want = {k: v.numpy() for k, v in serve(**{k: tf.constant(v) for k, v in feed.items()}).items()}
        _assert_same(want, dict(zip(names, runner.run(names, feed))), TOLERANCE, ("etc", batch, length))


@pytest.mark.parametrize("extra,expected", [
    (dict(onnx_quantize="int8"), "--onnx_quantize is for --output_format=onnx"),
    (dict(onnx_opset=17), "--onnx_opset is for --output_format=onnx"),
    (dict(output_format="onnx", model_type="causal_lm"), "not --model_type=causal_lm"),
    (dict(output_format="onnx", onnx_opset=9), "--onnx_opset=9 must be in [13, 18]"),
])
def test_bad_flag_combination_is_one_error_line(tmp_path, vocab_file, extra, expected):
    proc = run_script("export_saved_model.py", *flags(
        bert_config_file=h.write_config(tmp_path / "bert_config.json"), init_checkpoint=tmp_path / "missing",
        vocab_file=vocab_file, export_dir=tmp_path / "out", **extra))
    one_error_line(proc, expected)
    assert not (tmp_path / "out").exists()
