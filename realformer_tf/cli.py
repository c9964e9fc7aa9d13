"""What the three run_* scripts share: the original BERT flags for the model, TPU and
checkpoints, the TF2 additions (strategy, mixed precision, optimizer, seed), start-up
checks, and turning user errors into one clear message and a non-zero exit."""

import json
import os
import sys

import tensorflow as tf
from absl import flags, logging

from realformer_tf import distribution, optimization
from realformer_tf.checkpoint import CheckpointError
from realformer_tf.config import BertConfig, ConfigError
from realformer_tf.data.records import InputError
from realformer_tf.fileio import atomic_output
from realformer_tf.training import NonFiniteLossError, Trainer

FLAGS = flags.FLAGS



class UsageError(ValueError):
    """A bad flag or flag combination."""


# Errors a user can cause; anything else is a bug and keeps its traceback.
USER_ERRORS = (ConfigError, CheckpointError, InputError, NonFiniteLossError, UsageError)


def define_model_flags():
    flags.DEFINE_string("bert_config_file", None, "The config json file of the pre-trained BERT model.")
    flags.DEFINE_string("output_dir", None, "Where checkpoints and results are written.")
    flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint (an original BERT/RealFormer one or ours).")
    flags.DEFINE_integer("max_seq_length", 128, "Maximum total input sequence length after WordPiece.")
    flags.DEFINE_bool("do_train", False, "Whether to run training.")
    flags.DEFINE_bool("do_eval", False, "Whether to run eval on the dev set.")
    flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate for the optimizer.")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save the model checkpoint.")
    flags.DEFINE_integer("iterations_per_loop", 1000, "Steps run inside one compiled call.")
    # The original TPUEstimator flags.
    flags.DEFINE_bool("use_tpu", False, "Whether to use TPU.")
    flags.DEFINE_string("tpu_name", None, "The Cloud TPU to use (name or grpc:// address).")
    flags.DEFINE_string("tpu_zone", None, "GCE zone of the Cloud TPU.")
    flags.DEFINE_string("gcp_project", None, "GCP project of the Cloud TPU.")
    flags.DEFINE_string("master", None, "[Optional] TensorFlow master URL (TPU address).")
    flags.DEFINE_integer("num_tpu_cores", 8, "Only used for reporting; the TPU system decides.")
    # TF2 additions.
    flags.DEFINE_string("tpu", None, "TPU name or address for TPUStrategy (same as --tpu_name).")
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


def require(condition, message):
    if not condition:
        raise UsageError(message)


def load_config(max_seq_length=None):
    require(FLAGS.bert_config_file, "--bert_config_file is required")
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
    if max_seq_length is not None and max_seq_length > config.max_position_embeddings:
        raise UsageError(
            f"--max_seq_length={max_seq_length} exceeds max_position_embeddings="
            f"{config.max_position_embeddings} of {FLAGS.bert_config_file}"
        )
    return config


def announce(config, strategy):
    """The first lines of every script: which variant was built, on what."""
    print(config.describe(), flush=True)
    print(
        f"strategy: {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s); "
        f"mixed precision: {FLAGS.mixed_precision}",
        flush=True,
    )


def setup_strategy():
    if FLAGS.seed is not None:
        import keras

        keras.utils.set_random_seed(FLAGS.seed)
    float16 = distribution.set_mixed_precision(FLAGS.mixed_precision)
    tpu = FLAGS.tpu or FLAGS.tpu_name or FLAGS.master
    strategy_name = "tpu" if FLAGS.use_tpu and FLAGS.distribution_strategy == "auto" else FLAGS.distribution_strategy
    if strategy_name == "tpu" and not tpu:
        raise UsageError("TPU training needs --tpu (or --tpu_name) naming the TPU")
    strategy = distribution.get_strategy(strategy_name, tpu=tpu, tpu_zone=FLAGS.tpu_zone, gcp_project=FLAGS.gcp_project)
    return strategy, float16


def per_replica(strategy, batch_size, flag_name):
    try:
        return distribution.per_replica_batch_size(batch_size, strategy, flag_name)
    except ValueError as e:
        raise UsageError(str(e)) from None


def claim_output_dir(output_dir, config, extra=None):
    """Records the run's config in output_dir; a rerun with another config is refused
    (it would resume another model's checkpoints)."""
    tf.io.gfile.makedirs(output_dir)
    path = os.path.join(output_dir, "run_config.json")
    current = {"bert_config": config.to_dict(), **(extra or {})}
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            previous = json.load(f)
        if previous != current:
            changed = sorted(
                k for k in set(previous.get("bert_config", {})) | set(current["bert_config"])
                if previous.get("bert_config", {}).get(k) != current["bert_config"].get(k)
            ) + sorted(k for k in current if k != "bert_config" and previous.get(k) != current[k])
            raise UsageError(
                f"--output_dir={output_dir} holds checkpoints of another model or task (differs in: "
                f"{', '.join(changed) or 'settings'}); use a new --output_dir or the original config"
            )
    elif tf.train.latest_checkpoint(output_dir):
        raise UsageError(
            f"--output_dir={output_dir} already holds checkpoints that were not written by this "
            "tool for this config; use an empty --output_dir"
        )
    else:
        with atomic_output(path) as f:
            json.dump(current, f, indent=2, sort_keys=True)


def start_trainer(task, strategy, flags_, num_train_steps, num_warmup_steps, float16, train=True):
    """The Trainer the flags describe, restored from --output_dir (or initialized by
    the task); prints which. Returns (trainer, restored checkpoint path or None)."""
    f = flags_
    require(f.gradient_accumulation_steps >= 1,
            f"--gradient_accumulation_steps={f.gradient_accumulation_steps}; use 1 or more")
    trainer = Trainer(
        task, strategy, f.output_dir,
        optimizer_fn=(lambda: optimization.create_optimizer(
            f.optimizer, f.learning_rate, max(num_train_steps, 1), num_warmup_steps,
            weight_decay=f.weight_decay, float16_loss_scaling=float16)) if train else None,
        steps_per_loop=f.iterations_per_loop,
        save_checkpoints_steps=f.save_checkpoints_steps,
        max_checkpoints_to_keep=f.keep_checkpoint_max,
        global_batch_size=f.train_batch_size,
        jit_compile=f.jit_compile,
        gradient_accumulation_steps=f.gradient_accumulation_steps,
    )
    resumed = trainer.restore_or_initialize(weights_only=not train)
    print(f"Resumed from {resumed} at step {int(trainer.global_step.numpy())}" if resumed
          else (trainer.init_message or "Training from scratch (no --init_checkpoint)"), flush=True)
    return trainer, resumed


def worker_output_dir(output_dir, strategy):
    """output_dir on the chief; a scratch folder inside it on other workers, so that
    several workers never write the same files (results, records, checkpoints)."""
    from realformer_tf.training import is_chief, worker_scratch_dir

    if is_chief(strategy):
        return output_dir
    path = worker_scratch_dir(output_dir, strategy)
    tf.io.gfile.makedirs(path)
    return path


def export_final_checkpoint(model, output_dir, config):
    """Writes the original-named checkpoint and its config for other BERT tools."""
    prefix = os.path.join(output_dir, "bert_model.ckpt")
    model.save_bert_checkpoint(prefix)
    config.to_json_file(os.path.join(output_dir, "bert_config.json"))
    return prefix
