"""The `ModelFamily` interface and what every family shares (initialization from a
checkpoint, the final original-named checkpoint). A family holds its checkpoint format
(`realformer_tf.checkpoints.format.CheckpointFormat`: its models by kind, the one
builder, names, head prefixes, loading and saving) and adds configs, options and
inputs."""

import os

import tensorflow as tf

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints.format import KINDS  # noqa: F401  (public here)
from realformer_tf.errors import UsageError


class ModelFamily:
    """One kind of model: its checkpoint format plus what the jobs need. Subclasses set
    the class attributes.

    Attributes:
        checkpoint_format: the family's `CheckpointFormat` (e.g. `checkpoints.bert.FORMAT`):
            its models by kind (`build_model`), variable names, head prefixes, loading
            and saving, and the input adapter the loaders share.
        config_class: a `JsonConfig` dataclass (`from_json_file`, `to_json_file`,
            `describe`).
        checkpoint_name: the final checkpoint a training run leaves in output_dir,
            written under the family's original variable names.
        config_name: the config file written next to it.
        export_tasks: the tasks `realformer_tf.serving.export` can serve for this family.
        static_length: whether the model needs every batch padded to max_seq_length
            (ETC's blocked layout and fixed global tokens); the serving graph pads then.
    """

    checkpoint_format = None
    config_class = None
    checkpoint_name = None
    config_name = None
    export_tasks = ()
    static_length = False

    @property
    def name(self):
        """The `--model_type` value (the format's name)."""
        return self.checkpoint_format.name

    # -- configs ----------------------------------------------------------------------
    def load_config(self, path, max_seq_length=None):
        """The config at `path`, checked against `max_seq_length`."""
        if not path:
            raise UsageError("--bert_config_file is required (the model's config JSON)")
        config = self.read_config(path)
        limit = self.checkpoint_format.max_length(config)
        if max_seq_length is not None and limit and max_seq_length > limit:
            raise UsageError(f"--max_seq_length={max_seq_length} exceeds "
                             f"{self.checkpoint_format.max_length_field}={limit} of "
                             f"{path}; lower --max_seq_length")
        return config

    def read_config(self, path):
        """The config file at `path` in the formats the family reads (default: its own
        JSON file)."""
        return self.config_class.from_json_file(path)

    def check_options(self, options):
        """Raises UsageError for options this family cannot run with."""

    def describe_inputs(self, options):
        """A line about the inputs the family derives (None: nothing to say)."""
        return None

    def run_identity(self, options):
        """Options that change the model's inputs, recorded with the run's config."""
        return {}

    # -- inputs -----------------------------------------------------------------------
    def adapt_dataset_fn(self, dataset_fn, config, options):
        """Wraps a BERT-layout `dataset_fn(input_context, start_step)` so that its
        batches carry this family's model inputs (identity for BERT)."""
        return dataset_fn

    # -- checkpoints ------------------------------------------------------------------
    def initialize(self, model, kind, init_checkpoint, num_labels=None):
        """Loads `init_checkpoint` into a fresh model: the encoder, and the heads of
        `kind` when the checkpoint holds them (a fine-tuned or pretraining checkpoint,
        original-named or one of our training checkpoints). Returns (a log line,
        whether the heads were loaded)."""
        prefix = ckpt.resolve_checkpoint(init_checkpoint)
        with_heads = self.checkpoint_format.checkpoint_heads(prefix, kind, num_labels)
        path = self.checkpoint_format.load_checkpoint(model, prefix, skip_heads=not with_heads)
        parts = "encoder and heads" if with_heads else "encoder only; heads fresh"
        return f"Initialized from {path} ({parts})", with_heads

    def save_final_checkpoint(self, model, output_dir, config):
        """Writes `output_dir/<checkpoint_name>` and its config; returns the prefix."""
        prefix = os.path.join(output_dir, self.checkpoint_name)
        self.checkpoint_format.save_checkpoint(model, prefix)
        config.to_json_file(os.path.join(output_dir, self.config_name))
        return prefix

    def trained_checkpoint(self, output_dir):
        """What a run left in output_dir: its final checkpoint, else its latest
        training checkpoint (output_dir itself)."""
        final = os.path.join(output_dir, self.checkpoint_name)
        return final if tf.io.gfile.exists(final + ".index") else output_dir
