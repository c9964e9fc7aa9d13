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
"""

import re

from realformer_tf.checkpoints.hf import reading as hf_folder
from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints import variant_evidence
from realformer_tf.checkpoints.format import CheckpointFormat
from realformer_tf.models.bert import model as bert_models

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

_KIND_OF_CLASS = (  # most derived first
    (bert_models.BertPretrainingModel, "pretraining"),
    (bert_models.BertClassifierModel, "classifier"),
    (bert_models.BertSquadModel, "squad"),
    (bert_models.BertModel, "encoder"),
)


def model_kind(model):
    """"encoder", "pretraining", "classifier" or "squad" for a BERT model (or subclass)."""
    for cls, kind in _KIND_OF_CLASS:
        if isinstance(model, cls):
            return kind
    raise TypeError(f"{type(model).__name__} is not a BertModel or BERT task model "
                    "(realformer_tf.modeling); ETC models: checkpoints.etc_official")


# -- names --------------------------------------------------------------------------------
def _dense(prefix, dense):
    return {f"{prefix}/kernel": dense.kernel, f"{prefix}/bias": dense.bias}


def _layer_norm(prefix, layer_norm):
    return {f"{prefix}/gamma": layer_norm.gamma, f"{prefix}/beta": layer_norm.beta}


def _logits(prefix, logits_layer):
    return {f"{prefix}output_weights": logits_layer.output_weights,
            f"{prefix}output_bias": logits_layer.output_bias}


def block_variables(prefix, block):
    """{original name: variable} of one `TransformerBlock` under `prefix` (e.g.
    "bert/encoder/layer_0"): attention, feed-forward, LayerNorms and the variants'
    extra weights (NormFormer's head scale and LayerNorms, the residual scale)."""
    att = block.attention
    names = {
        **_dense(f"{prefix}/attention/self/query", att.query_dense),
        **_dense(f"{prefix}/attention/self/key", att.key_dense),
        **_dense(f"{prefix}/attention/self/value", att.value_dense),
        **_dense(f"{prefix}/attention/output/dense", att.output_dense),
        **_layer_norm(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm),
        **_dense(f"{prefix}/intermediate/dense", block.intermediate_dense),
        **_dense(f"{prefix}/output/dense", block.output_dense),
        **_layer_norm(f"{prefix}/output/LayerNorm", block.output_layer_norm),
    }
    if block.normformer:
        names[f"{prefix}/attention/output/head_scale"] = att.head_scale
        names.update(_layer_norm(f"{prefix}/attention/post_LayerNorm", block.attention_post_layer_norm))
        names.update(_layer_norm(f"{prefix}/intermediate/LayerNorm", block.intermediate_layer_norm))
    if block.use_residual_scale:
        names[f"{prefix}/output/residual_scale"] = block.residual_scale
    return names


def _encoder_variables(bert):
    emb = bert.embeddings
    names = {
        "bert/embeddings/word_embeddings": emb.word_embeddings,
        "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        **_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm),
    }
    for i, block in enumerate(bert.encoder.blocks):
        names.update(block_variables(f"bert/encoder/layer_{i}", block))
    if bert.encoder.final_layer_norm is not None:
        names.update(_layer_norm("bert/encoder/LayerNorm", bert.encoder.final_layer_norm))
    names.update(_dense("bert/pooler/dense", bert.pooler))
    return names


def _head_variables(model, kind):
    if kind == "pretraining":
        mlm = model.masked_lm
        return {**_dense("cls/predictions/transform/dense", mlm.transform_dense),
                **_layer_norm("cls/predictions/transform/LayerNorm", mlm.transform_layer_norm),
                "cls/predictions/output_bias": mlm.output_bias,
                **_logits("cls/seq_relationship/", model.next_sentence)}
    if kind == "classifier":
        return _logits("", model.classifier)
    if kind == "squad":
        return _logits("cls/squad/", model.span)
    return {}


# A weight's Keras path (ending) -> its original name: what `bert_variables` gives, read
# off the path alone (the model's own name, first in the path, is free), for
# `get_assignment_map_from_checkpoint`, which gets variables and no model.
# tests/test_original_api.py checks the two agree on every variant and kind.
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


def bert_variables(model, include_heads=True):
    """{original BERT name: variable} for every weight of a BertModel or task model
    (built from its config first if it is not built yet); `include_heads=False`: the
    encoder's only."""
    kind = model_kind(model)
    model._ensure_built()
    names = _encoder_variables(model if kind == "encoder" else model.bert)
    if include_heads:
        names.update(_head_variables(model, kind))
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
def load_bert_checkpoint(model, path, skip_heads=False):
    """Loads an original-named checkpoint (a prefix or a directory), one of our training
    checkpoints, or a Hugging Face BERT folder (config.json + model.safetensors) into
    `model` (a BertModel or task model).

    Optimizer slots and `global_step` are ignored, and so are heads the model does not
    have; `skip_heads=True` also leaves the model's own heads as initialized
    (fine-tuning from a pretraining checkpoint). A model whose config does not state
    residual_attention gets the weights' evidence first (`variant_evidence`).

    Returns:
        The prefix (or file) read.

    Raises:
        CheckpointError naming any missing, unexpected or mis-shaped variable, or a
        checkpoint of another size than the config (checked before the model is built).
        ConfigError when the evidence contradicts the model's residual_attention.
    """
    kind = model_kind(model)
    if not model.built:  # sizes first: building a model the checkpoint does not fit could exhaust memory
        check_checkpoint_fits(model.config, ckpt.resolve_checkpoint(path))
    if not variant_evidence.is_stated(model.config):
        # A config file without residual_attention: the weights decide (or an error).
        variant_evidence.check_loaded_model(model, FORMAT, ckpt.resolve_checkpoint(path))
    owned = (ENCODER_PREFIX,) + (() if skip_heads else HEAD_PREFIXES[kind])
    optional = OPTIONAL_PREFIXES.get(kind, ())
    if hf_folder.is_hf_folder(path):
        # transformers' BertForMaskedLM / BertForQuestionAnswering save no pooler and
        # initialize a fresh one when a task needs it; so do we (with a log line).
        optional += ("bert/pooler/",)
    return ckpt.load_named_variables(
        path, bert_variables(model, include_heads=not skip_heads), owned,
        description=f"{type(model).__name__} ({model.config.describe()})",
        optional_prefixes=optional,
    )


def save_bert_checkpoint(model, prefix):
    """Writes every weight of `model` under its original BERT name (a TF1 name-based
    checkpoint at `prefix`); returns the prefix written."""
    return ckpt.save_named_variables(prefix, bert_variables(model))


class BertFormat(CheckpointFormat):
    """BERT's models under the original names (held by `families.BertFamily`)."""

    name = "bert"
    head_prefixes = HEAD_PREFIXES
    classifier_weights_name = CLASSIFIER_WEIGHTS_NAME
    max_length_field = "max_position_embeddings"

    def model_classes(self):
        return {"pretraining": bert_models.BertPretrainingModel,
                "classifier": bert_models.BertClassifierModel,
                "squad": bert_models.BertSquadModel, "encoder": bert_models.BertModel}

    def build_model(self, config, kind, num_labels=None, dtype=None):
        model = super().build_model(config, kind, num_labels, dtype)
        if kind == "squad":
            # The span head reads the sequence output only: the pooler gets no gradient and,
            # as in the original (whose optimizer skips None gradients), stays as loaded.
            model.bert.pooler.trainable = False
        return model

    check_checkpoint_fits = staticmethod(check_checkpoint_fits)
    load_checkpoint = staticmethod(load_bert_checkpoint)
    save_checkpoint = staticmethod(save_bert_checkpoint)


FORMAT = BertFormat()
