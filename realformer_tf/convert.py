"""Conversion of our training checkpoints (written by the training loop every
--save_checkpoints_steps, with optimizer state, weights keyed by their original names)
into the original-named format that BERT tools read."""

from realformer_tf import modeling
from realformer_tf.checkpoint import CheckpointError, is_object_based, list_checkpoint, resolve_checkpoint

TASK_MODELS = ("pretraining", "classifier", "squad", "encoder")


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


def training_to_original(config, input_checkpoint, output_prefix, task, num_labels=2):
    """Loads a training checkpoint (prefix or directory) into a `task` model and writes
    its weights under the original BERT names. Returns (input prefix, output prefix)."""
    prefix = resolve_checkpoint(input_checkpoint)
    if not is_object_based(list_checkpoint(prefix)):
        raise CheckpointError(f"{prefix} already uses the original names; use it as it is")
    model = build_model(config, task, num_labels)
    model.load_bert_checkpoint(prefix)
    return prefix, model.save_bert_checkpoint(output_prefix)
