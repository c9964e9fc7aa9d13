"""google-research/bert's function-style `modeling.py` helpers that create variables
under the original names, and the assignment map that names every variable so
(the original API's name-bound half; the rest is `realformer_tf.models.bert.original_api`,
and `realformer_tf.modeling` re-exports both).

Variables. The original's function-style helpers (`embedding_lookup`,
`embedding_postprocessor`, `layer_norm`, `attention_layer`, `transformer_model`) create
variables with `tf.get_variable` under the enclosing `tf.compat.v1.variable_scope`. Here
they create Keras variables (through the package's layers: `LayerNorm`,
`TransformerEncoder`) kept in a module-level store keyed by the same full name
("bert/encoder/layer_0/attention/self/query/kernel"), so a second call under the same
scope (a loop, a tf.function retrace) reuses them, as `reuse=tf.AUTO_REUSE` would; the
store is the stand-in for a TF1 graph's variable collection (`reset_variables()` clears
it). Scopes are read from `tf.compat.v1.get_variable_scope()` on the TensorFlow backend
(other backends: the top level). `get_assignment_map_from_checkpoint` maps checkpoint
names to the underlying `tf.Variable`s of these and of every `modeling.BertModel` /
head model's weights (`checkpoints.bert.bert_variables`), which
`tf.compat.v1.train.init_from_checkpoint` assigns in TF2.

    with tf.compat.v1.variable_scope("bert/encoder"):
        layers = bert_functions.transformer_model(x, hidden_size=64, num_hidden_layers=2, ...)
    assignment_map, _ = bert_functions.get_assignment_map_from_checkpoint(
        bert_functions.function_variables(), "bert_model.ckpt")
"""

import collections
import re

import keras
from keras import ops

from realformer_tf.checkpoints import bert as bert_names
from realformer_tf.errors import OriginalApiError
from realformer_tf.layers import scores as scores_lib
from realformer_tf.layers.activations import gelu as _package_gelu
from realformer_tf.models.bert.original_api import (
    LAYER_NORM_EPSILON, _TF, _scope, create_initializer, dropout, gelu, get_shape_list)

_VARIABLES = {}  # full original name -> keras.Variable (function-style variables)
_LAYERS = {}  # variable scope -> (layer, signature) for function-style layers


def reset_variables():
    """Forgets every variable the function-style helpers created (a fresh "graph")."""
    _VARIABLES.clear()
    _LAYERS.clear()


def function_variables():
    """The variables the function-style helpers created (the stand-in for TF1's
    `tf.trainable_variables()` over them), in creation order."""
    return list(_VARIABLES.values())


# -------------------------------------------------------- scoped variables, layers
def _full_name(name):
    scope = _scope()
    return f"{scope}/{name}" if scope else name


def _get_variable(name, shape, initializer):
    """tf.get_variable with AUTO_REUSE: the variable `<scope>/<name>`, created once."""
    full = _full_name(name)
    var = _VARIABLES.get(full)
    if var is None:
        var = _VARIABLES[full] = keras.Variable(initializer, shape=tuple(shape),
                                                name=name.rsplit("/", 1)[-1])
    elif tuple(var.shape) != tuple(shape):
        raise OriginalApiError(
            f"variable {full} exists with shape {tuple(var.shape)}, asked for"
            f" {tuple(shape)}; use another variable scope or call reset_variables()")
    return var


def _get_layer(name, make, build_shape, signature):
    """The Keras layer for `<scope>/<name>`, built once; `signature` guards reuse."""
    full = _full_name(name)
    entry = _LAYERS.get(full)
    if entry is None:
        layer = make()
        layer.build(build_shape)
        entry = _LAYERS[full] = (layer, signature)
    elif entry[1] != signature:
        raise OriginalApiError(
            f"variable scope {full} already holds a layer built with {entry[1]}, asked"
            f" for {signature}; use another variable scope or call reset_variables()")
    return entry[0], full

def _layer_norm_layer(width, name):
    from realformer_tf.layers.normalization import LayerNorm

    layer, full = _get_layer(name, lambda: LayerNorm(epsilon=LAYER_NORM_EPSILON),
                             (None, width), ("LayerNorm", width))
    _VARIABLES.setdefault(full + "/gamma", layer.gamma)
    _VARIABLES.setdefault(full + "/beta", layer.beta)
    return layer


def layer_norm(input_tensor, name=None):
    """LayerNorm over the last axis (epsilon 1e-12); variables `<name or
    "LayerNorm">/gamma` and `/beta` in the current scope."""
    return _layer_norm_layer(input_tensor.shape[-1], name or "LayerNorm")(input_tensor)


def layer_norm_and_dropout(input_tensor, dropout_prob, name=None):
    return dropout(layer_norm(input_tensor, name), dropout_prob)


def embedding_lookup(input_ids, vocab_size, embedding_size=128, initializer_range=0.02,
                     word_embedding_name="word_embeddings", use_one_hot_embeddings=False):
    """Returns `(embeddings [B, L, E], embedding_table)`; `use_one_hot_embeddings`
    (a TPU speed choice in the original) gives the same numbers and is ignored."""
    del use_one_hot_embeddings
    table = _get_variable(word_embedding_name, (vocab_size, embedding_size),
                          create_initializer(initializer_range))
    output = ops.take(table, ops.cast(input_ids, "int32"), axis=0)
    if len(input_ids.shape) == 3:  # [B, L, k] ids: the original concatenates the k rows
        shape = get_shape_list(input_ids)
        output = ops.reshape(output, (shape[0], shape[1], shape[2] * embedding_size))
    return output, table


def embedding_postprocessor(input_tensor, use_token_type=False, token_type_ids=None,
                            token_type_vocab_size=16,
                            token_type_embedding_name="token_type_embeddings",
                            use_position_embeddings=True,
                            position_embedding_name="position_embeddings",
                            initializer_range=0.02, max_position_embeddings=512,
                            dropout_prob=0.1):
    """Adds token type and position embeddings, then LayerNorm and dropout."""
    batch, seq_length, width = get_shape_list(input_tensor, expected_rank=3)
    output = input_tensor
    if use_token_type:
        if token_type_ids is None:
            raise ValueError("`token_type_ids` must be specified if `use_token_type` is True.")
        table = _get_variable(token_type_embedding_name, (token_type_vocab_size, width),
                              create_initializer(initializer_range))
        output = output + ops.take(table, ops.cast(token_type_ids, "int32"), axis=0)
    if use_position_embeddings:
        table = _get_variable(position_embedding_name, (max_position_embeddings, width),
                              create_initializer(initializer_range))
        if isinstance(seq_length, int) and seq_length > max_position_embeddings:
            raise ValueError(
                f"sequence length {seq_length} is longer than max_position_embeddings="
                f"{max_position_embeddings}")
        output = output + table[None, :seq_length, :]
    return layer_norm_and_dropout(output, dropout_prob)


# ---------------------------------------------------------------------- attention
def _dense(x, units, name, initializer_range, activation=None):
    kernel = _get_variable(f"{name}/kernel", (x.shape[-1], units),
                           create_initializer(initializer_range))
    bias = _get_variable(f"{name}/bias", (units,), "zeros")
    y = ops.matmul(x, kernel) + bias
    return y if activation is None else activation(y)


def attention_layer(from_tensor, to_tensor, attention_mask=None, num_attention_heads=1,
                    size_per_head=512, query_act=None, key_act=None, value_act=None,
                    attention_probs_dropout_prob=0.0, initializer_range=0.02,
                    do_return_2d_tensor=False, batch_size=None, from_seq_length=None,
                    to_seq_length=None, prev_attention_scores=None, layer_index=0,
                    use_running_mean=False, return_attention_scores=None):
    """The original's multi-head attention (query/key/value projections in the current
    scope, no output projection), with RealFormer's residual scores.

    Args (beyond the original's):
      prev_attention_scores: [B, N, F, T] carried scores of the previous layer, added
        to this layer's scaled raw scores q.k^T/sqrt(H) before the mask and softmax.
      layer_index, use_running_mean: with the running mean, the carried sum is divided
        by `layer_index + 1` before the softmax (official RealFormer).
      return_attention_scores: return `(context, scores)`; defaults to True when
        `prev_attention_scores` is given, else False (the original's return value).

    Returns:
      context [B, F, N*H] ([B*F, N*H] with `do_return_2d_tensor`), and with scores also
      the carried [B, N, F, T] scores (running sum, before mask and softmax).
    """
    if len(from_tensor.shape) == 2:
        if batch_size is None or from_seq_length is None or to_seq_length is None:
            raise ValueError(
                "When passing in rank 2 tensors to attention_layer, the values for"
                " `batch_size`, `from_seq_length`, and `to_seq_length` must all be specified.")
        from_tensor = ops.reshape(from_tensor, (batch_size, from_seq_length, -1))
        to_tensor = ops.reshape(to_tensor, (batch_size, to_seq_length, -1))
    get_shape_list(from_tensor, expected_rank=3)
    get_shape_list(to_tensor, expected_rank=3)
    width = num_attention_heads * size_per_head
    q = _dense(from_tensor, width, "query", initializer_range, query_act)
    k = _dense(to_tensor, width, "key", initializer_range, key_act)
    v = _dense(to_tensor, width, "value", initializer_range, value_act)
    q, k, v = (scores_lib.split_heads(t, num_attention_heads, size_per_head) for t in (q, k, v))
    scores = scores_lib.raw_scores(q, k, prev_attention_scores)
    mask = None if attention_mask is None else ops.expand_dims(attention_mask, 1)
    probs = scores_lib.attention_probabilities(scores, mask, layer_index, use_running_mean)
    probs = dropout(probs, attention_probs_dropout_prob)
    context = scores_lib.merge_heads(scores_lib.context(probs, v))
    if do_return_2d_tensor:
        context = ops.reshape(context, (-1, width))
    if return_attention_scores is None:
        return_attention_scores = prev_attention_scores is not None
    return (context, scores) if return_attention_scores else context


def residual_attention_layer(from_tensor, to_tensor, attention_mask=None,
                             num_attention_heads=1, size_per_head=512,
                             attention_probs_dropout_prob=0.0, initializer_range=0.02,
                             prev_attention=None, num_prev_layers=0,
                             use_running_mean=False, **kwargs):
    """Official RealFormer's name and return value: `(context [B, F, N, H], carried
    scores [B, N, F, T])`."""
    context, scores = attention_layer(
        from_tensor, to_tensor, attention_mask, num_attention_heads, size_per_head,
        attention_probs_dropout_prob=attention_probs_dropout_prob,
        initializer_range=initializer_range, prev_attention_scores=prev_attention,
        layer_index=num_prev_layers, use_running_mean=use_running_mean,
        return_attention_scores=True, **kwargs)
    shape = get_shape_list(context)
    return ops.reshape(context, (shape[0], shape[1], num_attention_heads, size_per_head)), scores


def _activation_name(fn):
    if isinstance(fn, str):
        return fn
    names = {None: "linear", gelu: "gelu", _package_gelu: "gelu",
             keras.activations.relu: "relu", keras.activations.tanh: "tanh"}
    if _TF:
        import tensorflow as tf

        names.update({tf.nn.relu: "relu", tf.tanh: "tanh", tf.nn.tanh: "tanh"})
    if fn not in names:
        raise OriginalApiError(
            f"intermediate_act_fn={fn!r}: pass get_activation(name) for a BERT activation"
            " name, or the name itself (e.g. 'gelu', 'gelu_exact', 'relu', 'swish')")
    return names[fn]


def transformer_model(input_tensor, attention_mask=None, hidden_size=768,
                      num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                      intermediate_act_fn=gelu, hidden_dropout_prob=0.1,
                      attention_probs_dropout_prob=0.1, initializer_range=0.02,
                      do_return_all_layers=False, residual_attention=False,
                      use_running_mean=False, return_attention_scores=False):
    """The original's post-LN encoder stack: a `TransformerEncoder` whose weights are
    `<scope>/layer_<i>/attention/self/query/kernel`, ... (the original names).

    `residual_attention=True` makes it RealFormer's `realformer_model` (each layer adds
    the previous layer's carried scores; `use_running_mean` as the official fork).
    Returns the last layer [B, L, hidden] or, with `do_return_all_layers`, the list of
    every layer's output; with `return_attention_scores`, `(that, list of [B, N, L, L]
    carried scores)`. Dropout applies whenever its probability is non-zero.
    """
    from realformer_tf.layers.encoder import TransformerEncoder

    if hidden_size % num_attention_heads:
        raise ValueError(f"The hidden size ({hidden_size}) is not a multiple of the number"
                         f" of attention heads ({num_attention_heads})")
    width = get_shape_list(input_tensor, expected_rank=3)[2]
    if width != hidden_size:
        raise ValueError(f"The width of the input tensor ({width}) != hidden size ({hidden_size})")
    options = dict(
        num_layers=num_hidden_layers, num_heads=num_attention_heads,
        intermediate_size=intermediate_size, hidden_act=_activation_name(intermediate_act_fn),
        hidden_dropout=hidden_dropout_prob, attention_dropout=attention_probs_dropout_prob,
        residual_attention=residual_attention, use_running_mean=use_running_mean,
        initializer_range=initializer_range, layer_norm_epsilon=LAYER_NORM_EPSILON)
    scope = _scope()
    encoder, _ = _get_layer("", lambda: TransformerEncoder(**options),
                            (None, None, hidden_size), tuple(sorted(options.items())))
    for i, block in enumerate(encoder.blocks):
        for name, var in bert_names.block_variables(f"layer_{i}", block).items():
            _VARIABLES.setdefault(f"{scope}/{name}" if scope else name, var)
    training = bool(hidden_dropout_prob or attention_probs_dropout_prob)
    out = encoder(input_tensor, attention_mask=attention_mask, training=training)
    layers = out["encoder_outputs"] if do_return_all_layers else out["sequence_output"]
    return (layers, out["attention_scores"]) if return_attention_scores else layers


def realformer_model(input_tensor, **kwargs):
    """Official RealFormer's name: `transformer_model(..., residual_attention=True)`."""
    return transformer_model(input_tensor, residual_attention=True, **kwargs)



# ------------------------------------------------------------ checkpoint loading
def _original_name(var, function_names):
    """A variable's original name: the function API's (`transformer_model`, ...), else the
    one its Keras path says (`checkpoints.bert.original_name`), else its own name."""
    return (function_names.get(id(var)) or bert_names.original_name(getattr(var, "path", "") or "")
            or re.sub(r":\d+$", "", var.name))


def get_assignment_map_from_checkpoint(tvars, init_checkpoint):
    """The original's `(assignment_map, initialized_variable_names)` for `tvars` (e.g.
    `model.trainable_variables`): {checkpoint name: the variable's tf.Variable} for every
    variable of `tvars` the checkpoint holds, named by its original BERT name, so that
    `tf.compat.v1.train.init_from_checkpoint(init_checkpoint, assignment_map)` assigns
    them (eagerly in TF2). `initialized_variable_names` holds those names (also with
    ":0") and the Keras variables' paths.
    """
    import tensorflow as tf

    function_names = {id(var): name for name, var in _VARIABLES.items()}
    in_checkpoint = {name for name, _ in tf.train.list_variables(init_checkpoint)}
    assignment_map = collections.OrderedDict()
    initialized_variable_names = {}
    for var in tvars:
        name = _original_name(var, function_names)
        if name not in in_checkpoint:
            continue
        assignment_map[name] = var.value if isinstance(var, keras.Variable) else var
        initialized_variable_names[name] = 1
        initialized_variable_names[name + ":0"] = 1
        initialized_variable_names[getattr(var, "path", name)] = 1
    return assignment_map, initialized_variable_names
