"""Conversions between the checkpoint formats the models read:

- our training checkpoints (written by the training loop every --save_checkpoints_steps,
  with optimizer state, weights keyed by their original names),
- checkpoints under a family's own names (original-named TF1 checkpoints for BERT, what
  google-research/bert and other BERT tools read; ETC's; the causal LM's `lm_model.ckpt`
  names; the translation model's `translation_model.ckpt` names),
- Hugging Face folders (config.json + model.safetensors): BERT's, GPT-2's
  (`GPT2LMHeadModel`) for a causal LM that GPT-2 computes, Marian's (`MarianMTModel`)
  for a translation model that Marian computes.

Every input is read by the family's loader (`family.load_checkpoint`) and written by
its writer (`family.save_checkpoint`, `family.save_hf_folder`), so a conversion checks
names and shapes exactly as loading does.
"""

from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.checkpoints.tf_checkpoint import is_object_based, list_checkpoint, resolve_checkpoint
from realformer_tf.errors import CheckpointError
from realformer_tf.errors import UsageError
from realformer_tf.families import FAMILIES, KINDS, get_family, variant_evidence

# Every family's kinds: pretraining, classifier, squad, encoder (KINDS), translation.
TASK_MODELS = tuple(dict.fromkeys(KINDS + tuple(k for f in FAMILIES.values() for k in f.model_classes())))
OUTPUT_FORMATS = ("checkpoint", "hf")
# The families --output_format=hf writes, and what (`ModelFamily.hf_folder_description`).
HF_FOLDERS = {name: family.hf_folder_description for name, family in FAMILIES.items()
              if family.hf_folder_description}


def convert(config, source, output, task, num_labels=2, output_format="checkpoint", family=None,
            allow_variant=False, log=None, vocab_file=None, do_lower_case=True, allow_nonfinite=False):
    """Loads `source` (a training checkpoint prefix or directory, a checkpoint under the
    family's names, or a Hugging Face folder) into a `task` model of `family` (default
    BERT; ETC, the causal LM and the translation model too) and writes it under the
    family's names at prefix `output` (output_format "checkpoint") or as the family's
    Hugging Face folder `output` ("hf", `family.save_hf_folder`: BERT, see
    `checkpoints.bert.save_hf_folder` for `allow_variant`, `vocab_file`,
    `do_lower_case`; a causal LM as a GPT-2 folder, `checkpoints.causal_lm.
    save_gpt2_folder`, for the variants GPT-2 computes, the others with `allow_variant`
    as a folder with their remote code; a translation model as a Marian
    folder, `checkpoints.translation.save_marian_folder`, for the variants Marian
    computes). A config that does not state residual_attention is decided from the
    weights first (`variant_evidence`; one line to `log`). Weights holding NaN or Inf
    are refused unless `allow_nonfinite`. Returns (what was read, what was written).

    Raises:
        CheckpointError when `source` already uses the family's names and the output
        is such a checkpoint too (nothing to convert), or when it does not fit `config`.
        VariantExportError for a Hugging Face folder of a variant without allow_variant
        (BERT; a causal LM GPT-2 does not compute), or of a translation model Marian
        does not compute (always).
        UsageError for --output_format=hf of a family without a folder format, or a
        `task` the family has no model of.
    """
    family = family or get_family("bert")
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    check_family_output(family, task, output_format)
    prefix = resolve_checkpoint(source)
    already_original = not hf_checkpoint.is_hf_folder(prefix) and not is_object_based(list_checkpoint(prefix))
    if output_format == "checkpoint" and already_original:
        names = "the original names" if family.name == "bert" else family.names_description
        raise CheckpointError(f"{prefix} already uses {names}; use it as it is")
    config = variant_evidence.resolve(family, config, prefix, log=log)
    if output_format == "hf":
        check_hf_exportable(family, config, output, allow_variant)  # before anything is built
    model = family.build_model(config, task, num_labels=num_labels if task == "classifier" else None)
    read = family.load_checkpoint(model, prefix, allow_nonfinite=allow_nonfinite)
    if output_format == "hf":
        return read, family.save_hf_folder(model, output, allow_variant=allow_variant, vocab_file=vocab_file,
                                           do_lower_case=do_lower_case)
    return read, family.save_checkpoint(model, output)


def check_family_output(family, task, output_format):
    """Raises UsageError for a `task` the family has no model of, or a Hugging Face
    folder of a family that has none (before anything is read)."""
    kinds = tuple(family.model_classes())
    if task not in kinds:
        raise UsageError(f"--task={task}: --model_type={family.name} has no {task} model; its models: "
                         f"{', '.join(kinds)} (use --task={kinds[0]})")
    if output_format == "hf" and not family.hf_folder_description:
        raise UsageError(f"--output_format=hf writes {' or '.join(HF_FOLDERS.values())}; "
                         f"--model_type={family.name} converts to --output_format=checkpoint only")


def check_hf_exportable(family, config, folder, allow_variant=False):
    """Raises VariantExportError when `family`'s Hugging Face folder would compute
    `config`'s model wrongly (`family.check_hf_exportable`): BERT variants and causal
    LMs other than GPT-2's (Pre-LN, no residual attention or NormFormer) without
    `allow_variant`; translation models other than Marian's (post-LN, no Admin or
    residual attention), always."""
    family.check_hf_exportable(config, folder, allow_variant)

def training_to_original(config, input_checkpoint, output_prefix, task, num_labels=2):
    """A training checkpoint -> an original-named one (see `convert`)."""
    return convert(config, input_checkpoint, output_prefix, task, num_labels)

def hf_warning(config, family=None):
    """The line to print when a Hugging Face folder is written for `config`
    (`family.hf_warning`; `family` default: the one whose config `config` is): a BERT
    or causal LM variant stock transformers cannot compute (its folder carries remote
    code); None for vanilla post-LN BERT, GPT-2's Pre-LN causal LM, and any translation
    model (Marian folders are written only for what Marian computes)."""
    if family is None:
        family = next((f for f in FAMILIES.values() if type(config) is f.config_class), get_family("bert"))
    return family.hf_warning(config)


def find_tokenizer(input_checkpoint, vocab_file=None, do_lower_case=None):
    """(vocab file, do_lower_case) for a Hugging Face folder written from
    `input_checkpoint`: the ones given, else those of the input itself (a Hugging Face
    folder with vocab.txt), else those the run that wrote it recorded
    (output_dir/run_config.json). do_lower_case defaults to True (BERT's uncased).

    Raises:
        UsageError: no vocab found: a folder without one would tokenize wrongly.
    """
    found = _recorded_tokenizer(input_checkpoint)
    if vocab_file:
        return vocab_file, do_lower_case if do_lower_case is not None else (found[1] if found else True)
    if found is None:
        raise UsageError(
            f"--output_format=hf needs the vocab the model was trained with: give --vocab_file (and "
            f"--do_lower_case); none was found beside --input_checkpoint={input_checkpoint} (a Hugging Face "
            "folder's vocab.txt, or the vocab_file its run recorded in run_config.json). Without it "
            "transformers would load a tokenizer that maps every word wrongly")
    return found[0], do_lower_case if do_lower_case is not None else found[1]


def _recorded_tokenizer(input_checkpoint):
    import json
    import os

    from realformer_tf.fileio import gfile

    folder = input_checkpoint if gfile().isdir(input_checkpoint) else os.path.dirname(input_checkpoint)
    from_folder = hf_checkpoint.folder_tokenizer(folder)
    if from_folder:
        return from_folder
    record = os.path.join(folder, "run_config.json")
    if not gfile().exists(record):
        return None
    with gfile().GFile(record) as f:
        run = json.load(f).get("run", {})
    options = run.get("flags") or run.get("options") or {}
    if not options.get("vocab_file"):
        return None
    return options["vocab_file"], bool(options.get("do_lower_case", True))
