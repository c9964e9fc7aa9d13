"""Name-based (TF1-style) checkpoint I/O under the original BERT variable names.

Models describe themselves as `{original_name: keras_variable}` maps; this module reads
and writes such maps with clear errors. Everything goes through TF's file systems, so
`gs://` prefixes work as with the original scripts.
"""

import os
import re
import uuid

import numpy as np
from absl import logging

from realformer_tf.fileio import gfile
from realformer_tf.errors import CheckpointError, ConfigError

# Variables an original training checkpoint holds that are not model weights.
_NON_MODEL_SUFFIXES = ("/adam_m", "/adam_v", "/Momentum", "/lamb_m", "/lamb_v")
_NON_MODEL_NAMES = ("global_step", "_CHECKPOINTABLE_OBJECT_GRAPH")
_OBJECT_BASED_MARKER = ".ATTRIBUTES/VARIABLE_VALUE"
# Our training checkpoints (training.checkpointable_weights) keep the model weights as
# a dict keyed by original name; TF escapes "/" as ".S" and "." as "..".
_TRAINING_WEIGHTS = re.compile(r"^model_weights/(.*)/\.ATTRIBUTES/VARIABLE_VALUE$")


def _hf():
    # Folders are read through hf.reading (imported here: the hf package's writing side
    # builds on this module).
    from realformer_tf.checkpoints.hf import reading
    return reading


def _folder_weights(path):
    """A Hugging Face folder's tensors under our names: GPT-2's or our variant's (a causal
    LM), or BERT's."""
    from realformer_tf.checkpoints.hf import gpt2

    return gpt2.Gpt2FolderWeights(path) if gpt2.is_causal_lm_folder(path) else _hf().HfFolderWeights(path)


def _tensorflow():
    """TensorFlow, which reads and writes name-based checkpoints (any Keras backend)."""
    try:
        import tensorflow as tf
    except ImportError:
        raise CheckpointError(
            "reading or writing a TF1 name-based checkpoint needs TensorFlow; "
            "pip install tensorflow (the model itself can stay on JAX or PyTorch)") from None
    return tf


def resolve_checkpoint(path):
    """A checkpoint prefix, a directory (its latest checkpoint), or a Hugging Face BERT
    folder (config.json + model.safetensors, returned as it is) -> what to read."""
    # The prefix first: on ram:// any prefix of a file name counts as a directory, so
    # isdir(".../bert_model.ckpt") is true next to bert_model.ckpt.index.
    if gfile().exists(path + ".index"):
        return path
    if _hf().is_hf_folder(path):
        _folder_weights(path)  # fails now when the weights are missing or foreign
        return path
    if gfile().isdir(path):
        latest = _tensorflow().train.latest_checkpoint(path)
        if latest is None:
            raise CheckpointError(
                f"{path} is a directory without a checkpoint (nor a Hugging Face folder with "
                "config.json and model.safetensors)")
        return latest
    raise CheckpointError(
        f"no checkpoint at {path} (expected {path}.index); pass the prefix, e.g. "
        "/path/bert_model.ckpt, not one of its files, or a Hugging Face model folder")


def _reader(prefix):
    """The checkpoint reader of a resolved prefix. Not tf.train.load_checkpoint, which
    first asks whether the prefix is a directory: on ram:// any prefix of a file name
    counts as one."""
    return _tensorflow().compat.v1.train.NewCheckpointReader(prefix)


def list_checkpoint(prefix):
    """{name: shape} of every variable stored under `prefix` (a Hugging Face folder's
    tensors under their original BERT names, in our layout)."""
    if _hf().is_hf_folder(prefix):
        return _folder_weights(prefix).shapes()
    return dict(_reader(prefix).get_variable_to_shape_map())


def is_object_based(names):
    return any(_OBJECT_BASED_MARKER in name for name in names)


def _unescape(key):
    return re.sub(r"\.(S|\.)", lambda m: "/" if m.group(1) == "S" else ".", key)


def original_names(stored):
    """{original name: key in the checkpoint} for an original-named checkpoint or one
    of our training checkpoints; None for other object-based checkpoints."""
    if not is_object_based(stored):
        return {name: name for name in stored}
    matches = [(_TRAINING_WEIGHTS.match(key), key) for key in stored]
    names = {_unescape(m.group(1)): key for m, key in matches if m}
    return names or None


def _is_model_weight(name):
    return not (name in _NON_MODEL_NAMES or name.endswith(_NON_MODEL_SUFFIXES))


def _format_names(names, limit=8):
    names = sorted(names)
    shown = ", ".join(names[:limit])
    return shown + (f" (and {len(names) - limit} more)" if len(names) > limit else "")


class _TfCheckpoint:
    """A name-based checkpoint (original names, or our training checkpoints' weights)
    seen as {original name: tensor}, like hf_checkpoint.HfFolderWeights."""

    def __init__(self, prefix):
        self.path = prefix
        raw = list_checkpoint(prefix)
        self._keys = original_names(raw)
        if self._keys is None:
            raise CheckpointError(
                f"{prefix} is an object-based checkpoint that was not written by realformer_tf; "
                "give an original-named BERT checkpoint, one of ours or a Hugging Face folder"
            )
        self._shapes = {name: list(raw[key]) for name, key in self._keys.items()}
        self._reader = None

    def shapes(self):
        return self._shapes

    def stored_name(self, name):
        return name

    def get(self, name):
        if self._reader is None:
            self._reader = _reader(self.path)
        return self._reader.get_tensor(self._keys[name])


def open_named_weights(path):
    """{original name: tensor} view of a checkpoint prefix / directory or a Hugging Face
    folder: an object with `path`, `shapes()`, `get(name)` and `stored_name(name)`."""
    path = resolve_checkpoint(path)
    if _hf().is_hf_folder(path):
        return _folder_weights(path)
    return _TfCheckpoint(path)


def _named(source, names, limit=8):
    """Names as the source stores them (a Hugging Face tensor name, then ours)."""
    shown = []
    for name in names:
        stored = source.stored_name(name)
        shown.append(name if stored == name else f"{stored} ({name})")
    return _format_names(shown, limit)


def _check_names(source, variables, owned_prefixes, optional_prefixes, description):
    """Raises CheckpointError naming missing, unexpected or mis-shaped weights."""
    stored = source.shapes()
    missing = [n for n in variables if n not in stored and not n.startswith(tuple(optional_prefixes))]
    kept = sorted(n for n in variables if n not in stored and n not in missing)
    if kept:
        logging.warning("%s has no %s; kept as initialized", source.path, _named(source, kept))
    if missing:
        raise CheckpointError(
            f"{source.path} lacks {len(missing)} variable(s) that {description} needs: "
            f"{_named(source, missing)}. Is bert_config_file the one this checkpoint was "
            "trained with (layer_norm_type, normformer switches, sizes)?"
        )
    unexpected = [
        name for name in stored
        if _is_model_weight(name) and name not in variables and name.startswith(tuple(owned_prefixes))
    ]
    if unexpected:
        raise CheckpointError(
            f"{source.path} holds {len(unexpected)} variable(s) that {description} does not have: "
            f"{_named(source, unexpected)}. The checkpoint is of another variant or size than "
            "bert_config_file describes."
        )
    mismatched = [
        f"{source.stored_name(name)} (checkpoint {list(stored[name])}, model {list(var.shape)})"
        for name, var in variables.items()
        if name in stored and list(stored[name]) != list(var.shape)
    ]
    if mismatched:
        raise CheckpointError(
            f"{source.path} has shapes that differ from {description}: {_format_names(mismatched, 5)}. "
            "Check bert_config_file (hidden_size, vocab_size, num_attention_heads, ...)."
        )


def load_named_variables(prefix, variables, owned_prefixes, description="the model",
                         optional_prefixes=(), transforms=None, allow_nonfinite=False):
    """Assigns checkpoint tensors to `variables` ({name: variable}) by name.

    Checkpoint entries that are not model weights (optimizer slots, global_step) are
    ignored, as are weights outside `owned_prefixes` (e.g. the pretraining heads when
    loading an encoder). A weight inside `owned_prefixes` that the model lacks means the
    checkpoint is of another variant or size, and is an error, as is a missing weight
    (except those under `optional_prefixes`, which then keep their values) or a shape
    mismatch. `prefix` may also be a Hugging Face BERT folder. `transforms` maps a name
    to a function applied to its stored array (a same-shape layout change, e.g. permuted
    rows). Weights holding NaN or Inf are refused, naming them, unless `allow_nonfinite`
    (e.g. to inspect a diverged checkpoint). Returns what was read.
    """
    source = open_named_weights(prefix)
    _check_names(source, variables, owned_prefixes, optional_prefixes, description)
    stored = source.shapes()
    transforms = transforms or {}
    not_float, nonfinite = [], []
    for name, var in variables.items():
        if name in stored:
            value = np.asarray(source.get(name))
            if _is_float(np.dtype(var.dtype)) and not _is_float(value.dtype):
                not_float.append(f"{source.stored_name(name)} ({value.dtype})")
                continue
            if not allow_nonfinite and _is_float(value.dtype) and not np.isfinite(value).all():
                nonfinite.append(source.stored_name(name))
            if name in transforms:
                value = transforms[name](value)
            var.assign(value.astype(np.dtype(var.dtype)))
    if not_float:
        raise CheckpointError(
            f"{source.path}: the weight(s) {_format_names(not_float)} are not floating point; "
            "the checkpoint is damaged or not of this model")
    if nonfinite:
        raise CheckpointError(
            f"{source.path} holds NaN or Inf in {_format_names(nonfinite)} (a diverged or damaged "
            "checkpoint); use an earlier checkpoint, or load it anyway with allow_nonfinite=True "
            "(convert_checkpoint.py --allow_nonfinite_weights)")
    return source.path


def require_stated_variant(model, path, decide_variant, decider_name):
    """For a loader given a model whose config does not state residual_attention:
    `decide_variant(model, resolved path)` (a family's decision from the weights), or
    a ConfigError when the caller gave none."""
    if decide_variant is None:
        raise ConfigError(
            f"{type(model).__name__}'s config does not state residual_attention, and vanilla and "
            f"RealFormer checkpoints hold the same weights; state it in the config, or load through "
            f"{decider_name}, which tells it from the weights")
    decide_variant(model, resolve_checkpoint(path))


def _is_float(dtype):
    # bfloat16 (ml_dtypes) is not a NumPy floating subtype but is a float.
    return np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"


# Below this many parameters of excess a model is cheap to build, and the loader's own
# check (after building) names every missing, unexpected or mis-shaped weight.
EARLY_CHECK_SLACK = 2**24


def check_config_fits(prefix, expected, layer_pattern, num_layers, description, num_parameters):
    """Compares a config with a checkpoint's stored shapes BEFORE a model is built (the
    shapes come from the index / safetensors header, which is cheap), so a config whose
    model is far larger than the checkpoint (a wrong or hostile config) fails in a
    second instead of allocating that model first. Smaller mismatches are left to the
    loader, which names every weight.

    Args:
        prefix: a resolved checkpoint (prefix or Hugging Face folder).
        expected: {original name: shape} of the weights that fix the model's size (the
            embedding tables, one layer's feed-forward kernel); each must be stored with
            that shape when the checkpoint holds it, and the first must be stored.
        layer_pattern: a regex whose group 1 is a layer index in stored names.
        num_layers: the config's layer count, compared with the stored layers.
        description: what `expected` comes from (the config file), for the message.
        num_parameters: a lower bound of the config's model size (weights); the check
            fires when it exceeds twice the stored size plus EARLY_CHECK_SLACK.

    Raises:
        CheckpointError naming the checkpoint, the tensor and both shapes.
    """
    stored = list_checkpoint(prefix)
    keys = original_names(stored)
    if keys is None:
        return  # not ours: the loader reports it
    shapes = {name: list(stored[key]) for name, key in keys.items()}
    stored_size = sum(int(np.prod(shape, dtype=np.float64)) for name, shape in shapes.items()
                      if _is_model_weight(name))
    if num_parameters <= 2 * stored_size + EARLY_CHECK_SLACK:
        return
    what = (f"{description} describes a model of at least {num_parameters:,} weights, the "
            f"checkpoint holds {stored_size:,}")
    first = next(iter(expected))
    if first not in shapes:
        raise CheckpointError(f"{prefix} does not fit: it has no {first}, and {what}")
    details = [f"{name} (checkpoint {shapes[name]}, config {list(shape)})"
               for name, shape in expected.items() if name in shapes and shapes[name] != list(shape)]
    layers = {int(m.group(1)) for m in map(re.compile(layer_pattern).search, shapes) if m}
    if layers and max(layers) + 1 != num_layers:
        details.append(f"{max(layers) + 1} layers (config num_hidden_layers={num_layers})")
    raise CheckpointError(
        f"{prefix} does not fit: {what}" + (f"; it differs in {', '.join(details)}" if details else "")
        + ". Use the config the checkpoint was trained with (vocab_size, hidden_size, num_hidden_layers, ...)")


def save_named_variables(prefix, variables):
    """Writes {name: variable} as a name-based checkpoint at `prefix`, atomically.

    The tensors are written under a temporary prefix and renamed into place, data
    before index: the `.index` file is what makes a checkpoint visible, so a crash never
    leaves a half-written checkpoint under `prefix`.
    """
    directory = os.path.dirname(prefix)
    if directory:
        gfile().makedirs(directory)
    temp = f"{prefix}.tmp-{uuid.uuid4().hex}"
    names = sorted(variables)
    tf = _tensorflow()
    tf.raw_ops.SaveV2(
        prefix=temp,
        tensor_names=names,
        shape_and_slices=[""] * len(names),
        tensors=[tf.convert_to_tensor(variables[name]) for name in names],
    )
    for suffix in (".data-00000-of-00001", ".index"):
        gfile().rename(temp + suffix, prefix + suffix, overwrite=True)
    return prefix
