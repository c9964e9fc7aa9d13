"""Trains and evaluates a translation model: an encoder-decoder Transformer (post-LN, with
Admin's residual scales and RealFormer's residual attention on each attention path as
its config says) on parallel text, scored by sacreBLEU.

  python make_vocab.py --input_file='data/train.en,data/train.es' --vocab_type=sentencepiece \
    --vocab_size=8000 --output_file=/tmp/spm
  python run_translation.py --bert_config_file=translation_config.json \
    --spm_model_file=/tmp/spm.model --output_dir=/tmp/en_es \
    --train_source_file=data/train.en --train_target_file=data/train.es \
    --eval_source_file=data/dev.en --eval_target_file=data/dev.es \
    --do_train=True --do_eval=True --max_tokens=4096 --num_train_steps=20000 \
    --num_warmup_steps=4000 --learning_rate=5e-4 --average_last_checkpoints=5

The files are UTF-8 text (or .xz / .gz), one sentence a line, line i of the source
paired with line i of the target. --do_predict translates --predict_source_file into
output_dir/translations.txt (and scores it against --predict_target_file);
--export_dir writes a SavedModel with a `translate` signature (text in, text out).
"""

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs.tasks.translation import TranslationOptions, run_translation


def define_flags(fv):
    """The program's flags on the FlagValues `fv`."""
    d = TranslationOptions()
    text = "UTF-8 text (or .xz / .gz), one sentence a line"
    flags.DEFINE_string("spm_model_file", None, "The joint SentencePiece model of both languages.", flag_values=fv)
    for split, what in (("train", "--do_train"), ("eval", "--do_eval (dev BLEU)"),
                        ("predict", "--do_predict")):
        flags.DEFINE_string(f"{split}_source_file", None, f"Source sentences for {what}: {text}.", flag_values=fv)
        flags.DEFINE_string(f"{split}_target_file", None, f"Their translations, line for line"
                            f"{' (optional: scores the output)' if split == 'predict' else ''}.", flag_values=fv)
    flags.DEFINE_bool("do_predict", False, "Translate --predict_source_file.", flag_values=fv)
    flags.DEFINE_integer("max_tokens", d.max_tokens, "Tokens per batch (of the longer side, padded), as fairseq's "
                         "--max-tokens.", flag_values=fv)
    flags.DEFINE_float("label_smoothing", d.label_smoothing, "Label smoothing of the cross-entropy.", flag_values=fv)
    flags.DEFINE_integer("num_train_steps", d.num_train_steps, "Number of training steps.", flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", d.num_warmup_steps, "Linear warmup steps before the inverse "
                         "square-root decay.", flag_values=fv)
    flags.DEFINE_float("adam_beta2", d.adam_beta2, "Adam's beta2 (the Transformer's 0.98).", flag_values=fv)
    flags.DEFINE_integer("beam_size", d.beam_size, "Beam size of evaluation, prediction and export (1: greedy).",
                         flag_values=fv)
    flags.DEFINE_float("length_penalty", d.length_penalty, "GNMT's length penalty alpha of the beam search.",
                       flag_values=fv)
    flags.DEFINE_integer("max_extra_length", d.max_extra_length, "A translation is at most the source's length "
                         "plus this many tokens.", flag_values=fv)
    flags.DEFINE_integer("max_eval_sentences", 0, "Dev sentences translated for BLEU (0: all).", flag_values=fv)
    flags.DEFINE_integer("average_last_checkpoints", 0, "Average the last N training checkpoints' weights before "
                         "evaluating (0: off).", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "Write the trained model as a SavedModel (translate signature) under "
                        "export_dir/<version>.", flag_values=fv)
    flags.DEFINE_list("export_beam_sizes", ["1", "4", "8"], "The beam sizes the SavedModel's translate signature "
                      "serves (its beam_size input; 1: greedy). Each adds a search to the graph.", flag_values=fv)
    cli.define_model_flags(fv)
    # The names the translation docs use, beside the BERT scripts' names.
    flags.DEFINE_alias("source_file", "train_source_file", flag_values=fv)
    flags.DEFINE_alias("target_file", "train_target_file", flag_values=fv)
    flags.DEFINE_alias("config_file", "bert_config_file", flag_values=fv)
    fv.set_default("model_type", "translation")
    fv.set_default("max_seq_length", d.max_seq_length)
    fv.set_default("learning_rate", d.learning_rate)
    fv.set_default("weight_decay", d.weight_decay)


def run(fv):
    options = cli.options(TranslationOptions, fv)
    try:
        options.export_beam_sizes = tuple(int(k) for k in fv.export_beam_sizes)
    except ValueError:
        raise cli.UsageError(f"--export_beam_sizes={','.join(fv.export_beam_sizes)}: give whole numbers, e.g. 1,4,8")
    run_translation(options)


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=["bert_config_file", "output_dir", "spm_model_file"])
