"""The command-line layer of the run_* scripts: the original BERT flags shared by the
three scripts and the TF2 additions, and their translation into the library's plain
options (`realformer_tf.jobs.runner.RunOptions` and the jobs' subclasses). Flags are
defined on the FlagValues a program passes (`realformer_tf.app`), never on absl's
global FLAGS. Nothing below this module reads absl flags.
"""

from absl import flags

from realformer_tf.training import distribution
from realformer_tf.training import optimization
from realformer_tf.jobs import runner
from realformer_tf.errors import UsageError, UserError, require
from realformer_tf.families import MODEL_TYPES
from realformer_tf.training.tpu import DEFAULT_TIMEOUT_S

__all__ = ["UsageError", "UserError", "define_model_flags", "options", "require"]


def define_model_flags(fv):
    """The flags every run_* script takes (defaults as in the original scripts), on the
    FlagValues `fv`."""
    flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained model "
                        "(a BERT config; an ETC config with --model_type=etc).", flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Where checkpoints and results are written.", flag_values=fv)
    flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (an original BERT/RealFormer one or ours).", flag_values=fv)
    flags.DEFINE_integer("max_seq_length", 128, "Maximum total input sequence length after WordPiece.", flag_values=fv)
    flags.DEFINE_bool("do_train", False, "Whether to run training.", flag_values=fv)
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.", flag_values=fv)
    flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for the optimizer.", flag_values=fv)
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.", flag_values=fv)
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps run inside one compiled call.", flag_values=fv)
    _define_tpu_flags(fv)
    # TF2 additions.
    flags.DEFINE_enum("model_type", "bert", MODEL_TYPES,
                      "bert: BERT / RealFormer / NormFormer (bert_config_file is a BERT config); "
                      "etc: ETC global-local attention (bert_config_file is an ETC config).", flag_values=fv)
    flags.DEFINE_integer("etc_tokens_per_global", 16,
                         "ETC only: long tokens per global token (fixed-block global tokens).", flag_values=fv)
    flags.DEFINE_enum("distribution_strategy", "auto", distribution.STRATEGIES,
                      "auto: tpu if a TPU is named, multi-worker from TF_CONFIG, mirrored on several GPUs.", flag_values=fv)
    flags.DEFINE_enum("mixed_precision", "none", distribution.MIXED_PRECISION, "Mixed-precision policy.", flag_values=fv)
    flags.DEFINE_enum("optimizer", "adamw", optimization.OPTIMIZERS, "adamw (BERT's) or lamb.", flag_values=fv)
    flags.DEFINE_float("weight_decay", 0.01, "Decoupled weight decay (not on LayerNorm/bias).", flag_values=fv)
    flags.DEFINE_integer("seed", None, "Seed for weights, dropout and data order.", flag_values=fv)
    flags.DEFINE_integer("keep_checkpoint_max", 5, "How many training checkpoints to keep.", flag_values=fv)
    flags.DEFINE_enum("jit_compile", "auto", ("auto", "true", "false"),
                      "Compile the per-replica train/eval steps with XLA; auto: on TPU and GPU, off on CPU.", flag_values=fv)
    flags.DEFINE_integer("gradient_accumulation_steps", 1,
                         "Batches of --train_batch_size per optimizer step (effective batch: their product).", flag_values=fv)


def _define_tpu_flags(fv):
    """The original TPUEstimator flags, plus TF2's --tpu."""
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU.", flag_values=fv)
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use (name or grpc:// address).", flag_values=fv)
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.", flag_values=fv)
    flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.", flag_values=fv)
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL (TPU address).", flag_values=fv)
    flags.DEFINE_integer("num_tpu_cores", 8, "Only used for reporting; the TPU system decides.", flag_values=fv)
    flags.DEFINE_string("tpu", None, "TPU name or address for TPUStrategy (same as --tpu_name); "
                        "local on a TPU VM.", flag_values=fv)
    flags.DEFINE_integer("tpu_timeout_s", DEFAULT_TIMEOUT_S,
                         "Seconds to find and start the TPU before giving up with an error.", flag_values=fv)


def options(options_class, fv):
    """The parsed flags `fv` as an `options_class` (a RunOptions dataclass): every field
    takes the flag of its name, and `flags` all of them (for run_config.json)."""
    values = fv.flag_values_dict()
    values.pop("verbosity", None)  # how the run logs, not what it computes
    return runner.options_from(options_class, dict(values, flags=dict(values)))
