"""Conversions between the checkpoint formats the models read:

- our training checkpoints (written by the training loop every --save_checkpoints_steps,
  with optimizer state, weights keyed by their original names),
- original-named TF1 checkpoints (what google-research/bert and other BERT tools read),
- Hugging Face BERT folders (config.json + model.safetensors).

Every input is read by the model's own loader (`load_bert_checkpoint`) and written by
its own writer, so a conversion checks names and shapes exactly as loading does.
"""

from realformer_tf import hf_checkpoint, modeling
from realformer_tf.checkpoint import CheckpointError, is_object_based, list_checkpoint, resolve_checkpoint

TASK_MODELS = ("pretraining", "classifier", "squad", "encoder")
OUTPUT_FORMATS = ("checkpoint", "hf")

def build_model(config, task, num_labels=2):
    if task == "pretraining":
        return modeling.BertPretrainingModel(config)
    if task == "classifier":
        return modeling.BertClassifierModel(config, num_labels=num_labels)
    if task == "squad":
        return modeling.BertSquadModel(config)
    if task == "encoder":
        return modeling.BertModel(config)
    raise ValueError(f"task {task!r} is not one of {', '.join(TASK_MODELS)}")

def convert(config, source, output, task, num_labels=2, output_format="checkpoint"):
    """Loads `source` (a training checkpoint prefix or directory, an original-named
    checkpoint, or a Hugging Face folder) into a `task` model and writes it as an
    original-named checkpoint at prefix `output` (output_format "checkpoint") or as a
    Hugging Face folder `output` ("hf"). Returns (what was read, what was written).

    Raises:
        CheckpointError when `source` already is an original-named checkpoint and the
        output is one too (nothing to convert), or when it does not fit `config`.
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    prefix = resolve_checkpoint(source)
    already_original = not hf_checkpoint.is_hf_folder(prefix) and not is_object_based(list_checkpoint(prefix))
    if output_format == "checkpoint" and already_original:
        raise CheckpointError(f"{prefix} already uses the original names; use it as it is")
    model = build_model(config, task, num_labels)
    read = model.load_bert_checkpoint(prefix)
    if output_format == "hf":
        return read, model.save_hf_folder(output)
    return read, model.save_bert_checkpoint(output)

def training_to_original(config, input_checkpoint, output_prefix, task, num_labels=2):
    """A training checkpoint -> an original-named one (see `convert`)."""
    return convert(config, input_checkpoint, output_prefix, task, num_labels)

def hf_warning(config):
    """The line to print when a folder is written for a variant stock transformers
    cannot compute (None for vanilla post-LN BERT)."""
    if hf_checkpoint.stock_transformers_computes(config):
        return None
    return (f"warning: {config.describe()} is not vanilla post-LN BERT. Stock Hugging Face "
            "transformers will load this folder but compute a different model (it ignores "
            "residual attention / pre-LN / NormFormer); only realformer_tf reads it back "
            "exactly (config.json carries our fields).")
