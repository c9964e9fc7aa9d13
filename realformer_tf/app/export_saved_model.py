"""Exports a fine-tuned BERT / RealFormer / NormFormer model as a SavedModel for serving.

The SavedModel takes raw text (tokenized in the graph exactly as run_classifier.py /
run_squad.py tokenize for training) or token ids, and is written in TF Serving's
layout, `export_dir/<version>/`:

  python export_saved_model.py --task=classifier --task_name=MRPC \
    --bert_config_file=/tmp/mrpc_output/bert_config.json \
    --init_checkpoint=/tmp/mrpc_output/bert_model.ckpt \
    --vocab_file=$BERT_BASE_DIR/vocab.txt --do_lower_case=True \
    --max_seq_length=128 --export_dir=/tmp/mrpc_export

Signatures: `serving_default` (text_a, text_b; empty text_b = single sentence),
`serve_text_a` (text_a only; not for squad) and `serve_token_ids` (input_ids,
input_mask, segment_ids). See realformer_tf/serving/export.py.

--output_format=onnx writes ONNX instead, in the same layout (Triton's for ONNX models):
`export_dir/<version>/model.onnx` (the token-id signature: input_ids, input_mask,
segment_ids -> its outputs; batch and sequence axes dynamic), `tokenizer.json` (Hugging
Face tokenizers: the model's WordPiece, casing and [CLS] a [SEP] b [SEP] packing) and
`realformer_export.json`; --onnx_quantize=int8 adds `model.int8.onnx` (onnxruntime's
dynamic quantization). See realformer_tf/serving/onnx_export.py and docs/serving.md.

A causal LM (--model_type=causal_lm; --init_checkpoint its run's output_dir, the config
lm_config.json beside it unless --bert_config_file is given; --vocab_file or
--spm_model_file) gets the signatures `generate` (prompt, max_new_tokens, temperature,
top_k, top_p, seed -> text) and `score` (text -> log_likelihood): see
realformer_tf/serving/lm_export.py.
"""

import functools

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.serving import export
from realformer_tf.jobs import outputs
from realformer_tf.data import glue
from realformer_tf.families import MODEL_TYPES, get_family
from realformer_tf.data.lm_tokenizer import LmTokenizer
from realformer_tf.families.causal_lm import CAUSAL_LM
from realformer_tf.jobs.runner import RunOptions
from realformer_tf.serving import lm_export
from realformer_tf.serving import onnx_export


OUTPUT_FORMATS = ("saved_model", "onnx")


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("bert_config_file", None, "The config json file of the model.", flag_values=fv)
    flags.DEFINE_enum("model_type", "bert", MODEL_TYPES, "bert, or etc (then --bert_config_file is an ETC config).", flag_values=fv)
    flags.DEFINE_integer("etc_tokens_per_global", 16, "ETC only: long tokens per global token, as in training.", flag_values=fv)
    flags.DEFINE_string("init_checkpoint", None,
                        "The fine-tuned checkpoint: an original-named one (e.g. output_dir/bert_model.ckpt), "
                        "one of our training checkpoints, or a directory (its latest checkpoint).", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "The vocabulary file the model was trained with.", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "causal_lm: the SentencePiece model it was trained with (instead of "
                        "--vocab_file).", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether the model was trained on lower-cased text.", flag_values=fv)
    flags.DEFINE_enum("task", None, export.TASKS,
                      "The model's head; default: taken from the checkpoint (output_weights: classifier, "
                      "cls/squad: squad, neither: encoder).", flag_values=fv)
    flags.DEFINE_string("task_name", None, "A GLUE/XNLI task (e.g. MRPC): take its labels (STS-B: regression).", flag_values=fv)
    flags.DEFINE_list("label_names", None, "Comma-separated label names, in label-id order.", flag_values=fv)
    flags.DEFINE_integer("num_labels", None, "Number of labels (names 0..n-1) when no names are given; "
                         "default: from the checkpoint's output_weights.", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "Longer inputs are truncated as in training.", flag_values=fv)
    flags.DEFINE_integer("max_query_length", 64, "squad: the question's WordPiece budget, as in run_squad.py.", flag_values=fv)
    flags.DEFINE_bool("pad_to_max_seq_length", False,
                      "Pad every batch to max_seq_length (static shapes) instead of to its longest row.", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "TF Serving model base directory; the model goes to export_dir/<version>.", flag_values=fv)
    flags.DEFINE_integer("version", None, "Version number (default: the next free integer under export_dir).", flag_values=fv)
    flags.DEFINE_enum("output_format", "saved_model", OUTPUT_FORMATS,
                      "saved_model (TF Serving, raw text in), or onnx (model.onnx with token ids in, plus "
                      "tokenizer.json for raw text).", flag_values=fv)
    flags.DEFINE_enum("onnx_quantize", None, onnx_export.QUANTIZE_CHOICES,
                      "--output_format=onnx: also write model.int8.onnx, onnxruntime's dynamic int8 "
                      "quantization of model.onnx.", flag_values=fv)
    flags.DEFINE_integer("onnx_opset", None, f"--output_format=onnx: the ONNX opset (default "
                         f"{onnx_export.DEFAULT_OPSET}).", flag_values=fv)


def _labels(f, task):
    """(label_names, num_labels, is_regression) from --task_name / --label_names / --num_labels."""
    if not f.task_name:
        return f.label_names, f.num_labels, False
    cli.require(task in (None, "classifier"), f"--task_name is for --task=classifier, not --task={task}")
    cli.require(not f.label_names, "give either --task_name or --label_names, not both")
    _, glue_task = glue.get_task(f.task_name)
    if glue_task.is_regression:
        return None, f.num_labels, True
    return list(glue_task.labels), f.num_labels, False


def run_causal_lm(f):
    """A causal LM's export (`generate` and `score` signatures)."""
    for name in ("init_checkpoint", "export_dir"):
        cli.require(getattr(f, name), f"--{name} is required")
    outputs.check_output_dir(f.export_dir, "--export_dir")  # before the model is built
    tokenizer = LmTokenizer.from_files(f.vocab_file, f.spm_model_file, f.do_lower_case)
    model, config = CAUSAL_LM.load_trained(f.init_checkpoint, f.bert_config_file)
    print(config.describe(), flush=True)
    path = lm_export.export_causal_lm(model, f.export_dir, tokenizer=tokenizer, vocab_file=f.vocab_file,
                                      spm_model_file=f.spm_model_file, do_lower_case=f.do_lower_case,
                                      version=f.version)
    print(f"Exported the causal LM to {path}; signatures: generate, score", flush=True)


def _check_format_flags(f):
    """One error line for a flag combination the output format cannot take."""
    onnx = f.output_format == "onnx"
    for name in ("onnx_quantize", "onnx_opset"):
        cli.require(onnx or getattr(f, name) is None, f"--{name} is for --output_format=onnx")
    cli.require(not onnx or f.model_type != "causal_lm",
                "--output_format=onnx exports the BERT and ETC task models, not --model_type=causal_lm "
                "(its generate signature decodes in a loop); export it as a SavedModel")


def _report_onnx(path, info):
    print(f"Exported {info['task']} model as ONNX to {path}: " + ", ".join(info["files"]), flush=True)
    print(f"Inputs: {', '.join(info['inputs'])} (int32 [batch, sequence]); outputs: "
          f"{', '.join(info['outputs'])}", flush=True)
    if info.get("label_names"):
        print("Labels: " + ", ".join(info["label_names"]), flush=True)
    check = info.get("check")
    if isinstance(check, dict):
        print(f"onnxruntime vs TensorFlow on sample batches: max |difference| {check['max_abs_difference']:.2g}",
              flush=True)


def run(f):
    """The export from the parsed flags `f`."""
    _check_format_flags(f)
    if f.model_type == "causal_lm":
        return run_causal_lm(f)
    for name in ("bert_config_file", "init_checkpoint", "vocab_file", "export_dir"):
        cli.require(getattr(f, name), f"--{name} is required")
    outputs.check_output_dir(f.export_dir, "--export_dir")  # before the model is built
    family = get_family(f.model_type)
    config = family.load_config(f.bert_config_file)
    print(config.describe(), flush=True)
    label_names, num_labels, is_regression = _labels(f, f.task)
    onnx_options = {"quantize": f.onnx_quantize, "opset": f.onnx_opset or onnx_export.DEFAULT_OPSET}
    writer = (functools.partial(onnx_export.export_from_checkpoint, **onnx_options) if f.output_format == "onnx"
              else export.export_from_checkpoint)
    path = writer(
        f.export_dir, family=family, config=config, init_checkpoint=f.init_checkpoint,
        vocab_file=f.vocab_file, do_lower_case=f.do_lower_case,
        task=f.task or ("classifier" if f.task_name else None),
        num_labels=num_labels, label_names=label_names, is_regression=is_regression,
        max_seq_length=f.max_seq_length, version=f.version, max_query_length=f.max_query_length,
        pad_to_max_seq_length=f.pad_to_max_seq_length,
        input_options=RunOptions(etc_tokens_per_global=f.etc_tokens_per_global, max_seq_length=f.max_seq_length),
        log=lambda line: print(line, flush=True))
    info = export.read_export_info(path)
    if f.output_format == "onnx":
        return _report_onnx(path, info)
    print(f"Exported {info['task']} model to {path}", flush=True)
    print("Signatures: " + ", ".join(info["signatures"]), flush=True)
    if info.get("label_names"):
        print("Labels: " + ", ".join(info["label_names"]), flush=True)
    print("Try it (saved_model_cli needs the tensorflow-text ops loaded, hence the python -c "
          "wrapper; `saved_model_cli show --all --dir ...` works as is):", flush=True)
    print("  " + export.saved_model_cli_command(path, info["task"]), flush=True)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run)
