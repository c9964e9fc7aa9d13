"""The one home of the attention score math, in `keras.ops` (any Keras backend).

RealFormer's score-threading contract: an attention layer returns `(output, scores)`,
where `scores` [batch, heads, query_len, key_len] is the running sum of the scaled raw
scores q.k^T/sqrt(head_dim), taken before the mask, the softmax and dropout. The next
layer adds its own raw scores to it. The softmax sees

    logits = scores                    (default)
    logits = scores / (layer_index + 1)  (running-mean option)
    probs  = softmax(logits + mask_bias)

The carried tensor never contains the mask. Every attention layer (dense, ETC) and the
analysis tools use these functions, so the three places cannot drift apart.

Public API (stable):
  MASK_VALUE                       -10000.0, the original BERT's additive mask value
  softmax_dtype(dtype)             float32 for float16/bfloat16, else `dtype`
  raw_scores(query, key, prev_scores=None)
                                   [B,F,N,D] x [B,T,N,D] -> [B,N,F,T] scaled (+ prev)
  scores_to_logits(scores, layer_index=0, use_running_mean=False)
  mask_bias(mask, dtype, mask_value=MASK_VALUE)
                                   0/1 mask -> additive bias (0 attend, mask_value not)
  safe_mask_value(dtype)           a large finite negative for `dtype` (dtype-safe minimum)
  attention_probabilities(scores, mask=None, layer_index=0, use_running_mean=False,
                          mask_value=MASK_VALUE)
                                   logits + bias and softmax in float32 under mixed
                                   precision; returns float32 (or float64) probabilities
  split_heads(x, num_heads, head_dim)   [B, L, N*D] -> [B, L, N, D]
  merge_heads(x)                        [B, L, N, D] -> [B, L, N*D]
  scale_heads(x, head_scale)            multiplies the N equal chunks of the last dim
  project_heads(dense, context, head_scale=None, head_scale_position="before_projection")
                                        the output projection of merged heads, with
                                        NormFormer's head scale (folded into the kernel
                                        where `dense` allows)
  context(probs, value)                 [B,N,F,T] x [B,T,N,D] -> [B,F,N,D]
"""

import warnings

import numpy as np
from keras import backend
from keras import ops

from realformer_tf.layers import folding

MASK_VALUE = -10000.0

_HALF_DTYPES = ("float16", "bfloat16")


def softmax_dtype(dtype):
    """The dtype the mask bias and softmax run in: float32 for half precision.

    A -10000 bias added in half precision would swamp the logits (the bfloat16 spacing
    near 1e4 is 64) and a half-precision exp/sum loses small probabilities.
    """
    dtype = backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def raw_scores(query, key, prev_scores=None):
    """Scaled raw scores q.k^T/sqrt(head_dim), plus the carried `prev_scores`.

    Args:
      query: [batch, query_len, heads, head_dim].
      key: [batch, key_len, heads, head_dim].
      prev_scores: [batch, heads, query_len, key_len] or None (first layer).

    Returns:
      [batch, heads, query_len, key_len] in the query's dtype.
    """
    head_dim = query.shape[-1]
    # Scale q rather than q.k^T: same math, B*F*N*D multiplies instead of B*N*F*T.
    # A Python float keeps the query's dtype (a float32 constant would cost float64
    # users their precision).
    query = query * (float(head_dim) ** -0.5)
    scores = ops.einsum("bfnd,btnd->bnft", query, key)
    if prev_scores is not None:
        scores = scores + ops.cast(prev_scores, scores.dtype)
    return scores


def scores_to_logits(scores, layer_index=0, use_running_mean=False):
    """Carried scores -> softmax logits before the mask (running mean: / (l + 1))."""
    if use_running_mean:
        return scores / float(layer_index + 1)
    return scores


_MOST_NEGATIVE = {
    "float16": -65504.0,
    "bfloat16": -3.3895e38,
    "float32": float(np.finfo(np.float32).min),
    "float64": float(np.finfo(np.float64).min),
}


def safe_mask_value(dtype):
    """Half the dtype's most negative finite value (the dtype-safe minimum): adding a
    logit of moderate size cannot overflow to -inf, so a fully masked row stays finite."""
    return _MOST_NEGATIVE[backend.standardize_dtype(dtype)] / 2


def mask_bias(mask, dtype, mask_value=MASK_VALUE):
    """0/1 (or boolean) mask -> additive bias: 0 where attending, `mask_value` elsewhere.

    -10000 (the original BERT) is finite in every float dtype, so a fully masked row
    gets a finite softmax (all its logits shift alike) instead of NaN.
    """
    return (1.0 - ops.cast(mask, dtype)) * float(mask_value)


def attention_probabilities(
    scores, mask=None, layer_index=0, use_running_mean=False, mask_value=MASK_VALUE
):
    """softmax(scores_to_logits(scores) + mask_bias(mask)) over the key axis.

    Args:
      scores: [batch, heads, query_len, key_len] carried scores.
      mask: 0/1 or boolean, broadcastable to `scores` (e.g. [batch, 1, query_len|1,
        key_len]; 1 = attend), or None.
      layer_index, use_running_mean: see `scores_to_logits`.
      mask_value: the additive bias at masked positions.

    Returns:
      Probabilities in `softmax_dtype(scores.dtype)` (float32 under mixed precision).
    """
    dtype = softmax_dtype(scores.dtype)
    logits = ops.cast(scores_to_logits(scores, layer_index, use_running_mean), dtype)
    if mask is not None:
        logits = logits + mask_bias(mask, dtype, mask_value)
    with warnings.catch_warnings():
        # Keras warns of a softmax over one key; the first decoding step has exactly one.
        warnings.filterwarnings("ignore", message="You are using a softmax over axis", category=UserWarning)
        return ops.softmax(logits, axis=-1)


def split_heads(x, num_heads, head_dim):
    """[batch, length, num_heads * head_dim] -> [batch, length, num_heads, head_dim]."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1], num_heads, head_dim))


def merge_heads(x):
    """[batch, length, num_heads, head_dim] -> [batch, length, num_heads * head_dim]."""
    shape = ops.shape(x)
    return ops.reshape(x, (shape[0], shape[1], x.shape[2] * x.shape[3]))


def scale_heads(x, head_scale):
    """Multiplies each of the `len(head_scale)` equal chunks of the last dim of
    [batch, length, width] by its head's scale (NormFormer)."""
    num_heads = head_scale.shape[0]
    width = x.shape[-1]
    heads = split_heads(x, num_heads, width // num_heads)
    heads = heads * ops.cast(head_scale, x.dtype)[:, None]
    return merge_heads(heads)


def project_heads(dense, context, head_scale=None, head_scale_position="before_projection", fold=True):
    """`dense(context)` for the merged [batch, length, heads * head_dim] context, with
    NormFormer's per-head scale on the heads before the projection or on the output's
    equal chunks after it. Before the projection the scale folds into the kernel
    (`folding.project`) when `fold` (callers pass `training`) and `dense` is a plain
    Dense layer."""
    if head_scale is None:
        return dense(context)
    if head_scale_position == "after_projection":
        return scale_heads(dense(context), head_scale)
    head_dim = context.shape[-1] // head_scale.shape[0]
    return folding.project(dense, context, (ops.repeat(head_scale, head_dim), None), fold)


def context(probs, value):
    """Attention-weighted values: [B, N, F, T] x [B, T, N, D] -> [B, F, N, D]."""
    return ops.einsum("bnft,btnd->bfnd", ops.cast(probs, value.dtype), value)
