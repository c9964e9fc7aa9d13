"""The one job sequence behind run_pretraining.py, run_classifier.py and run_squad.py.

    output paths checked -> config -> strategy -> worker output dir -> batch / input checks
    -> claim and lock output_dir (chief) -> trainer (restored or initialized) -> train
    -> final original-named checkpoint
    -> eval / predict -> report -> optional SavedModel

is written once, in `run_job`. What varies is the *model family* (`realformer_tf.families`:
BERT, ETC — config, models, checkpoint names, input adapter) and the *job*
(`realformer_tf.jobs.tasks`: pretraining, classifier, SQuAD — data, loss, metrics, outputs).
Library code takes plain options (`RunOptions` and the jobs' subclasses); the scripts
translate their absl flags into them (`realformer_tf.jobs.cli`).
"""

import contextlib
import dataclasses
import json
import os
from typing import Optional

import tensorflow as tf

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.training import distribution
from realformer_tf.serving import export
from realformer_tf.training import optimization
from realformer_tf.jobs import outputs
from realformer_tf.families import variant_evidence
from realformer_tf.errors import UsageError, UserError, require
from realformer_tf.families import get_family
from realformer_tf.fileio import atomic_output
from realformer_tf.training.trainer import Trainer
from realformer_tf.training.distribution import is_chief, worker_scratch_dir


def say(message):
    """The scripts' progress lines (stdout, flushed: they are watched live)."""
    print(message, flush=True)


@dataclasses.dataclass
class RunOptions:
    """What every job takes: the original BERT flags shared by the three scripts and
    the TF2 additions. Field names are the flag names."""

    output_dir: Optional[str] = None
    bert_config_file: Optional[str] = None
    init_checkpoint: Optional[str] = None
    model_type: str = "bert"
    etc_tokens_per_global: int = 16
    max_seq_length: int = 128
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    learning_rate: float = 5e-5
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    save_checkpoints_steps: int = 1000
    iterations_per_loop: int = 1000
    keep_checkpoint_max: int = 5
    optimizer: str = "adamw"
    weight_decay: float = 0.01
    seed: Optional[int] = None
    mixed_precision: str = "none"
    distribution_strategy: str = "auto"
    use_tpu: bool = False
    tpu: Optional[str] = None
    tpu_name: Optional[str] = None
    tpu_zone: Optional[str] = None
    gcp_project: Optional[str] = None
    master: Optional[str] = None
    tpu_timeout_s: int = 60
    export_dir: Optional[str] = None
    jit_compile: str = "auto"
    gradient_accumulation_steps: int = 1
    # The program's parsed flags ({name: value}), recorded in run_config.json (`run_record`);
    # None for a job started from Python with options only.
    flags: Optional[dict] = None


class Job:
    """One script's task. The runner calls these hooks in the order above; a job keeps
    what one hook prepares for a later one (e.g. featurized files) on `self`."""

    name = None
    kind = None  # what the family builds: one of families.KINDS
    export_task = None  # the task of its SavedModel's signature (None: kind)
    families = ("bert", "etc")  # the --model_type values the job runs (BERT-layout data)
    options_class = RunOptions
    log = staticmethod(say)  # run_job sets the log function it was given

    def check_options(self, options):
        """Flag combinations, before anything is read or written."""

    def evidence_examples(self, options, family, config):
        """A few of the run's own examples (`variant_evidence.Examples`) on which the
        init checkpoint's masked-LM head tells whether it was trained with residual
        attention, when the config does not state it; None: a deterministic sample."""
        return None

    def batch_size_names(self, options):
        """The batch-size options this run uses (each must divide by the replicas)."""
        return ()

    def describe(self, options):
        """A line on what the job does (printed after the model line), or None."""
        return None

    def check_inputs(self, options, family, config):
        """Reads and checks every input before output_dir is claimed."""

    def run_identity(self, options):
        """Options that must match when a run resumes in the same output_dir."""
        return {"task": self.name, "max_seq_length": options.max_seq_length}

    def prepare(self, options, family, config, out_dir):
        """Writes what training and evaluation read; returns (train steps, warmup)."""
        return 0, 0

    def make_task(self, family, config, options):
        """The `training.Task` (model, loss, metrics)."""
        raise NotImplementedError

    def after_restore(self, trainer, resumed, options):
        """A chance to warn about the state the trainer starts from."""

    def train_dataset_fn(self, options):
        """The BERT-layout training `dataset_fn(input_context, start_step)`."""
        raise NotImplementedError

    def reading_inputs(self):
        """Context for the train/eval phase (e.g. naming a corrupt record)."""
        return contextlib.nullcontext()

    def evaluate(self, trainer, options, family, config, out_dir):
        """Eval / predict and their reports."""

    def export(self, options, family, config, out_dir):
        """Writes the SavedModel of `--export_dir`; returns its path."""
        raise UsageError(f"--export_dir is not available for {self.name}")

    def optimizer_settings(self, options):
        """Keyword arguments of `optimization.create_optimizer` beyond the flags (BERT's
        recipe: none)."""
        return {}


def run_job(job, options, log=say):
    """Runs `job` (a Job) with `options` (its options_class); returns the Trainer.

    The seeds and the Keras dtype policy the options ask for hold during the run and are
    restored when it ends (`distribution.run_settings`)."""
    family = get_family(options.model_type)
    require(family.name in job.families, f"--model_type={family.name} has no {job.name} job; this program runs "
            f"--model_type={' or '.join(job.families)}")
    job.log = log
    job.check_options(options)
    family.check_options(options)
    require(options.gradient_accumulation_steps >= 1,  # before anything is read or built
            f"--gradient_accumulation_steps={options.gradient_accumulation_steps}; use 1 or more")
    check_output_paths(options)  # before anything is read, built or trained
    config = family.load_config(options.bert_config_file, options.max_seq_length)
    config = resolve_variant(job, family, config, options, log)
    with distribution.run_settings(options.seed, options.mixed_precision) as float16:
        return _run_decided(job, options, family, config, float16, log)


def _run_decided(job, options, family, config, float16, log):
    """run_job once the model is decided, under the run's seeds and dtype policy."""
    strategy = distribution.strategy_from_options(options)  # TPU problems: one error within tpu_timeout_s
    out_dir = worker_output_dir(options.output_dir, strategy)  # options.output_dir on the chief
    announce(config, strategy, options, log)
    for line in (family.describe_inputs(options), job.describe(options)):
        if line:
            log(line)
    for name in job.batch_size_names(options):
        distribution.per_replica_batch_size(getattr(options, name), strategy, f"--{name}")
    if is_chief(strategy):
        outputs.OutputDirLock(options.output_dir).check_free()  # before the inputs are read through
    job.check_inputs(options, family, config)
    if options.init_checkpoint:
        # Fail now, not after set-up; and before a model is built, its sizes.
        family.check_checkpoint_fits(config, ckpt.resolve_checkpoint(options.init_checkpoint))
    identity = {**job.run_identity(options), **family.run_identity(options)}
    with take_output_dir(options.output_dir, strategy, config, identity, log,
                         record=run_record(options)):  # released on errors too
        num_train_steps, num_warmup_steps = job.prepare(options, family, config, out_dir)
        trainer, resumed = start_trainer(job.make_task(family, config, options), strategy, options,
                                         num_train_steps, num_warmup_steps, float16, log,
                                         job.optimizer_settings(options))
        job.after_restore(trainer, resumed, options)
        with job.reading_inputs():
            if options.do_train:
                trainer.train(family.adapt_dataset_fn(job.train_dataset_fn(options), config, options),
                              num_train_steps, summary_dir=os.path.join(out_dir, "summaries", "train"), log_fn=log)
                prefix = family.save_final_checkpoint(trainer.model, out_dir, config)
                log(f"Final checkpoint, under {family.names_description}: {prefix}")
            job.evaluate(trainer, options, family, config, out_dir)
        if options.export_dir and trainer.is_chief:
            path = job.export(options, family, config, out_dir)
            log(f"SavedModel for serving: {path}\n{export.saved_model_cli_command(path, task=job.export_task or job.kind)}")
    return trainer


# -- the steps ----------------------------------------------------------------------------
def check_output_paths(options):
    """--output_dir and --export_dir can be written (folders, creatable, writable):
    checked before the run reads its inputs, so a bad path is not found after training."""
    require(options.output_dir, "--output_dir is required")
    outputs.check_output_dir(options.output_dir, "--output_dir")
    if options.export_dir:
        outputs.check_output_dir(options.export_dir, "--export_dir")


def resolve_variant(job, family, config, options, log=say):
    """The run's one decision on the model: the config with residual_attention stated.
    Stated in the config file: as it is. Unstated, with --init_checkpoint: the weights
    decide (one line with the evidence; see `variant_evidence`) or the run stops here,
    before anything is trained. Unstated, from scratch: the default (on), announced by
    the run's first line. Every later phase (train, eval, predict, export) and the
    output_dir's config file use the decided config."""
    if config.residual_attention_stated or not options.init_checkpoint:
        return variant_evidence.decided(config)
    try:
        examples = job.evidence_examples(options, family, config)
    except (OSError, UserError, tf.errors.OpError):
        examples = None  # unreadable inputs are reported by check_inputs; use the sample
    return variant_evidence.resolve(family, config, options.init_checkpoint, examples, options,
                                    source=f"--bert_config_file={options.bert_config_file}", log=log)


def announce(config, strategy, options, log=say):
    """The first lines of every job: which variant was built, on what."""
    log(config.describe())
    log(f"strategy: {type(strategy).__name__} with {strategy.num_replicas_in_sync} replica(s); "
        f"mixed precision: {options.mixed_precision}")


def worker_output_dir(output_dir, strategy):
    """output_dir on the chief; a scratch folder inside it on other workers, so that
    several workers never write the same files (results, records, checkpoints)."""
    require(output_dir, "--output_dir is required")
    if is_chief(strategy):
        return output_dir
    path = worker_scratch_dir(output_dir, strategy)
    outputs.makedirs(path, "--output_dir")
    return path


def take_output_dir(output_dir, strategy, config, identity, log=say, record=None):
    """The chief locks output_dir (`outputs.OutputDirLock`: a second run into it ends
    with an error naming this one) and claims it (`claim_output_dir`); other workers of
    a multi-worker run only check the claim, since only the chief writes to output_dir.
    Returns a context manager that releases the lock (a no-op on other workers).

    Raises:
        outputs.OutputDirInUseError: another run holds output_dir.
        UsageError: output_dir holds another model's checkpoints.
    """
    if not is_chief(strategy):
        claim_output_dir(output_dir, config, identity, write=False)
        return contextlib.nullcontext()
    lock = outputs.OutputDirLock(output_dir, log).acquire()
    try:
        claim_output_dir(output_dir, config, identity, record=record)
    except BaseException:
        lock.release()
        raise
    return lock


def claim_output_dir(output_dir, config, identity, write=True, record=None):
    """Records the run's config and identity in output_dir/run_config.json; a rerun
    with another one is refused (it would resume another model's checkpoints). With
    write=False (a non-chief worker) only the refusal is checked and nothing is
    written. `record` (`run_record`: this run's options, package version, commit) is
    written beside them under "run", replaced by each run into the folder."""
    if write:
        outputs.makedirs(output_dir, "--output_dir")
    path = os.path.join(output_dir, "run_config.json")
    current = {"bert_config": config.to_dict(), **identity}
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            previous = json.load(f)
        previous.pop("run", None)
        if isinstance(previous.get("bert_config"), dict):  # fields added since: their defaults
            try:
                previous["bert_config"] = type(config).from_dict(previous["bert_config"]).to_dict()
            except UserError:
                pass  # not a config of this family: the comparison below names the difference
        if previous != current:
            raise UsageError(
                f"--output_dir={output_dir} holds checkpoints of another model or task (differs in: "
                f"{', '.join(_differences(previous, current)) or 'settings'}); use a new --output_dir "
                "or the original config")
    elif tf.train.latest_checkpoint(output_dir):
        raise UsageError(f"--output_dir={output_dir} already holds checkpoints that were not written by "
                         "this tool for this config; use an empty --output_dir")
    if write:
        with atomic_output(path) as f:
            json.dump(dict(current, run=record or {}), f, indent=2, sort_keys=True)


def run_record(options):
    """What reproduces the run: every flag of the program as used (a job started from
    Python: every option), local paths made absolute, the package version and, in a
    git checkout, its commit. Rerunning the program with `--NAME=VALUE` for each
    recorded flag gives the same run (with a --seed: the same data order, dropout and
    initial weights)."""
    values = dict(options.flags) if options.flags is not None else {
        k: v for k, v in dataclasses.asdict(options).items() if k != "flags"}
    for name, value in values.items():
        if isinstance(value, str) and value and _is_local_path_option(name) and "://" not in value:
            values[name] = ",".join(os.path.abspath(part) for part in value.split(","))
    from realformer_tf import __version__

    key = "flags" if options.flags is not None else "options"
    return {key: values, "package_version": __version__, "git_commit": _git_commit()}


def _is_local_path_option(name):
    return name.endswith(("_file", "_dir", "_checkpoint"))


def _git_commit():
    """The commit of the package's git checkout, or None (an installed wheel, no git)."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    try:
        result = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None if result.returncode == 0 else None


def _differences(previous, current):
    old, new = previous.get("bert_config", {}), current["bert_config"]
    fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    return fields + sorted(k for k in set(previous) | set(current)
                           if k != "bert_config" and previous.get(k) != current.get(k))


def start_trainer(task, strategy, options, num_train_steps, num_warmup_steps, float16, log=say,
                  optimizer_settings=None):
    """The Trainer the options describe, restored from output_dir (or initialized by
    the task); says which. Returns (trainer, restored checkpoint path or None)."""
    o = options

    def optimizer_fn():
        return optimization.create_optimizer(
            o.optimizer, o.learning_rate, max(num_train_steps, 1), num_warmup_steps,
            weight_decay=o.weight_decay, float16_loss_scaling=float16, **(optimizer_settings or {}))

    trainer = Trainer(task, strategy, o.output_dir, optimizer_fn=optimizer_fn if o.do_train else None,
                      steps_per_loop=o.iterations_per_loop, save_checkpoints_steps=o.save_checkpoints_steps,
                      max_checkpoints_to_keep=o.keep_checkpoint_max, global_batch_size=o.train_batch_size,
                      jit_compile=o.jit_compile, gradient_accumulation_steps=o.gradient_accumulation_steps)
    resumed = trainer.restore_or_initialize(weights_only=not o.do_train)
    log(f"Resumed from {resumed} at step {int(trainer.global_step.numpy())}" if resumed
        else (trainer.init_message or "Training from scratch (no --init_checkpoint)"))
    return trainer, resumed


def epochs_to_steps(num_examples, options):
    """Optimizer steps for `num_train_epochs` over `num_examples`: each step reads
    train_batch_size x gradient_accumulation_steps examples."""
    batch = options.train_batch_size * options.gradient_accumulation_steps
    return int(num_examples / batch * options.num_train_epochs)


def options_from(options_class, values):
    """`options_class(**values)` keeping only its fields (e.g. from a flag dict)."""
    names = {f.name for f in dataclasses.fields(options_class)}
    return options_class(**{k: v for k, v in values.items() if k in names})
