"""SavedModel export for serving: raw text in, predictions out (TF Serving layout).

    path = export.export_from_checkpoint(
        "exports/mrpc", bert_config=config, init_checkpoint="out/bert_model.ckpt",
        vocab_file="vocab.txt", do_lower_case=True, task="classifier",
        label_names=["0", "1"], max_seq_length=128)
    # -> exports/mrpc/1  (the next free integer version; TF Serving's layout)

The SavedModel is a plain `tf.Module` written by `tf.saved_model.save` (the weights as
`tf.Variable`s, the vocab asset and lookup table, the signature functions): it needs no
custom objects and loads without this package (`tf.saved_model.load(path)` after
`import tensorflow_text`, which registers the tokenizer ops). Its signatures and outputs
are `serving.signatures.ServingFunctions`'s; the text is tokenized in the graph by
`serving.text_encoder.BertTextEncoder` exactly as the training scripts tokenize it.

Serving: the graph uses three tensorflow-text ops — RegexSplitWithOffsets, NormalizeUTF8
and WordpieceTokenizeWithOffsets — besides core TensorFlow ops. The TF Serving
model server links tensorflow-text's ops (`@org_tensorflow_text//tensorflow_text:ops_lib`
in tensorflow_serving/model_servers/BUILD), and these three are old ops, so a standard
`tensorflow/serving` image of a matching TF version should load the model; this was not
run against a model server here. Other runtimes (the TF C API, Triton's TF backend) need
the tensorflow-text ops library loaded.

Keras 3 exports SavedModels too (`model.export(path, format="tf_saved_model")`, or
`keras.export.ExportArchive` with `track(model)` + `add_endpoint(...)`); that is enough
for a token-id endpoint alone. The raw-text signatures need the vocab asset and lookup
table next to the model, so the export here saves a plain `tf.Module` the way
ExportArchive does (the `tf.Variable`s the functions read, not the Keras objects; see
`ServingFunctions`), with the same result for `serve_token_ids`.
"""

import datetime
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
import uuid

import tensorflow as tf

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.errors import require_tensorflow_backend
from realformer_tf.families import get_family, variant_evidence
from realformer_tf.serving import signatures
from realformer_tf.serving.signatures import ServingFunctions
from realformer_tf.serving.text_encoder import BertTextEncoder, read_vocab
from realformer_tf.errors import ExportError

TASKS = ("classifier", "squad", "encoder")
EXPORT_INFO_FILE = "realformer_export.json"  # under <version>/assets.extra/


def next_version(export_dir):
    """1 + the largest integer version directory under export_dir (1 if none)."""
    if not tf.io.gfile.isdir(export_dir):
        return 1
    versions = [int(n.rstrip("/")) for n in tf.io.gfile.listdir(export_dir) if re.fullmatch(r"\d+/?", n)]
    return max(versions, default=0) + 1


def infer_task(init_checkpoint, family=None):
    """classifier / squad / encoder from the heads a checkpoint holds."""
    family = family or get_family("bert")
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    for task in ("classifier", "squad"):
        if family.checkpoint_heads(prefix, task):
            return task
    return "encoder"


def checkpoint_num_labels(init_checkpoint, family=None):
    """num_labels of the classifier head in a checkpoint (None without one)."""
    family = family or get_family("bert")
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    raw = ckpt.list_checkpoint(prefix)
    names = ckpt.original_names(raw) or {}
    weights = family.classifier_weights_name
    return int(raw[names[weights]][0]) if weights in names else None


def _resolve_labels(task, num_labels, label_names, is_regression):
    if task != "classifier":
        if label_names or num_labels or is_regression:
            raise ExportError(f"labels are for task classifier, not {task}")
        return None, None
    if is_regression:
        if label_names:
            raise ExportError("a regression classifier (e.g. STS-B) has no label names")
        if num_labels not in (None, 1):
            raise ExportError(f"a regression classifier has one output, not num_labels={num_labels}")
        return 1, None
    if label_names:
        label_names = [str(n) for n in label_names]
        if len(set(label_names)) != len(label_names):
            raise ExportError(f"label names must be unique, got {', '.join(label_names)}")
        if num_labels is not None and num_labels != len(label_names):
            raise ExportError(f"num_labels={num_labels} but {len(label_names)} label names were given")
        return len(label_names), label_names
    if not num_labels or num_labels < 1:
        raise ExportError("a classifier export needs its labels: label names or num_labels")
    return num_labels, [str(i) for i in range(num_labels)]


def _check_lengths(family, config, task, max_seq_length, max_query_length):
    if max_seq_length < 3:
        raise ExportError(f"max_seq_length={max_seq_length} leaves no room for [CLS] text [SEP]")
    limit = family.max_length(config)
    if limit and max_seq_length > limit:
        raise ExportError(f"max_seq_length={max_seq_length} exceeds {family.max_length_field}={limit} of the config")
    if task == "squad" and not 0 < max_query_length < max_seq_length - 3:
        raise ExportError(f"max_query_length={max_query_length} must be in [1, max_seq_length - 3), "
                          "as in run_squad.py")


def _check_outputs(model, task, label_names, is_regression):
    if task != "classifier":
        return
    if is_regression:
        if model.num_labels != 1:
            raise ExportError(f"a regression model has one output, this one {model.num_labels}")
    elif label_names is None or len(label_names) != model.num_labels:
        raise ExportError(f"the classifier has {model.num_labels} outputs; give as many label names")


def _new_version_path(export_dir, version):
    version = next_version(export_dir) if version is None else int(version)
    if version < 0:
        raise ExportError(f"version must be a non-negative integer, got {version}")
    final = os.path.join(export_dir, str(version))
    if tf.io.gfile.exists(final):
        raise ExportError(f"{final} already exists; give another --version or a new --export_dir")
    return final


def export_model(model, export_dir, *, task, vocab_file, do_lower_case, max_seq_length,
                 label_names=None, is_regression=False, version=None, max_query_length=64,
                 pad_to_max_seq_length=False, extra_info=None, family=None, input_options=None,
                 length_buckets=None, compile_model=False):
    """Writes `model` (a built task model of `family`, default BERT, with its weights) as
    `export_dir/<version>/`; returns that path.

    Args:
        task: "classifier", "squad" or "encoder" (BERT only).
        input_options: for ETC, the options its inputs are built with
            (`etc_tokens_per_global`); rows are then padded to the smallest of
            `length_buckets` + [max_seq_length] that the batch's longest row fits.
        length_buckets: the lengths a static-length family (ETC) is traced at, below
            max_seq_length (default `signatures.ETC_LENGTH_BUCKETS`; () pads every batch
            to max_seq_length).
        compile_model: compile the model part of the signatures with XLA (not the
            tokenizer); use with pad_to_max_seq_length, as XLA compiles once per input
            shape.
        version: defaults to the next free integer. The SavedModel is written under a
            temporary name and renamed into place, so a model server watching
            export_dir never sees a half-written version.
    """
    require_tensorflow_backend("SavedModel export")
    family = family or get_family("bert")
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    config = model.config
    _check_lengths(family, config, task, max_seq_length, max_query_length)
    _check_outputs(model, task, label_names, is_regression)
    tokens = read_vocab(vocab_file, config.vocab_size)
    info = {
        "task": task, "model_type": family.name, "model": config.describe(),
        f"{family.name}_config": config.to_dict(), "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length), "label_names": label_names,
        # A static-length family pads in the model part (to a length bucket) instead.
        "pad_to_max_seq_length": bool(pad_to_max_seq_length),
        "is_regression": bool(is_regression),
        **(family.run_identity(input_options) if input_options is not None else {}),
    }
    if task == "squad":
        info["max_query_length"] = int(max_query_length)
    info.update(extra_info or {})

    def save(path, local):
        vocab_path = write_vocab_asset(tokens, local)
        encoder = BertTextEncoder(
            vocab_path, do_lower_case, max_seq_length,
            pair_truncation="squad" if task == "squad" else "longest_first",
            max_query_length=max_query_length if task == "squad" else None,
            pad_to_max_seq_length=info["pad_to_max_seq_length"])
        serving = ServingFunctions(
            model, task, encoder, label_names, is_regression, family, input_options,
            length_buckets=signatures.ETC_LENGTH_BUCKETS if length_buckets is None else length_buckets,
            compile_model=compile_model)
        signature_functions = serving.concrete_functions()
        tf.saved_model.save(serving.saveable(signature_functions), path, signatures=signature_functions)
        return sorted(signature_functions)

    return write_version(export_dir, version, info, save)


def write_vocab_asset(tokens, folder):
    """The vocab as a file `folder/vocab.txt` (the asset keeps this basename); its path."""
    path = os.path.join(folder, "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    return path


def write_version(export_dir, version, info, save, info_file=None):
    """Writes a SavedModel as `export_dir/<version>/` (default: the next free integer)
    and returns that path: `save(path, local_folder)` writes it (the folder holds its
    assets until then) and returns its signature names, recorded with `info` in
    `assets.extra/realformer_export.json` (or a dict merged into `info`, written to
    `info_file` under the version folder: the ONNX export's layout). It is written
    under a temporary name and renamed into place, so a model server watching
    export_dir never sees half a version; on any failure nothing is left."""
    final = _new_version_path(export_dir, version)
    tf.io.gfile.makedirs(export_dir)
    temp = os.path.join(export_dir, f"temp-{os.path.basename(final)}-{uuid.uuid4().hex[:8]}")
    info = dict(info, created=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    local = tempfile.mkdtemp(prefix="realformer_export_")
    try:
        written = save(temp, local)  # inference calls only: no fused-kernel op
        if isinstance(written, dict):
            info.update(written)
        else:
            info["signatures"] = written
        info_path = os.path.join(temp, info_file or os.path.join("assets.extra", EXPORT_INFO_FILE))
        tf.io.gfile.makedirs(os.path.dirname(info_path))
        with tf.io.gfile.GFile(info_path, "w") as f:
            json.dump(info, f, indent=2, sort_keys=True)
        tf.io.gfile.rename(temp, final)
    except BaseException:
        if tf.io.gfile.exists(temp):
            tf.io.gfile.rmtree(temp)
        raise
    finally:
        shutil.rmtree(local, ignore_errors=True)
    return final


def export_from_checkpoint(export_dir, *, init_checkpoint, vocab_file, do_lower_case, bert_config=None,
                           family=None, config=None, task=None, num_labels=None, label_names=None,
                           is_regression=False, max_seq_length=128, version=None, max_query_length=64,
                           pad_to_max_seq_length=False, input_options=None, log=None, writer=None):
    """Builds the task's model, loads a checkpoint of its family (original-named or one
    of our training checkpoints) and exports it; returns the version path.

    Args:
        bert_config: the model's config, a file path or a config object.
        config: the same (the name the runner uses); give one of the two.
        family: a `realformer_tf.families` family (default BERT).
        task: None takes it from the checkpoint's heads; a classifier's label count,
            when neither `label_names` nor `num_labels` is given, from its weights.
        log: where the line about a variant decided from the weights goes (default
            absl logging).
        writer: what writes the built model, called as `export_model` is (the default;
            `serving.onnx_export.export_from_checkpoint` passes its ONNX writer).
    """
    family = family or get_family("bert")
    if config is None:
        config = bert_config if isinstance(bert_config, family.config_class) else family.load_config(bert_config)
    prefix = ckpt.resolve_checkpoint(init_checkpoint)
    # A config file without residual_attention: the weights decide (one line) or an error.
    config = variant_evidence.resolve(family, config, prefix, source=f"--bert_config_file={bert_config}" if isinstance(bert_config, str) else "the config",
                                      log=log)
    task = task or infer_task(prefix, family)
    if task not in TASKS:
        raise ExportError(f"task {task!r} is not one of {', '.join(TASKS)}")
    if task not in family.export_tasks:
        raise ExportError(f"task {task!r} cannot be exported for model type {family.name}; use one of "
                          f"{', '.join(family.export_tasks)}")
    if task == "classifier" and not label_names and not num_labels and not is_regression:
        num_labels = checkpoint_num_labels(prefix, family)
        if num_labels is None:
            raise ExportError(f"{prefix} has no classifier head ({family.classifier_weights_name}); export "
                              "it as task encoder, or give the fine-tuned checkpoint")
    num_labels, label_names = _resolve_labels(task, num_labels, label_names, is_regression)
    _check_lengths(family, config, task, max_seq_length, max_query_length)  # fail before building
    read_vocab(vocab_file, config.vocab_size)
    # The family's one builder; float32: the serving graph runs in float32 whatever the
    # training policy was.
    model = family.build_model(config, task, num_labels=num_labels, dtype="float32")
    family.load_checkpoint(model, prefix)
    return (writer or export_model)(
        model, export_dir, task=task, vocab_file=vocab_file, do_lower_case=do_lower_case,
        max_seq_length=max_seq_length, label_names=label_names, is_regression=is_regression,
        version=version, max_query_length=max_query_length, pad_to_max_seq_length=pad_to_max_seq_length,
        extra_info={"init_checkpoint": prefix}, family=family, input_options=input_options)


def read_export_info(path):
    """The export's description (task, labels, config, ...): a SavedModel's from
    assets.extra, an ONNX export's from the version folder."""
    saved_model_info = os.path.join(path, "assets.extra", EXPORT_INFO_FILE)
    info = saved_model_info if tf.io.gfile.exists(saved_model_info) else os.path.join(path, EXPORT_INFO_FILE)
    with tf.io.gfile.GFile(info) as f:
        return json.load(f)


# `saved_model_cli run` loads the graph without importing tensorflow_text, so its ops are
# unregistered ("Op type not registered 'NormalizeUTF8'"); this runs the same CLI with
# them registered. (`saved_model_cli show` works as is.)
SAVED_MODEL_CLI_WITH_TEXT_OPS = (
    "import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli as c; "
    'sys.argv[0] = "saved_model_cli"; c.main()')


# task -> (signature, text input, the other inputs) of the generative exports.
TEXT_ONLY_TASKS = {
    "generate": ("generate", "prompt", ";max_new_tokens=20;temperature=0.0;top_k=0;top_p=1.0;seed=0"),
    "translate": ("translate", "source", ";beam_size=4"),
}


def saved_model_cli_command(path, task="classifier", python=None, signature="serving_default",
                            text_a=None, text_b=None):
    """A ready-to-copy `saved_model_cli run` line (with the tensorflow-text ops loaded)
    for a text signature of the export at `path`."""
    if task in TEXT_ONLY_TASKS:  # the generative signatures: their own name and inputs
        signature, field, extra = TEXT_ONLY_TASKS[task]
        exprs = f"{field}={json.dumps([text_a or 'The cat sees the river.'], ensure_ascii=False)}{extra}"
    else:
        if text_a is None:
            text_a, text_b = (("What does the cat see?", "The cat sees the river.") if task == "squad"
                              else ("The cat sees the river.", "A dog likes the book."))
        exprs = f"text_a={json.dumps([text_a], ensure_ascii=False)}"
        if signature == "serving_default":
            exprs += f";text_b={json.dumps([text_b or ''], ensure_ascii=False)}"
    python = python or sys.executable or "python"
    return " ".join([
        shlex.quote(python), "-c", shlex.quote(SAVED_MODEL_CLI_WITH_TEXT_OPS), "run",
        "--dir", shlex.quote(str(path)), "--tag_set", "serve", "--signature_def", signature,
        "--input_exprs", shlex.quote(exprs),
    ])
