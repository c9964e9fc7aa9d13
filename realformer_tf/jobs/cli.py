"""The command-line layer of the run_* scripts: the original BERT flags shared by the
three scripts and the TF2 additions, their translation into the library's plain options
(`realformer_tf.jobs.runner.RunOptions` and the jobs' subclasses), and turning user errors
into one clear message and a non-zero exit. Nothing below this module reads absl flags.
"""

import sys

from absl import flags, logging

from realformer_tf.training import distribution
from realformer_tf.training import optimization
from realformer_tf.jobs import runner
from realformer_tf.errors import UsageError, UserError, require
from realformer_tf.families import MODEL_TYPES
from realformer_tf.training.tpu import DEFAULT_TIMEOUT_S

FLAGS = flags.FLAGS

# Errors a user can cause (config, checkpoint, input, divergence, flags: all UserError);
# anything else is a bug and keeps its traceback.
USER_ERRORS = (UserError,)

__all__ = ["USER_ERRORS", "UsageError", "define_model_flags", "options", "require", "run"]


def define_model_flags():
    """The flags every run_* script takes (defaults as in the original scripts)."""
    flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained model "
                        "(a BERT config; an ETC config with --model_type=etc).")
    flags.DEFINE_string("output_dir", None, "Where checkpoints and results are written.")
    flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (an original BERT/RealFormer one or ours).")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum total input sequence length after WordPiece.")
    flags.DEFINE_bool("do_train", False, "Whether to run training.")
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
    flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for the optimizer.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps run inside one compiled call.")
    _define_tpu_flags()
    # TF2 additions.
    flags.DEFINE_enum("model_type", "bert", MODEL_TYPES,
                      "bert: BERT / RealFormer / NormFormer (bert_config_file is a BERT config); "
                      "etc: ETC global-local attention (bert_config_file is an ETC config).")
    flags.DEFINE_integer("etc_tokens_per_global", 16,
                         "ETC only: long tokens per global token (fixed-block global tokens).")
    flags.DEFINE_enum("distribution_strategy", "auto", distribution.STRATEGIES,
                      "auto: tpu if a TPU is named, multi-worker from TF_CONFIG, mirrored on several GPUs.")
    flags.DEFINE_enum("mixed_precision", "none", distribution.MIXED_PRECISION, "Mixed-precision policy.")
    flags.DEFINE_enum("optimizer", "adamw", optimization.OPTIMIZERS, "adamw (BERT's) or lamb.")
    flags.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm/bias).")
    flags.DEFINE_integer("seed", None, "Seed for weights, dropout and data order.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "How many training checkpoints to keep.")
    flags.DEFINE_enum("jit_compile", "auto", ("auto", "true", "false"),
                      "Compile the per-replica train/eval steps with XLA; auto: on TPU and GPU, off on CPU.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1,
                         "Batches of --train_batch_size per optimizer step (effective batch: their product).")


def _define_tpu_flags():
    """The original TPUEstimator flags, plus TF2's --tpu."""
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU.")
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use (name or grpc:// address).")
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
    flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.")
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL (TPU address).")
    flags.DEFINE_integer("num_tpu_cores", 8, "Only used for reporting; the TPU system decides.")
    flags.DEFINE_string("tpu", None, "TPU name or address for TPUStrategy (same as --tpu_name); "
                        "local on a TPU VM.")
    flags.DEFINE_integer("tpu_timeout_s", DEFAULT_TIMEOUT_S,
                         "Seconds to find and start the TPU before giving up with an error.")


def options(options_class):
    """The parsed flags as an `options_class` (a RunOptions dataclass): every field
    takes the flag of its name."""
    return runner.options_from(options_class, FLAGS.flag_values_dict())


def run(main):
    """absl main wrapper: a user error prints one message and exits with status 1."""

    def wrapped(argv):
        if not FLAGS["verbosity"].present:
            # orbit and the scripts print their progress; absl INFO would repeat it.
            logging.set_verbosity(logging.WARNING)
        try:
            return main(argv)
        except USER_ERRORS as e:
            if FLAGS["verbosity"].present:
                logging.error("%s", e)
            print(f"error: {e}", file=sys.stderr)
            sys.exit(1)

    return wrapped
