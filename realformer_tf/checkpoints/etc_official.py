"""ETC models under the official google-research etcmodel variable names.

The official `EtcModel` (a Keras layer named `etc_document_bert`, trained in TF1 graph
mode) stores its variables under its layers' name scopes, e.g.

  etc_document_bert/token_emb_lookup/embedding_table            [vocab, embedding_size]
  etc_document_bert/token_emb_lookup/projection/{kernel,bias}   (embedding_size != hidden)
  etc_document_bert/segment_emb_lookup/embedding_table
  etc_document_bert/position_emb_lookup_{long,global}/embedding_table
  etc_document_bert/{long,global}_emb_layer_norm/{gamma,beta}
  etc_document_bert/global_local_transformer_layers/
    fused_att_layer_N/layer_norm_{0,1}/{gamma,beta}                 (0: long, 1: global)
    fused_att_layer_N/fused_global_local_att/<piece>_projection/linear/{kernel,bias}
        piece: long_query, l2l_key, l2l_value (+ l2g_*, global_query, g2g_*, g2l_* when
        the config does not share them)
    fused_att_layer_N/fused_global_local_att/{long,global}_output_projection/{kernel,bias}
    fused_att_layer_N/fused_global_local_att/long_qkv_attention/qkv_relative_attention/
        relative_{emb,bias}_table
    fused_att_layer_N/fused_global_local_att/global_qkv_attention/relative_{emb,bias}_table
    feed_forward_layer_N/dense_layers/layer_{0,1}/{kernel,bias}, .../layer_norm/{gamma,beta}
        (long_/global_feed_forward_layer_N when share_feed_forward_params is false)

The relative tables are the one place where the values differ, not just the names: the
official relative position ids are 0 = same position, 1..M = keys to the right,
M+1..2M = keys to the left (M = relative_pos_max_distance), while ours are
clip(j - i, -M, M) + M; rows from 2M+1 on (l2g/g2l other / same sentence) agree. The
rows are permuted on the way in and out.

Heads (pretraining, classifier) are not part of the official model; they keep our names.

Our names (`load_etc_checkpoint`, `save_etc_checkpoint`, `etc_variables`) are the Keras
weight paths under a fixed root: the encoder's under `etc/` (identical in every ETC
model, so a pretraining checkpoint initializes a classifier), heads under their layer
names (`predictions/`, `seq_relationship/`, `pooler/`, `classifier/`, `squad/`).

    model = EtcClassifierModel(config, num_labels=2)
    etc_official.load_etc_checkpoint(model, "etc_model.ckpt", skip_heads=True)
    etc_official.save_etc_checkpoint(model, "out/etc_model.ckpt", official_names=False)
"""

import numpy as np

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.errors import CheckpointError

ENCODER_PREFIX = "etc/"
# {kind: the name prefixes of its heads} (see checkpoints.bert.HEAD_PREFIXES).
HEAD_PREFIXES = {
    "pretraining": ("predictions/", "seq_relationship/"),
    "classifier": ("pooler/", "classifier/"),
    "squad": ("squad/",),
    "encoder": (),
}
CLASSIFIER_WEIGHTS_NAME = "classifier/output_weights"
# The weight every ETC encoder has, under our names (BERT's is token_type_embeddings).
_ETC_MARKER = "embeddings/segment_embeddings"

ROOT = "etc_document_bert"
_STACK = f"{ROOT}/global_local_transformer_layers"
_PIECES = ("long_query", "l2l_key", "l2l_value", "l2g_key", "l2g_value",
           "global_query", "g2g_key", "g2g_value", "g2l_key", "g2l_value")


def official_row_order(max_distance, vocab_size):
    """Index array `order` with official_table = our_table[order]."""
    order = np.arange(vocab_size)
    m = int(max_distance)
    order[0] = m                                   # same position
    order[1:m + 1] = m + np.arange(1, m + 1)       # j - i = 1..M (right)
    order[m + 1:2 * m + 1] = m - np.arange(1, m + 1)  # j - i = -1..-M (left)
    return order


def _dense(prefix, layer):
    return {f"{prefix}/kernel": layer.kernel, f"{prefix}/bias": layer.bias}


def _norm(prefix, layer):
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def _embedding_names(embeddings):
    names = {
        f"{ROOT}/token_emb_lookup/embedding_table": embeddings.word_embeddings,
        f"{ROOT}/segment_emb_lookup/embedding_table": embeddings.segment_embeddings,
        **_norm(f"{ROOT}/long_emb_layer_norm", embeddings.long_layer_norm),
        **_norm(f"{ROOT}/global_emb_layer_norm", embeddings.global_layer_norm),
    }
    if embeddings.embedding_projection is not None:
        names.update(_dense(f"{ROOT}/token_emb_lookup/projection", embeddings.embedding_projection))
    if embeddings.max_absolute_position_embeddings:
        names[f"{ROOT}/position_emb_lookup_long/embedding_table"] = embeddings.position_embeddings
        names[f"{ROOT}/position_emb_lookup_global/embedding_table"] = embeddings.global_position_embeddings
    return names


def _attention_names(prefix, attention):
    """Names of one GlobalLocalAttention; relative tables listed separately (permuted)."""
    att = f"{prefix}/fused_global_local_att"
    names = {}
    for piece in _PIECES:  # our layer keeps exactly the distinct (unshared) projections
        layer = getattr(attention, piece, None)
        if layer is not None:
            names.update(_dense(f"{att}/{piece}_projection/linear", layer))
    names.update(_dense(f"{att}/long_output_projection", attention.long_output))
    if not attention.share_att_output_projection:
        names.update(_dense(f"{att}/global_output_projection", attention.global_output))
    relative = {}
    if attention.use_relative:
        for side, scope in (("long", "long_qkv_attention/qkv_relative_attention"),
                            ("global", "global_qkv_attention")):
            relative[f"{att}/{scope}/relative_emb_table"] = getattr(attention, f"{side}_relative_embeddings")
            relative[f"{att}/{scope}/relative_bias_table"] = getattr(attention, f"{side}_relative_bias")
    return names, relative


def _feed_forward_names(prefix, ffn):
    return {**_dense(f"{prefix}/dense_layers/layer_0", ffn.intermediate_dense),
            **_dense(f"{prefix}/dense_layers/layer_1", ffn.output_dense),
            **_norm(f"{prefix}/layer_norm", ffn.output_layer_norm)}


def official_variables(etc_model):
    """({official name: variable}, {official name of a relative table: variable}) of a
    `EtcModel` in the official layout (built here if needed)."""
    etc_model._ensure_built()
    config = etc_model.config
    if not config.official or config.layer_norm_type == "normformer":
        raise CheckpointError(
            f"official ETC names need an official-layout, post- or pre-LN config (got layout "
            f"{config.layout!r}, layer_norm_type {config.layer_norm_type!r}); use "
            "save_etc_checkpoint without official_names")
    names, relative = _embedding_names(etc_model.embeddings), {}
    for i, block in enumerate(etc_model.encoder.blocks):
        fused = f"{_STACK}/fused_att_layer_{i}"
        names.update(_norm(f"{fused}/layer_norm_0", block.long_attention_layer_norm))
        names.update(_norm(f"{fused}/layer_norm_1", block.global_attention_layer_norm))
        att_names, att_relative = _attention_names(fused, block.attention)
        names.update(att_names)
        relative.update(att_relative)
        if config.share_feed_forward_params:
            names.update(_feed_forward_names(f"{_STACK}/feed_forward_layer_{i}", block.long_feed_forward))
        else:
            for side in ("long", "global"):
                names.update(_feed_forward_names(f"{_STACK}/{side}_feed_forward_layer_{i}",
                                                 getattr(block, f"{side}_feed_forward")))
    return names, relative


def has_official_names(path):
    """True when the checkpoint at `path` holds official ETC variables."""
    names = ckpt.list_checkpoint(ckpt.resolve_checkpoint(path))
    return any(name.startswith(ROOT + "/") for name in names)


def _to_ours(order):
    inverse = np.argsort(order)
    return lambda array: np.asarray(array)[inverse]


def load_official(model, path, skip_heads=False, allow_nonfinite=False):
    """Loads an official-named ETC checkpoint into `model` (an ETC model in the official
    layout); heads come under our names when the checkpoint has them."""
    model._ensure_built()  # the whole model: building its encoder alone would lock it
    etc = getattr(model, "etc", model)
    names, relative = official_variables(etc)
    config = etc.config
    order = official_row_order(config.relative_pos_max_distance, config.relative_vocab_size)
    variables = {**names, **relative}
    if not skip_heads:
        variables.update(_head_variables(model))
    owned = (ROOT + "/",) + (() if skip_heads else HEAD_PREFIXES[model_kind(model)])
    return ckpt.load_named_variables(
        path, variables, owned, description=f"{type(model).__name__} ({config.describe()})",
        transforms={name: _to_ours(order) for name in relative}, allow_nonfinite=allow_nonfinite)


def save_official(model, prefix):
    """Writes `model`'s encoder under the official names (heads under ours)."""
    model._ensure_built()
    etc = getattr(model, "etc", model)
    names, relative = official_variables(etc)
    order = official_row_order(etc.config.relative_pos_max_distance, etc.config.relative_vocab_size)
    arrays = {name: variable.numpy() for name, variable in names.items()}
    arrays.update({name: variable.numpy()[order] for name, variable in relative.items()})
    arrays.update({name: variable.numpy() for name, variable in _head_variables(model).items()})
    return ckpt.save_named_variables(prefix, arrays)


def _head_variables(model):
    return {name: v for name, v in etc_variables(model).items() if not name.startswith(ENCODER_PREFIX)}


# -- our names ----------------------------------------------------------------------------
def _relative_paths(model):
    """The weights' Keras paths without the model's own name (built from its config
    first if needed)."""
    model._ensure_built()
    return [v.path.split("/", 1)[1] for v in model.weights]


def model_kind(model):
    """"encoder", "pretraining", "classifier" or "squad" for an ETC model, told by the
    names of its weights: a task model nests the encoder under `etc/`, its heads under
    their own names.

    Raises:
        TypeError for a model that is no ETC model.
    """
    paths = _relative_paths(model)
    if _ETC_MARKER in paths:
        return "encoder"
    if ENCODER_PREFIX + _ETC_MARKER not in paths:
        raise TypeError(f"{type(model).__name__} is not an EtcModel or ETC task model "
                        "(realformer_tf.etc_modeling); BERT models: checkpoints.bert")
    for kind in ("pretraining", "classifier", "squad"):
        if any(p.startswith(HEAD_PREFIXES[kind][0]) for p in paths):
            return kind
    raise TypeError(f"{type(model).__name__} has an ETC encoder but no head of a known kind")


def etc_variables(model, include_heads=True):
    """{name: variable} of every weight of an ETC model under our names (built from
    its config first if needed); `include_heads=False`: the encoder's only."""
    encoder_only = model_kind(model) == "encoder"
    names = {}
    for v, rest in zip(model.weights, _relative_paths(model)):
        name = f"{ENCODER_PREFIX}{rest}" if encoder_only else rest
        if include_heads or name.startswith(ENCODER_PREFIX):
            names[name] = v
    if len(names) != len({id(v) for v in names.values()}):
        raise RuntimeError(f"{type(model).__name__}: weight names are not unique")
    return names


def check_checkpoint_fits(config, prefix):
    """Raises CheckpointError when the ETC checkpoint at `prefix` (ours or official
    names) is not of `config`'s size, before any model is built."""
    h, e = config.hidden_size, config.embedding_size or config.hidden_size
    if has_official_names(prefix):
        expected = {
            f"{ROOT}/token_emb_lookup/embedding_table": [config.vocab_size, e],
            f"{ROOT}/segment_emb_lookup/embedding_table": [config.segment_vocab_size, h],
            f"{_STACK}/feed_forward_layer_0/dense_layers/layer_0/kernel": [h, config.intermediate_size],
            f"{_STACK}/long_feed_forward_layer_0/dense_layers/layer_0/kernel": [h, config.intermediate_size],
        }
        pattern = r"/fused_att_layer_(\d+)/"
    else:
        expected = {
            "etc/embeddings/word_embeddings": [config.vocab_size, e],
            "etc/embeddings/segment_embeddings": [config.segment_vocab_size, h],
            "etc/encoder/layer_0/long_feed_forward/intermediate/kernel": [h, config.intermediate_size],
        }
        pattern = r"^etc/encoder/layer_(\d+)/"
    # A lower bound of the weights: token and segment tables, each layer's long-side
    # q/k/v/o and one feed-forward.
    weights = (config.vocab_size * e + config.segment_vocab_size * h
               + config.num_hidden_layers * (4 * h * h + 2 * h * config.intermediate_size))
    ckpt.check_config_fits(prefix, expected, pattern, config.num_hidden_layers,
                           f"the config ({config.describe()})", weights)


def load_etc_checkpoint(model, path, skip_heads=False, decide_variant=None, allow_nonfinite=False):
    """Loads a checkpoint written by `save_etc_checkpoint` (or a training checkpoint of
    ours), or an official ETC checkpoint (recognized by its `etc_document_bert/` names;
    needs a config in the official layout) into an ETC model; `skip_heads` loads the
    encoder only. A config that does not state residual_attention needs
    `decide_variant(model, prefix)` (the ETC family's, which
    `realformer_tf.etc_modeling.load_etc_checkpoint` passes), as in
    `checkpoints.bert.load_bert_checkpoint`. Weights holding NaN or Inf are refused
    unless `allow_nonfinite`. Returns the prefix read.

    Raises:
        CheckpointError naming any missing, unexpected or mis-shaped weight.
        ConfigError for an unstated residual_attention without `decide_variant`.
    """
    if not model.built:  # sizes first, before a model the checkpoint does not fit is built
        check_checkpoint_fits(model.config, ckpt.resolve_checkpoint(path))
    if not model.config.residual_attention_stated:
        ckpt.require_stated_variant(model, path, decide_variant, "realformer_tf.etc_modeling.load_etc_checkpoint")
    kind = model_kind(model)
    if has_official_names(path):
        return load_official(model, path, skip_heads=skip_heads, allow_nonfinite=allow_nonfinite)
    owned = (ENCODER_PREFIX,) + (() if skip_heads else HEAD_PREFIXES[kind])
    return ckpt.load_named_variables(
        path, etc_variables(model, include_heads=not skip_heads), owned,
        description=f"{type(model).__name__} ({model.config.describe()})", allow_nonfinite=allow_nonfinite)


def save_etc_checkpoint(model, prefix, official_names=False):
    """Writes every weight under our names, or with `official_names` the encoder under
    the official etcmodel names (official layout only; heads keep ours). Returns the
    prefix written."""
    if official_names:
        return save_official(model, prefix)
    return ckpt.save_named_variables(prefix, etc_variables(model))
