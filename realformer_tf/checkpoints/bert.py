"""The original BERT variable names of the BERT models, and checkpoint I/O under them.

google-research/bert (and the RealFormer releases) name every weight by its TF1
variable scope: `bert/embeddings/word_embeddings`, `bert/encoder/layer_0/attention/
self/query/kernel`, ..., heads `cls/predictions/...`, `cls/seq_relationship/...`,
`output_weights` (run_classifier), `cls/squad/...` (run_squad). The models
(`realformer_tf.models.bert.model`) know nothing of these names; this module maps a
model's weights to them, and reads and writes TF1 name-based checkpoints (and Hugging
Face folders, read through `checkpoints.hf`) by them.

    model = BertClassifierModel(config, num_labels=2)
    bert_checkpoint.load_bert_checkpoint(model, "bert_model.ckpt", skip_heads=True)
    bert_checkpoint.save_bert_checkpoint(model, "out/bert_model.ckpt")
    bert_checkpoint.bert_variables(model)["bert/pooler/dense/kernel"]
    bert_checkpoint.save_hf_folder(model, "out/hf", vocab_file="vocab.txt")
"""

import re

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints.hf import reading as hf_folder
from realformer_tf.checkpoints.hf import writing as hf_writing

ENCODER_PREFIX = "bert/"
# {kind: the name prefixes of its heads}: a checkpoint holds a kind's heads when it has
# names under each; a model of that kind owns (loads, and refuses unknown names under)
# them. The encoder has none.
HEAD_PREFIXES = {
    "pretraining": ("cls/predictions/", "cls/seq_relationship/"),
    "classifier": ("output_weights", "output_bias"),
    "squad": ("cls/squad/",),
    "encoder": (),
}
# Weights a kind's outputs do not use, kept as initialized when a checkpoint lacks them:
# the span head reads the sequence output only (transformers' BertForQuestionAnswering
# has no pooler at all).
OPTIONAL_PREFIXES = {"squad": ("bert/pooler/",)}
CLASSIFIER_WEIGHTS_NAME = "output_weights"
# Stored names whose group 1 is a layer index (tf_checkpoint.check_config_fits).
LAYER_PATTERN = r"^bert/encoder/layer_(\d+)/"


def model_kind(model):
    """"encoder", "pretraining", "classifier" or "squad" for a BERT model, told by the
    names of its weights (a BERT model's heads have names no other kind has).

    Raises:
        TypeError for a model with weights of no BERT model.
    """
    names = [name for name, _ in _named_weights(model)]
    if not names or None in names:
        raise TypeError(f"{type(model).__name__} is not a BertModel or BERT task model "
                        "(realformer_tf.modeling); ETC models: checkpoints.etc_official")
    for kind in ("pretraining", "classifier", "squad"):
        if all(any(n.startswith(p) for n in names) for p in HEAD_PREFIXES[kind]):
            return kind
    return "encoder"


# -- names --------------------------------------------------------------------------------
# A weight's Keras path (ending) -> its original name: the one name map. A model's
# weights are named by their paths (`bert_variables`; the model's own name, first in the
# path, is free), and so are the variables `get_assignment_map_from_checkpoint` gets
# without a model.
_LAYER = r"encoder/layer_(\d+)/"
_PATH_NAMES = tuple((re.compile(r"(?:^|/)" + pattern + "$"), name) for pattern, name in (
    (r"embeddings/(word|token_type|position)_embeddings", r"bert/embeddings/\1_embeddings"),
    (r"embeddings/layer_norm/(gamma|beta)", r"bert/embeddings/LayerNorm/\1"),
    (_LAYER + r"attention/(query|key|value)/(kernel|bias)", r"bert/encoder/layer_\1/attention/self/\2/\3"),
    (_LAYER + r"attention/output/(kernel|bias)", r"bert/encoder/layer_\1/attention/output/dense/\2"),
    (_LAYER + r"attention/head_scale", r"bert/encoder/layer_\1/attention/output/head_scale"),
    (_LAYER + r"attention_layer_norm/(gamma|beta)", r"bert/encoder/layer_\1/attention/output/LayerNorm/\2"),
    (_LAYER + r"attention_post_layer_norm/(gamma|beta)", r"bert/encoder/layer_\1/attention/post_LayerNorm/\2"),
    (_LAYER + r"intermediate/(kernel|bias)", r"bert/encoder/layer_\1/intermediate/dense/\2"),
    (_LAYER + r"intermediate_layer_norm/(gamma|beta)", r"bert/encoder/layer_\1/intermediate/LayerNorm/\2"),
    (_LAYER + r"output/(kernel|bias)", r"bert/encoder/layer_\1/output/dense/\2"),
    (_LAYER + r"output_layer_norm/(gamma|beta)", r"bert/encoder/layer_\1/output/LayerNorm/\2"),
    (_LAYER + r"residual_scale", r"bert/encoder/layer_\1/output/residual_scale"),
    (r"encoder/final_layer_norm/(gamma|beta)", r"bert/encoder/LayerNorm/\1"),
    (r"pooler/(kernel|bias)", r"bert/pooler/dense/\1"),
    (r"predictions/transform_dense/(kernel|bias)", r"cls/predictions/transform/dense/\1"),
    (r"predictions/transform_layer_norm/(gamma|beta)", r"cls/predictions/transform/LayerNorm/\1"),
    (r"predictions/output_bias", r"cls/predictions/output_bias"),
    (r"seq_relationship/(output_weights|output_bias)", r"cls/seq_relationship/\1"),
    (r"squad/(output_weights|output_bias)", r"cls/squad/\1"),
    (r"classifier/(output_weights|output_bias)", r"\1"),
))


def original_name(variable_path):
    """The original BERT name of the weight at Keras path `variable_path` (e.g.
    "bert_classifier/bert/encoder/layer_0/attention/query/kernel" ->
    "bert/encoder/layer_0/attention/self/query/kernel"), or None for a path that is no
    BERT model weight."""
    for pattern, name in _PATH_NAMES:
        match = pattern.search(variable_path)
        if match:
            return match.expand(name)
    return None


def _named_weights(model):
    """[(original name, or None for a weight of no BERT model, variable)] of every
    weight of `model` (built from its config first if it is not built yet)."""
    if hasattr(model, "_ensure_built"):
        model._ensure_built()
    return [(original_name(variable.path), variable) for variable in model.weights]


def bert_variables(model, include_heads=True):
    """{original BERT name: variable} for every weight of a BertModel or task model
    (built from its config first if it is not built yet); `include_heads=False`: the
    encoder's only.

    Raises:
        TypeError for a model with a weight of no BERT model.
    """
    model_kind(model)
    named = dict(_named_weights(model))
    return named if include_heads else {n: v for n, v in named.items() if n.startswith(ENCODER_PREFIX)}


def block_variables(prefix, block):
    """{original name under `prefix` (e.g. "bert/encoder/layer_0"): variable} of one
    transformer block (named `layer_<i>`, as `TransformerEncoder` names them)."""
    names = {}
    for variable in block.weights:
        relative = variable.path[variable.path.rindex(block.name + "/"):]  # layer_<i>/attention/...
        name = original_name("encoder/" + relative)  # bert/encoder/layer_<i>/attention/self/...
        names[prefix + name[name.index("/", len("bert/encoder/")):]] = variable
    return names


# -- sizes --------------------------------------------------------------------------------
def key_shapes(config):
    """{original name: shape} of the weights that fix a BertConfig's model size (the
    word embeddings first: every BERT checkpoint holds them)."""
    h = config.hidden_size
    return {
        "bert/embeddings/word_embeddings": [config.vocab_size, h],
        "bert/embeddings/position_embeddings": [config.max_position_embeddings, h],
        "bert/embeddings/token_type_embeddings": [config.type_vocab_size, h],
        "bert/encoder/layer_0/intermediate/dense/kernel": [h, config.intermediate_size],
    }


def check_checkpoint_fits(config, prefix):
    """Raises CheckpointError when the checkpoint at `prefix` (a resolved prefix or a
    Hugging Face folder) is not of `config`'s size, before any model is built."""
    h, size = config.hidden_size, config.intermediate_size
    # A lower bound of the weights: embeddings, each layer's q/k/v/o and feed-forward.
    weights = ((config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
               + config.num_hidden_layers * (4 * h * h + 2 * h * size))
    ckpt.check_config_fits(prefix, key_shapes(config), LAYER_PATTERN,
                           config.num_hidden_layers, f"the config ({config.describe()})", weights)


# -- loading and saving -------------------------------------------------------------------
def load_bert_checkpoint(model, path, skip_heads=False, decide_variant=None, allow_nonfinite=False):
    """Loads an original-named checkpoint (a prefix or a directory), one of our training
    checkpoints, or a Hugging Face BERT folder (config.json + model.safetensors) into
    `model` (a BertModel or task model).

    Optimizer slots and `global_step` are ignored, and so are heads the model does not
    have; `skip_heads=True` also leaves the model's own heads as initialized
    (fine-tuning from a pretraining checkpoint). Weights holding NaN or Inf are refused
    unless `allow_nonfinite`.

    A model whose config does not state residual_attention (an eleven-field
    bert_config.json) is computed one way or the other with the same weights; the
    weights tell which. `decide_variant(model, prefix)` does that (the BERT family's,
    which `realformer_tf.modeling.load_bert_checkpoint` passes); without one such a model
    is refused.

    Returns:
        The prefix (or file) read.

    Raises:
        CheckpointError naming any missing, unexpected or mis-shaped variable, or a
        checkpoint of another size than the config (checked before the model is built).
        ConfigError for a config that does not state residual_attention and no
        `decide_variant`, or from `decide_variant`.
    """
    if not model.built:  # sizes first: building a model the checkpoint does not fit could exhaust memory
        check_checkpoint_fits(model.config, ckpt.resolve_checkpoint(path))
    if not model.config.residual_attention_stated:
        ckpt.require_stated_variant(model, path, decide_variant, "realformer_tf.modeling.load_bert_checkpoint")
    kind = model_kind(model)
    owned = (ENCODER_PREFIX,) + (() if skip_heads else HEAD_PREFIXES[kind])
    optional = OPTIONAL_PREFIXES.get(kind, ())
    if hf_folder.is_hf_folder(path):
        # transformers' BertForMaskedLM / BertForQuestionAnswering save no pooler and
        # initialize a fresh one when a task needs it; so do we (with a log line).
        optional += ("bert/pooler/",)
    return ckpt.load_named_variables(
        path, bert_variables(model, include_heads=not skip_heads), owned,
        description=f"{type(model).__name__} ({model.config.describe()})",
        optional_prefixes=optional, allow_nonfinite=allow_nonfinite,
    )


def save_bert_checkpoint(model, prefix):
    """Writes every weight of `model` under its original BERT name (a TF1 name-based
    checkpoint at `prefix`); returns the prefix written."""
    return ckpt.save_named_variables(prefix, bert_variables(model))


def save_hf_folder(model, folder, allow_variant=False, vocab_file=None, do_lower_case=True):
    """Writes `model` (a BertModel or task model) as a Hugging Face folder
    (`checkpoints.hf.write_hf_folder`: config.json, model.safetensors and, with
    `vocab_file`, the tokenizer files); a variant stock transformers cannot compute only
    with `allow_variant`. Returns `folder`."""
    arrays = {name: variable.numpy() for name, variable in bert_variables(model).items()}
    return hf_writing.write_hf_folder(folder, arrays, model_kind(model), model.config,
                                      num_labels=getattr(model, "num_labels", None), allow_variant=allow_variant,
                                      vocab_file=vocab_file, do_lower_case=do_lower_case)
