"""Fine-tunes a BERT / RealFormer / NormFormer model on GLUE or XNLI.

Takes the original google-research/bert run_classifier.py flags, e.g.

  python run_classifier.py --task_name=MRPC --do_train=true --do_eval=true \
    --data_dir=$GLUE_DIR/MRPC --vocab_file=$BERT_BASE_DIR/vocab.txt \
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 \
    --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/mrpc_output/

Add --model_type=etc (and an ETC config as --bert_config_file) for ETC: documents of
thousands of tokens fit one --max_seq_length.
"""

from absl import flags

from realformer_tf import app
from realformer_tf.jobs import cli
from realformer_tf.jobs.tasks.classifier import ClassifierOptions, run_classifier


def define_flags(fv):
    """The program's flags on the FlagValues `fv`: the original script's, then the
    ones every run_* script takes."""
    flags.DEFINE_string("data_dir", None, "The input data dir (the task's .tsv files).", flag_values=fv)
    flags.DEFINE_string("task_name", None, "The name of the task to train (cola, mnli, mnli-mm, mrpc, "
                        "xnli, sst-2, qqp, qnli, rte, wnli, sts-b).", flag_values=fv)
    flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.", flag_values=fv)
    flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text.", flag_values=fv)
    flags.DEFINE_bool("do_predict", False, "Whether to run the model in inference mode on the test set.", flag_values=fv)
    flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training.", flag_values=fv)
    flags.DEFINE_integer("eval_batch_size", 8, "Total batch size for eval.", flag_values=fv)
    flags.DEFINE_integer("predict_batch_size", 8, "Total batch size for predict.", flag_values=fv)
    flags.DEFINE_float("num_train_epochs", 3.0, "Total number of training epochs to perform.", flag_values=fv)
    flags.DEFINE_float("warmup_proportion", 0.1, "Proportion of training for linear learning rate warmup.", flag_values=fv)
    flags.DEFINE_string("export_dir", None, "If set, also write a SavedModel that serves raw text "
                        "(TF Serving layout export_dir/<version>) after the run; see export_saved_model.py.", flag_values=fv)
    cli.define_model_flags(fv)


def run(fv):
    """The job from the parsed flags `fv`."""
    run_classifier(cli.options(ClassifierOptions, fv))


def main(argv=None):
    """Runs the program on `argv` (program name first; default sys.argv); returns the
    exit status. Callable any number of times in one process."""
    return app.run_program(argv, __doc__, define_flags, run,
                           required_flags=['data_dir', 'task_name', 'vocab_file', 'bert_config_file', 'output_dir'])
