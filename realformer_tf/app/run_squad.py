"""Fine-tunes a BERT / RealFormer / NormFormer model on SQuAD v1.1 or v2.0.

Takes the original google-research/bert run_squad.py flags and writes the same
predictions.json / nbest_predictions.json (/ null_odds.json for v2.0); when the predict
file has gold answers (dev-v1.1.json, dev-v2.0.json) it is also evaluated with the
official SQuAD metrics into eval_results.txt. E.g.

  python run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
    --do_train=True --train_file=$SQUAD_DIR/train-v1.1.json \
    --do_predict=True --predict_file=$SQUAD_DIR/dev-v1.1.json \
    --train_batch_size=12 --learning_rate=3e-5 --num_train_epochs=2.0 \
    --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

SQuAD v2.0: add --version_2_with_negative=True (and tune --null_score_diff_threshold with
the best_f1_thresh that eval_results.txt reports).

ETC on long documents: --model_type=etc with an ETC config and a --max_seq_length of
thousands of tokens (one window holds a whole multi-paragraph context).
"""

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs.tasks.squad import SquadOptions, run_squad


def define_flags(fv):
    """The program's flags on the FlagValues `fv`: the original script's, then the
    ones every run_* script takes."""
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.", flag_values=fv)
    flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json", flag_values=fv)
    flags.DEFINE_string("predict_file", None,
                        "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                      "for uncased models and False for cased models.", flag_values=fv)
    flags.DEFINE_integer("doc_stride", 128, "When splitting up a long document into chunks, how much "
                         "stride to take between chunks.", flag_values=fv)
    flags.DEFINE_integer("max_query_length", 64, "The maximum number of tokens for the question. "
                         "Questions longer than this will be truncated to this length.", flag_values=fv)
    flags.DEFINE_bool("do_predict", False, "Whether to run prediction (and evaluation, when the "
                      "predict file has answers).", flag_values=fv)
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", flag_values=fv)
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predictions.", flag_values=fv)
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.", flag_values=fv)
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training to perform linear learning "
                       "rate warmup for. E.g., 0.1 = 10% of training.", flag_values=fv)
    flags.DEFINE_integer("n_best_size", 20, "The total number of n-best predictions to generate in "
                         "the nbest_predictions.json output file.", flag_values=fv)
    flags.DEFINE_integer("max_answer_length", 30, "The maximum length of an answer that can be "
                         "generated. This is needed because the start and end predictions are not "
                         "conditioned on one another.", flag_values=fv)
    flags.DEFINE_bool("verbose_logging", False, "If true, all of the warnings related to data "
                      "processing will be printed.", flag_values=fv)
    flags.DEFINE_bool("version_2_with_negative", False,
                      "If true, the SQuAD examples contain some that do not have an answer.", flag_values=fv)
    flags.DEFINE_float("null_score_diff_threshold", 0.0,
                       "If null_score - best_non_null is greater than the threshold predict null.", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "If set, also write a SavedModel that serves raw text "
                        "(TF Serving layout export_dir/<version>) after the run; see export_saved_model.py.", flag_values=fv)
    cli.define_model_flags(fv)
    fv.set_default("max_seq_length", 384)


def run(fv):
    """The job from the parsed flags `fv`."""
    run_squad(cli.options(SquadOptions, fv))


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=['vocab_file', 'bert_config_file', 'output_dir'])
