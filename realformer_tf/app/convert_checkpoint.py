"""Converts between the checkpoint formats the models read: a training checkpoint of
run_pretraining/run_classifier/run_squad (e.g. output_dir/ckpt-2000, or output_dir for
the latest), a checkpoint under a family's own names (an original-named BERT
checkpoint; ETC's; a causal LM's lm_model.ckpt; a translation model's
translation_model.ckpt), and a Hugging Face folder (config.json + model.safetensors:
BERT's, GPT-2's for a causal LM, or Marian's for a translation model).

  # training checkpoint -> original-named checkpoint (for the original scripts, BERT tools)
  python convert_checkpoint.py --bert_config_file=out/bert_config.json \
    --input_checkpoint=out/ckpt-2000 --output_checkpoint=/tmp/bert_model.ckpt --task=pretraining

  # Hugging Face folder -> original-named checkpoint (its config.json is the config)
  python convert_checkpoint.py --input_checkpoint=/models/bert-base-uncased \
    --output_checkpoint=/tmp/bert_model.ckpt --task=pretraining

  # any of them -> Hugging Face folder
  python convert_checkpoint.py --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --input_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --output_checkpoint=/tmp/hf_bert \
    --output_format=hf --task=pretraining

  # causal LM (run_pretraining.py --model_type=causal_lm): training checkpoint -> lm_model.ckpt
  python convert_checkpoint.py --model_type=causal_lm --bert_config_file=out/lm_config.json \
    --input_checkpoint=out/ckpt-2000 --output_checkpoint=/tmp/lm_model.ckpt

  # causal LM -> GPT-2 folder (GPT2LMHeadModel; Pre-LN without residual attention or
  # NormFormer only: other variants are refused in one line, or with --hf_allow_variant
  # written with model_type realformer_causal_lm and the PyTorch code that computes them,
  # for transformers' trust_remote_code=True), and a GPT-2 or variant folder -> ours
  python convert_checkpoint.py --model_type=causal_lm --bert_config_file=out/lm_config.json \
    --input_checkpoint=out --output_checkpoint=/tmp/gpt2 --output_format=hf
  python convert_checkpoint.py --model_type=causal_lm --input_checkpoint=/models/gpt2 \
    --output_checkpoint=/tmp/lm_model.ckpt

  # translation (run_translation.py): training checkpoint -> translation_model.ckpt, and
  # -> a Marian folder (MarianMTModel; the vanilla post-LN model only: Admin and residual
  # attention are refused in one line; no tokenizer files)
  python convert_checkpoint.py --model_type=translation \
    --bert_config_file=out/translation_config.json --input_checkpoint=out/ckpt-2000 \
    --output_checkpoint=/tmp/translation_model.ckpt
  python convert_checkpoint.py --model_type=translation \
    --bert_config_file=out/translation_config.json --input_checkpoint=out \
    --output_checkpoint=/tmp/marian --output_format=hf

(Every script also takes a checkpoint under its family's names or a Hugging Face folder
directly as --init_checkpoint.)
"""

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs import convert
from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.jobs import outputs
from realformer_tf.data.vocab import check_vocab
from realformer_tf.families import MODEL_TYPES, get_family, variant_evidence


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    flags.DEFINE_string("bert_config_file", None,
                        "The model's config: bert_config.json, an ETC config, a causal LM's lm_config.json or a "
                        "translation_config.json (default: a Hugging Face input folder's config.json).",
                        flag_values=fv)
    flags.DEFINE_string("input_checkpoint", None,
                        "Training checkpoint prefix or its directory (latest), a checkpoint under the family's "
                        "names (original-named BERT, ETC, lm_model.ckpt, translation_model.ckpt), or a Hugging "
                        "Face folder (BERT; GPT-2 with --model_type=causal_lm).", flag_values=fv)
    flags.DEFINE_string("output_checkpoint", None,
                        "Prefix of the checkpoint, or the Hugging Face folder, to write.", flag_values=fv)
    flags.DEFINE_enum("output_format", "checkpoint", convert.OUTPUT_FORMATS,
                      "checkpoint: a TF1 checkpoint under the family's names (BERT's original names, ETC's, the "
                      "causal LM's lm_model.ckpt names, the translation model's translation_model.ckpt names); hf: "
                      "a Hugging Face folder (BERT: BertFor*; causal_lm: GPT2LMHeadModel, for Pre-LN without "
                      "residual attention or NormFormer only, other variants with --hf_allow_variant; translation: MarianMTModel, for post-LN without Admin "
                      "or residual attention only; those two without tokenizer files).", flag_values=fv)
    flags.DEFINE_enum("task", None, convert.TASK_MODELS,
                      "Which model the checkpoint holds (default: the family's first: pretraining; translation "
                      "for --model_type=translation).", flag_values=fv)
    flags.DEFINE_integer("num_labels", 2, "Classifier labels (task=classifier).", flag_values=fv)
    flags.DEFINE_enum("model_type", "bert", MODEL_TYPES,
                      "bert; etc (--bert_config_file is an ETC config); causal_lm (an lm_config.json, or a GPT-2 "
                      "folder as --input_checkpoint); translation (a translation_config.json).", flag_values=fv)
    flags.DEFINE_string("vocab_file", None,
                        "--output_format=hf of BERT: the vocab the model was trained with, written beside the weights "
                        "(default: a Hugging Face input folder's vocab.txt, or the vocab_file the run recorded "
                        "in its output_dir/run_config.json).", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", None,
                      "--output_format=hf of BERT: whether the model was trained on lower-cased text (default: as "
                      "found with the vocab, else true).", flag_values=fv)
    flags.DEFINE_bool("hf_allow_variant", False,
                      "--output_format=hf of a BERT variant stock transformers cannot compute (residual "
                      "attention, pre-LN, NormFormer), or of a causal LM variant GPT-2 cannot (residual "
                      "attention, Post-LN, NormFormer): write it with model_type realformer_bert / "
                      "realformer_causal_lm and the PyTorch code that computes it, which transformers loads with "
                      "trust_remote_code=True (default: refused). Translation variants are always refused for "
                      "Marian folders.",
                      flag_values=fv)
    flags.DEFINE_bool("allow_nonfinite_weights", False,
                      "Convert a checkpoint whose weights hold NaN or Inf (e.g. to inspect a diverged run; "
                      "default: refused, naming the weights).", flag_values=fv)


def run(f):
    """The conversion from the parsed flags `f`."""
    family = get_family(f.model_type)
    task = f.task or next(iter(family.model_classes()))
    convert.check_family_output(family, task, f.output_format)
    vocab_file, do_lower_case = None, True
    if f.output_format == "hf":  # a folder, with the tokenizer the model was trained with
        outputs.check_output_dir(f.output_checkpoint, "--output_checkpoint")
        if family.hf_folder_needs_vocab:  # GPT-2 and Marian folders: no tokenizer files yet
            vocab_file, do_lower_case = convert.find_tokenizer(f.input_checkpoint, f.vocab_file, f.do_lower_case)
            check_vocab(vocab_file)
    else:  # prefix.index, prefix.data-*
        outputs.check_output_prefix(f.output_checkpoint, "--output_checkpoint")
    config_file = f.bert_config_file
    if config_file is None and hf_checkpoint.is_hf_folder(f.input_checkpoint):
        config_file = f.input_checkpoint
    cli.require(config_file, "--bert_config_file is required (unless --input_checkpoint is a "
                "Hugging Face folder with config.json)")
    config = family.load_config(config_file)
    # A config without residual_attention: the weights decide (one line) or an error.
    config = variant_evidence.resolve(family, config, f.input_checkpoint,
                                      source=f"--bert_config_file={config_file}", log=print)
    print(config.describe(), flush=True)
    if f.output_format == "hf":
        convert.check_hf_exportable(family, config, f.output_checkpoint, f.hf_allow_variant)
        warning = convert.hf_warning(config, family)
        if warning:
            print(warning, flush=True)
    source, written = convert.convert(
        config, f.input_checkpoint, f.output_checkpoint, task, f.num_labels, f.output_format,
        family=family, allow_variant=f.hf_allow_variant, vocab_file=vocab_file, do_lower_case=do_lower_case,
        allow_nonfinite=f.allow_nonfinite_weights)
    print(f"Converted {source} -> {written}")


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["input_checkpoint", "output_checkpoint"])
