"""The `ModelFamily` interface: everything the jobs know about one kind of model, in
one object. A family builds its models by kind, adapts BERT-layout features to their
inputs, owns its checkpoint names and formats (through its module in
`realformer_tf.checkpoints`, which maps names and reads and writes tensors only), and
decides a checkpoint's unstated variant from its weights (`variant_evidence`)."""

import os

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.errors import UsageError
from realformer_tf.fileio import gfile

# What the BERT-layout jobs ask a family to build (a family's own kinds beyond these,
# e.g. the translation model's "translation", are the keys of its `model_classes`).
KINDS = ("pretraining", "classifier", "squad", "encoder")


class ModelFamily:
    """One kind of model. Subclasses set the class attributes and implement
    `model_classes` and the checkpoint functions (`_load`, `_save`, `_check_fits`,
    `_named_variables`), which their `checkpoints` module provides; a family with a
    Hugging Face folder format sets `hf_folder_description` and implements
    `check_hf_exportable` and `save_hf_folder` (and `hf_warning` where it writes
    variants stock transformers does not compute).

    Attributes:
        name: the `--model_type` value.
        config_class: a `JsonConfig` dataclass (`from_json_file`, `to_json_file`,
            `describe`).
        head_prefixes: {kind: variable-name prefixes of that kind's heads}: a
            checkpoint holds a kind's heads when it has a name under each prefix.
        classifier_weights_name: the classifier head's [num_labels, hidden] weights.
        max_length_field: the config field that bounds the input length.
        checkpoint_name: the final checkpoint a training run leaves in output_dir,
            written under the family's names (`names_description` says which).
        config_name: the config file written next to it.
        export_tasks: the tasks `realformer_tf.serving.export` can serve for this family.
        static_length: whether the model needs every batch padded to max_seq_length
            (ETC's blocked layout and fixed global tokens); the serving graph pads then.
        hf_folder_description: what `save_hf_folder` writes, for messages (e.g. "a
            GPT-2 folder (GPT2LMHeadModel, --model_type=causal_lm)"); None for a family
            without a Hugging Face folder format.
        hf_folder_needs_vocab: whether that folder carries the tokenizer (BERT's
            vocab.txt), so a conversion must find the vocab the model was trained with.
    """

    name = None
    config_class = None
    head_prefixes = {}
    classifier_weights_name = None
    max_length_field = None
    checkpoint_name = None
    names_description = None
    config_name = None
    export_tasks = ()
    static_length = False
    hf_folder_description = None
    hf_folder_needs_vocab = False

    # -- models -----------------------------------------------------------------------
    def model_classes(self):
        """{kind: Keras model class} (constructors take the config, and for the
        classifier `num_labels`)."""
        raise NotImplementedError

    def build_model(self, config, kind, num_labels=None, dtype=None):
        """The Keras model of `kind` (a key of `model_classes`): the family's one builder."""
        classes = self.model_classes()
        if kind not in classes:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(classes)}")
        kwargs = {} if dtype is None else {"dtype": dtype}
        if kind == "classifier":
            kwargs["num_labels"] = num_labels
        return classes[kind](config, **kwargs)

    def owns(self, model):
        """Whether `model` is one of this family's models."""
        return isinstance(model, tuple(self.model_classes().values()))

    def max_length(self, config):
        """The longest input the config's models take (None: no limit)."""
        return getattr(config, self.max_length_field) or None

    # -- configs and options ----------------------------------------------------------
    def load_config(self, path, max_seq_length=None):
        """The config at `path`, checked against `max_seq_length`."""
        if not path:
            raise UsageError("--bert_config_file is required (the model's config JSON)")
        config = self.read_config(path)
        limit = self.max_length(config)
        if max_seq_length is not None and limit and max_seq_length > limit:
            raise UsageError(f"--max_seq_length={max_seq_length} exceeds {self.max_length_field}={limit} of "
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
    def adapt_features(self, features, config, options=None):
        """One batch of BERT-layout features as this family's model inputs (identity
        for BERT). `options`: the job's options (None: the family's defaults)."""
        return features

    def adapt_dataset_fn(self, dataset_fn, config, options):
        """Wraps a BERT-layout `dataset_fn(input_context, start_step)` so that its
        batches carry this family's model inputs (identity for BERT)."""
        return dataset_fn

    # -- checkpoints ------------------------------------------------------------------
    def named_variables(self, model, include_heads=True):
        """{checkpoint name: variable} of every weight of one of this family's models."""
        return self._named_variables(model, include_heads)

    def check_checkpoint_fits(self, config, prefix):
        """Raises CheckpointError when the checkpoint at `prefix` (resolved) does not
        have the sizes `config` gives, from its stored shapes alone: called before a
        model is built, so a config that does not describe the checkpoint (or a hostile
        one) fails at once instead of allocating a model first."""
        self._check_fits(config, prefix)

    def load_checkpoint(self, model, path, skip_heads=False, allow_nonfinite=False):
        """Loads a checkpoint under the family's names (or one of our training
        checkpoints) into `model`; a config that does not state residual_attention is
        decided from the weights first (`variant_evidence.check_loaded_model`). Returns
        the prefix read."""
        from realformer_tf.families import variant_evidence

        def decide(model, prefix):
            variant_evidence.check_loaded_model(model, self, prefix)

        return self._load(model, path, skip_heads=skip_heads, decide_variant=decide,
                          allow_nonfinite=allow_nonfinite)

    def save_checkpoint(self, model, prefix):
        """Writes `model` under the family's names; returns the prefix written."""
        return self._save(model, prefix)

    def checkpoint_heads(self, prefix, kind, num_labels=None):
        """Whether the checkpoint at `prefix` holds the heads of `kind` (for a
        classifier with `num_labels`, one of that many labels)."""
        prefixes = tuple(self.head_prefixes.get(kind, ()))
        stored = ckpt.list_checkpoint(prefix)
        names = ckpt.original_names(stored) or {}
        if not prefixes or not all(any(n.startswith(p) for n in names) for p in prefixes):
            return False
        weights = names.get(self.classifier_weights_name)
        return kind != "classifier" or num_labels is None or (weights and stored[weights][0] == num_labels)

    def initialize(self, model, kind, init_checkpoint, num_labels=None):
        """Loads `init_checkpoint` into a fresh model: the encoder, and the heads of
        `kind` when the checkpoint holds them (a fine-tuned or pretraining checkpoint,
        original-named or one of our training checkpoints). Returns (a log line,
        whether the heads were loaded)."""
        prefix = ckpt.resolve_checkpoint(init_checkpoint)
        with_heads = self.checkpoint_heads(prefix, kind, num_labels)
        path = self.load_checkpoint(model, prefix, skip_heads=not with_heads)
        parts = "encoder and heads" if with_heads else "encoder only; heads fresh"
        return f"Initialized from {path} ({parts})", with_heads

    def save_final_checkpoint(self, model, output_dir, config):
        """Writes `output_dir/<checkpoint_name>` and its config; returns the prefix."""
        prefix = os.path.join(output_dir, self.checkpoint_name)
        self.save_checkpoint(model, prefix)
        config.to_json_file(os.path.join(output_dir, self.config_name))
        return prefix

    def load_trained(self, init_checkpoint, config_file=None):
        """(model, config) of a training run's output_dir (its final checkpoint, else its
        latest training checkpoint) or a checkpoint prefix (or a folder the family
        reads), in float32, for decoding or export. The config is `config_file`, else
        the family's config file beside the checkpoint (`config_beside`)."""
        config = self.load_config(config_file or self.config_beside(init_checkpoint))
        source = self.trained_checkpoint(init_checkpoint) if gfile().isdir(init_checkpoint) else init_checkpoint
        prefix = ckpt.resolve_checkpoint(source)
        self.check_checkpoint_fits(config, prefix)
        model = self.build_model(config, next(iter(self.model_classes())), dtype="float32")
        self.load_checkpoint(model, prefix)
        return model, config

    def config_beside(self, init_checkpoint):
        """The family's config file in `init_checkpoint` (a folder) or beside it (a
        prefix).

        Raises:
          UsageError when there is none.
        """
        folder = init_checkpoint if gfile().isdir(init_checkpoint) else os.path.dirname(init_checkpoint)
        path = os.path.join(folder, self.config_name)
        if not gfile().exists(path):
            raise UsageError(f"no {self.config_name} beside {init_checkpoint}; give the config file "
                             "(--bert_config_file)")
        return path

    def trained_checkpoint(self, output_dir):
        """What a run left in output_dir: its final checkpoint, else its latest
        training checkpoint (output_dir itself)."""
        final = os.path.join(output_dir, self.checkpoint_name)
        return final if gfile().exists(final + ".index") else output_dir

    # -- Hugging Face folders ---------------------------------------------------------
    def check_hf_exportable(self, config, folder, allow_variant=False):
        """Raises VariantExportError when the family's Hugging Face folder at `folder`
        would compute `config`'s model wrongly (`allow_variant`: write a variant anyway,
        where the family has a format of its own for it), before anything is built or
        written; UsageError for a family without a folder format."""
        raise UsageError(f"--model_type={self.name} has no Hugging Face folder format")

    def hf_warning(self, config):
        """The line to print before writing `config`'s model as a Hugging Face folder
        (None: nothing to warn about)."""
        return None

    def save_hf_folder(self, model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
        """Writes `model` as the family's Hugging Face folder; returns the folder.
        `vocab_file` / `do_lower_case`: the tokenizer files, for a family whose folder
        carries them (BERT); the others take them for the common signature only.

        Raises:
            VariantExportError as `check_hf_exportable`; UsageError for a family without
            a folder format.
        """
        raise UsageError(f"--model_type={self.name} has no Hugging Face folder format")
