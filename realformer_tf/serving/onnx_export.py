"""ONNX export for serving: token ids in, the SavedModel's outputs out, with a
`tokenizer.json` beside the model for raw text.

    path = onnx_export.export_from_checkpoint(
        "exports/mrpc_onnx", bert_config="out/bert_config.json",
        init_checkpoint="out/bert_model.ckpt", vocab_file="vocab.txt", do_lower_case=True,
        task="classifier", label_names=["0", "1"], max_seq_length=128, quantize="int8")
    # -> exports/mrpc_onnx/1/ with model.onnx, model.int8.onnx, tokenizer.json and
    #    realformer_export.json (Triton's layout: <model>/<version>/model.onnx)

What is converted is the SavedModel's own `serve_token_ids` function
(`serving.signatures.ServingFunctions`): inputs `input_ids`, `input_mask`,
`segment_ids` int32 [batch, sequence], both axes dynamic; outputs those of the
signature (classifier `probabilities`, `label_id`, `label` (string), `logits`;
regression `score`, `logits`; squad `start_logits`, `end_logits`; encoder
`pooled_output`, `sequence_output`, without the signature's echo of `input_mask`: an
ONNX graph cannot have an output named like an input). The inference graph holds only
core TensorFlow ops (the fused kernels run in training calls only), which tf2onnx
converts; the text encoder (tensorflow-text ops) stays out of the ONNX graph:
`tokenizer.json` (Hugging Face `tokenizers`: BERT's normalizer, pre-tokenizer and
WordPiece from the run's vocab and casing, `[CLS] a [SEP] b [SEP]`) takes its place.
ETC is exported too, running every batch at max_seq_length: its length buckets are a
`tf.switch_case`, which tf2onnx 1.17 leaves as TensorFlow's `_SwitchN`.

Converter: tf2onnx (`tf2onnx.convert.from_function`), also what Keras 3's own
`model.export(format="onnx")` calls on TensorFlow; converting the serving function
gives the SavedModel's signature rather than the model's raw outputs. tf2onnx 1.17.0
merges back-to-back Reshape nodes wrongly where the second shape holds a 0 ("copy this
dimension"), which broke the Keras model's graph (`_safe_reshape_merge` limits that);
every export is checked against the TensorFlow function before it is written
(docs/serving.md, "ONNX").

The ONNX graph does not carry the SavedModel's input checks (tf2onnx drops Assert ops):
ids outside the vocab or segment vocabulary fail in onnxruntime's Gather, but a length
above max_seq_length (up to max_position_embeddings) or a mask value other than 0/1 is
not refused.
"""

import contextlib
import functools
import json
import logging
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

from realformer_tf.errors import ExportError, require_tensorflow_backend
from realformer_tf.families import get_family
from realformer_tf.serving import export, signatures
from realformer_tf.serving.text_encoder import BertTextEncoder, read_vocab

ONNX_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"
TOKENIZER_FILE = "tokenizer.json"
INFO_FILE = "realformer_export.json"  # at the top of the version folder
# ONNX opset of the export: inside tf2onnx 1.17's range (up to 18), and onnxruntime 1.13
# and later run it. Opsets 13 and 18 also convert and give the same outputs (checked
# once by hand, not in the tests).
DEFAULT_OPSET = 17
QUANTIZE_CHOICES = ("int8",)
# The export refuses a converted graph whose outputs differ from TensorFlow's by more
# than this on its sample batches (float32; measured differences are ~1e-6).
CHECK_TOLERANCE = 1e-4
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")
ONNX_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def _require_modules(quantize=None):
    """tf2onnx, onnx and tokenizers (and onnxruntime to quantize), or one ExportError
    saying what to install."""
    missing = []
    for name in ("tf2onnx", "onnx", "tokenizers") + (("onnxruntime",) if quantize else ()):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(
            f"--output_format=onnx needs {', '.join(missing)}: pip install \".[onnx]\" "
            "(tf2onnx, onnx, onnxruntime, tokenizers)")


def check_exportable(family, quantize=None, opset=DEFAULT_OPSET):
    """Raises ExportError for an ONNX export that cannot be made, before any model is
    built: a family without a serving export, a bad opset or quantization, missing
    converter modules."""
    if not set(family.export_tasks) & {"classifier", "squad", "encoder"}:
        raise ExportError(f"--output_format=onnx exports the BERT and ETC task models, not --model_type={family.name}")
    if quantize not in (None, *QUANTIZE_CHOICES):
        raise ExportError(f"quantization {quantize!r} is not one of {', '.join(QUANTIZE_CHOICES)}")
    if not 13 <= int(opset) <= 18:
        raise ExportError(f"--onnx_opset={opset} must be in [13, 18] (tf2onnx 1.17's range from "
                          "the opset that added the ops a BERT graph needs)")
    _require_modules(quantize)


@contextlib.contextmanager
def _safe_reshape_merge():
    """tf2onnx's back-to-back Reshape merge, only where it is right.

    `Reshape(Reshape(x, s1), s2)` equals `Reshape(x, s2)` unless s2 copies a dimension
    from its input (a 0 entry, allowzero unset): that dimension then comes from x
    instead of from the first reshape's output. tf2onnx 1.17.0 merges regardless
    (optimizer/back_to_back_optimizer.py, `_optimize_reshape_reshape`); this keeps the
    pair when s2 is not a constant free of zeros.
    """
    from tf2onnx.optimizer import back_to_back_optimizer as b2b

    key = ("Reshape",)
    original = b2b._func_map.get(key)
    if original is None:  # another tf2onnx layout: nothing to guard
        yield
        return

    def merge(g, node, consumer_nodes):
        second = consumer_nodes[0] if len(consumer_nodes) == 1 else None
        if second is not None and second.type == "Reshape":
            shape = second.inputs[1]
            if not shape.is_const() or (0 in shape.get_tensor_value(as_list=True)
                                        and not second.get_attr_value("allowzero", 0)):
                return []
        return original(g, node, consumer_nodes)

    b2b._func_map[key] = merge
    try:
        yield
    finally:
        b2b._func_map[key] = original


# What TensorFlow's grappler prints at INFO level (whatever TF_CPP_MIN_LOG_LEVEL says) each
# time tf2onnx runs it on the graph.
_GRAPPLER_NOISE = ("single_machine.cc", "devices.cc:", "absl::InitializeLog()")


@contextlib.contextmanager
def _quiet_tf2onnx():
    """tf2onnx logs every step at INFO/WARNING, and the grappler pass it runs prints
    two INFO lines per call on stderr: only errors and other lines are kept."""
    loggers = [logging.getLogger(name) for name in ("tf2onnx", "tensorflow")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    with tempfile.TemporaryFile(mode="w+b") as captured:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(captured.fileno(), 2)
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            for lg, level in zip(loggers, levels):
                lg.setLevel(level)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not any(noise in line for noise in _GRAPPLER_NOISE):
                    sys.stderr.write(line)


@contextlib.contextmanager
def _optimizer_errors_raise():
    """tf2onnx deep-copies the whole graph, weights included, before each optimizer pass
    so that a pass that fails can be skipped; that copying is half of a conversion's
    time (13 s of 28 s for a 4-layer, 512-wide model). With TF2ONNX_CATCH_ERRORS set, it
    does not copy and a failing pass raises instead; `convert` then converts again
    without it. A value the user set is left as it is."""
    name = "TF2ONNX_CATCH_ERRORS"
    if name in os.environ:
        yield
        return
    os.environ[name] = "FALSE"
    try:
        yield
    finally:
        os.environ.pop(name, None)


class _DropPreprocessingAdvice(logging.Filter):
    """onnxruntime's quantizer advises (a root-logger warning) running its shape-inference
    pre-processing first; the export quantizes the graph as converted, on purpose."""

    def filter(self, record):
        return "pre-processing before quantization" not in record.getMessage()


def _name_dynamic_axes(model_proto):
    """`batch` and `sequence` for the dynamic axes tf2onnx names `unk__N`: axis 0 of every
    input and output, and axis 1 of the inputs and of the per-token outputs."""
    for value in list(model_proto.graph.input) + list(model_proto.graph.output):
        dims = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims[:2]):
            if not dim.HasField("dim_value"):
                dim.dim_param = ("batch", "sequence")[axis]


def convert(serving, opset=DEFAULT_OPSET, metadata=None):
    """The ONNX ModelProto of `serving.serve_token_ids` (a `ServingFunctions`).

    Raises:
      ExportError: when a TensorFlow op is left unconverted (tf2onnx would keep it as a
        custom op that onnxruntime cannot run).
    """
    import onnx
    import tf2onnx

    signature = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]

    @tf.function(input_signature=signature, autograph=False)
    def function(input_ids, input_mask, segment_ids):
        outputs = serving.serve_token_ids(input_ids, input_mask, segment_ids)
        # The encoder's signature returns its input_mask input again; an ONNX graph's
        # names are unique, so an output cannot share the input's name (the client
        # has the mask it sent).
        return {k: v for k, v in outputs.items() if k not in INPUT_NAMES}

    def run():
        with _quiet_tf2onnx(), _safe_reshape_merge():
            return tf2onnx.convert.from_function(function, input_signature=signature, opset=int(opset))[0]

    try:
        with _optimizer_errors_raise():
            model_proto = run()
    except Exception:  # noqa: BLE001  an optimizer pass failed: tf2onnx's default skips it
        model_proto = run()
    foreign = sorted({f"{n.op_type}" + (f" ({n.domain})" if n.domain else "") for n in model_proto.graph.node
                      if n.domain not in ONNX_DOMAINS or not onnx.defs.has(n.op_type, n.domain)})
    if foreign:
        raise ExportError(f"tf2onnx left TensorFlow ops it cannot convert: {', '.join(foreign)}")
    _name_dynamic_axes(model_proto)
    model_proto.producer_name = "realformer_tf (tf2onnx)"
    model_proto.doc_string = "realformer_tf serve_token_ids: token ids in; see realformer_export.json"
    for key, value in (metadata or {}).items():
        entry = model_proto.metadata_props.add()
        entry.key, entry.value = key, value if isinstance(value, str) else json.dumps(value)
    return model_proto


def session(path, threads=1):
    """An onnxruntime CPU session of the model file at `path`."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def sample_batches(vocab_size, type_vocab_size, max_seq_length, seed=0):
    """Token-id batches of two sizes and lengths (the longest max_seq_length), the last
    one with padding: what the export's self-check runs."""
    rng = np.random.default_rng(seed)
    batches = []
    for batch, length in ((1, min(5, max_seq_length)), (3, max_seq_length)):
        ids = rng.integers(0, vocab_size, (batch, length)).astype(np.int32)
        mask = np.ones((batch, length), np.int32)
        mask[-1, max(1, length // 2):] = 0
        segments = (np.arange(length)[None, :] >= length // 2).astype(np.int32) * (type_vocab_size > 1)
        segments = np.broadcast_to(segments, (batch, length)).astype(np.int32)
        batches.append({"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask})
    return batches


def max_difference(want, got):
    """The largest |difference| over the numeric outputs of two {name: array} results;
    string outputs must be equal (else inf)."""
    worst = 0.0
    for name, value in want.items():
        value, other = np.asarray(value), np.asarray(got[name])
        if value.dtype.kind in "OSU":
            as_text = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in value.ravel()]
            if as_text != [str(v) for v in other.ravel()]:
                return float("inf")
            continue
        if value.shape != other.shape:
            return float("inf")
        if value.size:
            worst = max(worst, float(np.max(np.abs(value.astype(np.float64) - other.astype(np.float64)))))
    return worst


def check_against(serving, path, batches):
    """Max |onnxruntime - TensorFlow| over the outputs of `batches` (inf where a string
    output or a shape differs)."""
    runner = session(path)
    names = [o.name for o in runner.get_outputs()]
    worst = 0.0
    for feed in batches:
        want = {k: v.numpy() for k, v in serving.serve_token_ids(**feed).items() if k not in INPUT_NAMES}
        if sorted(want) != sorted(names):
            raise ExportError(f"the ONNX outputs {sorted(names)} are not the signature's {sorted(want)}")
        got = dict(zip(names, runner.run(names, feed)))
        worst = max(worst, max_difference(want, got))
    return worst


def quantize_int8(source, target):
    """onnxruntime's dynamic quantization of the model at `source`, written to `target`:
    the weight matmuls become MatMulInteger on int8 weights with the activations
    quantized to uint8 at each call (DynamicQuantizeLinear), the embedding tables are
    stored in 8 bits and dequantized after the lookup; attention's activation-by-
    activation matmuls, softmax, layer norms and gelu stay float32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    advice = _DropPreprocessingAdvice()
    logging.getLogger().addFilter(advice)
    try:
        quantize_dynamic(source, target, weight_type=QuantType.QInt8)
    finally:
        logging.getLogger().removeFilter(advice)


def tokenizer(tokens, do_lower_case, max_seq_length, task="classifier", pad_to_max_seq_length=False):
    """A Hugging Face `tokenizers.Tokenizer` giving the SavedModel's text encoding (the
    original BERT BasicTokenizer + WordPiece, `[CLS] a [SEP] b [SEP]`, segment ids,
    padding with id 0 and mask 0) from the vocab `tokens` in id order."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    vocab = {token: i for i, token in enumerate(tokens)}
    # Original BERT: 400-character words become [UNK] (tokenizers' default is 100).
    result = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##",
                                        max_input_chars_per_word=400))
    # strip_accents follows lowercase, as the original's do_lower_case does both.
    result.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                   strip_accents=bool(do_lower_case),
                                                   lowercase=bool(do_lower_case))
    result.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    result.decoder = decoders.WordPiece(prefix="##")
    result.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    # squad: the context (second text) is cut, as run_squad.py's first doc_stride window.
    result.enable_truncation(max_length=int(max_seq_length),
                             strategy="only_second" if task == "squad" else "longest_first")
    padding = dict(pad_id=0, pad_type_id=0, pad_token=tokens[0])
    if pad_to_max_seq_length:
        padding["length"] = int(max_seq_length)
    result.enable_padding(**padding)
    return result


def export_model(model, export_dir, *, task, vocab_file, do_lower_case, max_seq_length,
                 label_names=None, is_regression=False, version=None, max_query_length=64,
                 pad_to_max_seq_length=False, extra_info=None, family=None, input_options=None,
                 quantize=None, opset=DEFAULT_OPSET):
    """Writes `model` (a built BERT-family task model with its weights) as ONNX in
    `export_dir/<version>/` (model.onnx, tokenizer.json, realformer_export.json, and
    model.int8.onnx with `quantize="int8"`); returns that path. The arguments are
    `serving.export.export_model`'s, plus `quantize` and the ONNX `opset`.

    Raises:
      ExportError: for a family or option that cannot be exported (before any
        conversion), or a converted graph whose outputs differ from TensorFlow's.
    """
    require_tensorflow_backend("ONNX export")
    family = family or get_family("bert")
    check_exportable(family, quantize, opset)
    if task not in export.TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(export.TASKS)}")
    config = model.config
    export._check_lengths(family, config, task, max_seq_length, max_query_length)
    export._check_outputs(model, task, label_names, is_regression)
    tokens = read_vocab(vocab_file, config.vocab_size)
    import onnx
    import tf2onnx

    info = {
        "format": "onnx", "task": task, "model_type": family.name, "model": config.describe(),
        f"{family.name}_config": config.to_dict(), "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length), "label_names": label_names,
        "pad_to_max_seq_length": bool(pad_to_max_seq_length), "is_regression": bool(is_regression),
        "opset": int(opset), "converter": f"tf2onnx {tf2onnx.__version__}",
        "inputs": list(INPUT_NAMES), "tokenizer": TOKENIZER_FILE,
        # ETC: every batch padded to max_seq_length in the graph (no length buckets).
        **({"length_buckets": [int(max_seq_length)]} if family.static_length else {}),
        **(family.run_identity(input_options) if input_options is not None else {}),
    }
    if task == "squad":
        info["max_query_length"] = int(max_query_length)
    info.update(extra_info or {})

    def save(path, local):
        vocab_path = export.write_vocab_asset(tokens, local)
        encoder = BertTextEncoder(vocab_path, do_lower_case, max_seq_length,
                                  pair_truncation="squad" if task == "squad" else "longest_first",
                                  max_query_length=max_query_length if task == "squad" else None)
        # A static-length family (ETC) runs at max_seq_length: its length buckets are a
        # switch_case, which tf2onnx 1.17 leaves as TensorFlow's _SwitchN.
        serving = signatures.ServingFunctions(model, task, encoder, label_names, is_regression, family,
                                              input_options, length_buckets=())
        metadata = {k: info[k] for k in ("task", "model", "do_lower_case", "max_seq_length", "label_names")}
        model_proto = convert(serving, opset, metadata)
        onnx.checker.check_model(model_proto)
        local_model = os.path.join(local, ONNX_FILE)
        onnx.save(model_proto, local_model)
        segment_vocab = getattr(config, "type_vocab_size", None) or getattr(config, "segment_vocab_size", 1)
        batches = sample_batches(config.vocab_size, int(segment_vocab), max_seq_length)
        written = {"outputs": [o.name for o in model_proto.graph.output], "files": [ONNX_FILE, TOKENIZER_FILE]}
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            written["check"] = "not run (onnxruntime not installed)"
        else:
            difference = check_against(serving, local_model, batches)
            if not difference <= CHECK_TOLERANCE:
                raise ExportError(f"the converted graph's outputs differ from TensorFlow's by {difference:.3g} "
                                  f"(> {CHECK_TOLERANCE}); not written")
            written["check"] = {"max_abs_difference": difference, "batches": [list(b["input_ids"].shape)
                                                                              for b in batches]}
        files = [local_model]
        if quantize == "int8":
            local_int8 = os.path.join(local, INT8_FILE)
            quantize_int8(local_model, local_int8)
            files.append(local_int8)
            written["files"].insert(1, INT8_FILE)
            written["quantized"] = {"int8": INT8_FILE, "method": "onnxruntime.quantization.quantize_dynamic, "
                                    "QInt8 weights, activations quantized per call"}
        local_tokenizer = os.path.join(local, TOKENIZER_FILE)
        tokenizer(tokens, do_lower_case, max_seq_length, task, pad_to_max_seq_length).save(local_tokenizer)
        files.append(local_tokenizer)
        tf.io.gfile.makedirs(path)
        for file in files:
            tf.io.gfile.copy(file, os.path.join(path, os.path.basename(file)), overwrite=True)
        return written

    return export.write_version(export_dir, version, info, save, info_file=INFO_FILE)


def export_from_checkpoint(export_dir, *, quantize=None, opset=DEFAULT_OPSET, family=None, **kwargs):
    """`serving.export.export_from_checkpoint` (same keywords: builds the task's model
    and loads the checkpoint) writing ONNX (`export_model`); an export that cannot be
    made is refused before the checkpoint is read."""
    family = family or get_family("bert")
    check_exportable(family, quantize, opset)
    writer = functools.partial(export_model, quantize=quantize, opset=opset)
    return export.export_from_checkpoint(export_dir, family=family, writer=writer, **kwargs)


def read_info(path):
    """The export's description (realformer_export.json) of an ONNX version folder."""
    with tf.io.gfile.GFile(os.path.join(path, INFO_FILE)) as f:
        return json.load(f)

