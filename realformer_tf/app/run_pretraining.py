"""Pretrains a BERT / RealFormer / NormFormer (or ETC) model: masked LM + next sentence;
or, with --model_type=causal_lm, a GPT-style causal language model: next-token
prediction on token blocks (create_pretraining_data.py --objective=causal_lm).

Takes the original google-research/bert run_pretraining.py flags, e.g.

  python run_pretraining.py --input_file=/tmp/tf_examples.tfrecord \
    --output_dir=/tmp/pretraining_output --do_train=True --do_eval=True \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
    --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
    --num_train_steps=20 --num_warmup_steps=10 --learning_rate=2e-5

Add --model_type=etc (and an ETC config as --bert_config_file) for ETC. A causal LM:

  python run_pretraining.py --model_type=causal_lm --bert_config_file=lm_config.json \
    --input_file=/tmp/lm_blocks.tfrecord --eval_input_file=/tmp/lm_heldout.tfrecord \
    --output_dir=/tmp/lm --do_train=True --do_eval=True --max_seq_length=512 \
    --train_batch_size=8 --num_train_steps=10000 --num_warmup_steps=500 --learning_rate=3e-4

It reports loss, perplexity and bits per token on --eval_input_file (default: the
training input, as the original evaluates).
"""

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs.tasks.causal_lm import CausalLMOptions, run_causal_lm_pretraining
from realformer_tf.jobs.tasks.pretraining import PretrainingOptions, run_pretraining


def define_flags(fv):
    """The program's flags on the FlagValues `fv`: the original script's, then the
    ones every run_* script takes."""
    flags.DEFINE_string("input_file", None, "Input TF example files (can be a glob or comma separated).", flag_values=fv)
    flags.DEFINE_string("eval_input_file", None, "Held-out TF example files for --do_eval (default: --input_file, "
                        "as the original).", flag_values=fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.", flag_values=fv)
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", flag_values=fv)
    flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.", flag_values=fv)
    flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.", flag_values=fv)
    flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.", flag_values=fv)
    flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "causal_lm: write the trained model as a SavedModel (generate and "
                        "score signatures) under export_dir/<version>.", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "causal_lm with --export_dir: the WordPiece vocab the data was made "
                        "with.", flag_values=fv)
    flags.DEFINE_string("spm_model_file", None, "causal_lm with --export_dir: the SentencePiece model the data was "
                        "made with.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "causal_lm with --export_dir, WordPiece: whether the text was "
                      "lower-cased.", flag_values=fv)
    cli.define_model_flags(fv)


def run(fv):
    """The job from the parsed flags `fv`: the causal LM's for --model_type=causal_lm."""
    if fv.model_type == "causal_lm":
        run_causal_lm_pretraining(cli.options(CausalLMOptions, fv))
    else:
        run_pretraining(cli.options(PretrainingOptions, fv))


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=['input_file', 'bert_config_file', 'output_dir'])
