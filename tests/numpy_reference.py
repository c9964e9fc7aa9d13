"""An independent float64 NumPy reference for the core layers, written from the math.

Nothing here calls realformer_tf's computation: the only contact with our code is
reading (and, for tests, randomizing) the Keras layers' weight variables by attribute
name. The formulas follow the original implementations (see docs/ARCHITECTURE.md):

* BERT gelu: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); LayerNorm eps 1e-12.
* Attention (official RealFormer): scores = (x Wq + bq)(m Wk + bk)^T / sqrt(d) + prev;
  logits = scores / (layer_index + 1) with the running mean; logits += (1 - mask) * -1e4;
  softmax; context. Returns (output, scores) where scores are taken before the mask.
* NormFormer head scale: before the output projection (each head's context is scaled),
  or after it (the projected output is split into num_heads contiguous chunks).
* Blocks: post  x = LN(x + Attn(x)); x = LN(x + FFN(x))
          pre   x = x + Attn(LN(x)); x = x + FFN(LN(x))
          normformer  x = x + LN_post(Attn'(LN(x))); x = r * x + W2 LN_fc(act(W1 LN(x)) )
  and pre/normformer stacks end with a final LayerNorm.
"""

import math

import keras
import numpy as np

MASK_VALUE = -10000.0
LN_EPS = 1e-12


# ----------------------------------------------------------------------------- math
def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def gelu_erf(x):
    from math import erf

    return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))


ACTIVATIONS = {
    "gelu": gelu_tanh,
    "gelu_exact": gelu_erf,
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


def layer_norm(x, gamma, beta, eps=LN_EPS):
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def dense(x, kernel, bias):
    return x @ kernel + bias


def softmax(x):
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def full_mask(batch, query_len, key_len, attention_mask=None, causal=False):
    """0/1 mask [B, F, T] (1 = attend) from a [B, T] or [B, F, T] mask and causality."""
    mask = np.ones((batch, query_len, key_len))
    if attention_mask is not None:
        m = np.asarray(attention_mask, dtype=np.float64)
        if m.ndim == 2:
            m = m[:, None, :]
        mask = mask * m
    if causal:
        # Query i (aligned to the end of the keys) sees keys j <= i + (T - F).
        i = np.arange(query_len)[:, None] + (key_len - query_len)
        j = np.arange(key_len)[None, :]
        mask = mask * (j <= i)[None]
    return mask


def attention(
    query,
    memory,
    p,
    num_heads,
    attention_mask=None,
    prev_scores=None,
    use_running_mean=False,
    layer_index=0,
    head_scale=None,
    head_scale_position="before_projection",
    causal=False,
):
    """Residual multi-head attention. Returns (output [B,F,H_out], scores [B,N,F,T])."""
    b, f, _ = query.shape
    t = memory.shape[1]
    q = dense(query, p["wq"], p["bq"])
    k = dense(memory, p["wk"], p["bk"])
    v = dense(memory, p["wv"], p["bv"])
    d = q.shape[-1] // num_heads  # key_dim; values may have another head size

    def heads(x):  # [B, L, N*d] -> [B, N, L, d]
        return x.reshape(x.shape[0], x.shape[1], num_heads, -1).transpose(0, 2, 1, 3)

    q, k, v = heads(q), heads(k), heads(v)
    scores = np.einsum("bnfd,bntd->bnft", q, k) / math.sqrt(d)
    if prev_scores is not None:
        scores = scores + prev_scores
    logits = scores / (layer_index + 1) if use_running_mean else scores
    mask = full_mask(b, f, t, attention_mask, causal)
    logits = logits + (1.0 - mask[:, None]) * MASK_VALUE
    probs = softmax(logits)
    context = np.einsum("bnft,bntd->bnfd", probs, v)  # [B, N, F, d]
    if head_scale is not None and head_scale_position == "before_projection":
        context = context * head_scale[None, :, None, None]
    context = context.transpose(0, 2, 1, 3).reshape(b, f, -1)
    out = dense(context, p["wo"], p["bo"])
    if head_scale is not None and head_scale_position == "after_projection":
        width = out.shape[-1]
        chunks = out.reshape(b, f, num_heads, width // num_heads)
        out = (chunks * head_scale[None, None, :, None]).reshape(b, f, width)
    return out, scores


def feed_forward(x, p, layer_norm_type, hidden_act="gelu"):
    act = ACTIVATIONS[hidden_act]
    if layer_norm_type == "post":  # Admin: LN(x * omega + f(x)) where the block has omega
        inner = act(dense(x, p["w1"], p["b1"]))
        return layer_norm(x * p.get("admin_scale", 1.0) + dense(inner, p["w2"], p["b2"]), *p["ln_out"])
    h = layer_norm(x, *p["ln_out"])
    inner = act(dense(h, p["w1"], p["b1"]))
    if p.get("ln_inner") is not None:  # NormFormer's feed-forward LayerNorm, where the block has it
        inner = layer_norm(inner, *p["ln_inner"])
    residual = x * p["residual_scale"] if p.get("residual_scale") is not None else x
    return residual + dense(inner, p["w2"], p["b2"])


def attention_sublayer(x, memory, p, ln, ln_post, layer_norm_type, num_heads, **attn_kwargs):
    """NormFormer's head scale and post-attention LayerNorm apply where the block has
    their weights (`p["head_scale"]`, `ln_post`): each is a switch of its own; so does
    Admin's residual scale (`p["admin_scale"]`)."""
    head_scale = p.get("head_scale")
    if layer_norm_type == "post":
        out, scores = attention(x, memory, p, num_heads, head_scale=None, **attn_kwargs)
        return layer_norm(x * p.get("admin_scale", 1.0) + out, *ln), scores
    h = layer_norm(x, *ln)
    mem = h if memory is None else memory
    out, scores = attention(h, mem, p, num_heads, head_scale=head_scale, **attn_kwargs)
    if ln_post is not None:
        out = layer_norm(out, *ln_post)
    return x + out, scores


def encoder_block(
    x,
    p,
    num_heads,
    layer_norm_type="post",
    residual_attention=True,
    use_running_mean=False,
    layer_index=0,
    head_scale_position="before_projection",
    hidden_act="gelu",
    attention_mask=None,
    prev_scores=None,
    causal=False,
):
    """Returns (output, scores)."""
    memory = x if layer_norm_type == "post" else None
    x, scores = attention_sublayer(
        x,
        memory,
        p["attention"],
        p["ln_attention"],
        p.get("ln_attention_post"),
        layer_norm_type,
        num_heads,
        attention_mask=attention_mask,
        prev_scores=prev_scores if residual_attention else None,
        use_running_mean=residual_attention and use_running_mean,
        layer_index=layer_index,
        head_scale_position=head_scale_position,
        causal=causal,
    )
    return feed_forward(x, p["ffn"], layer_norm_type, hidden_act), scores


def encoder_stack(x, block_params, final_ln, attention_mask=None, residual_attention=True, **cfg):
    """Returns (sequence_output, encoder_outputs, attention_scores)."""
    outputs, all_scores = [], []
    scores = None
    for i, p in enumerate(block_params):
        x, scores = encoder_block(
            x,
            p,
            attention_mask=attention_mask,
            prev_scores=scores if residual_attention else None,
            residual_attention=residual_attention,
            layer_index=i,
            **cfg,
        )
        outputs.append(x)
        all_scores.append(scores)
    if final_ln is not None:
        x = layer_norm(x, *final_ln)
        outputs[-1] = x
    return x, outputs, all_scores


def decoder_block(
    x,
    memory,
    p,
    num_heads,
    layer_norm_type="post",
    residual_attention=True,
    use_running_mean=False,
    layer_index=0,
    head_scale_position="before_projection",
    hidden_act="gelu",
    self_attention_mask=None,
    memory_mask=None,
    prev_self_scores=None,
    prev_cross_scores=None,
    cross_residual_attention=None,
):
    """Causal self-attention, cross-attention, FFN. Returns (out, self_scores, cross_scores).
    The cross-attention path follows `cross_residual_attention` (None: residual_attention)."""
    cross = residual_attention if cross_residual_attention is None else cross_residual_attention
    common = dict(layer_index=layer_index, head_scale_position=head_scale_position)
    x, self_scores = attention_sublayer(
        x,
        x if layer_norm_type == "post" else None,
        p["self_attention"],
        p["ln_self"],
        p.get("ln_self_post"),
        layer_norm_type,
        num_heads,
        attention_mask=self_attention_mask,
        prev_scores=prev_self_scores if residual_attention else None,
        use_running_mean=residual_attention and use_running_mean,
        causal=True,
        **common,
    )
    x, cross_scores = attention_sublayer(
        x,
        memory,
        p["cross_attention"],
        p["ln_cross"],
        p.get("ln_cross_post"),
        layer_norm_type,
        num_heads,
        attention_mask=memory_mask,
        prev_scores=prev_cross_scores if cross else None,
        use_running_mean=cross and use_running_mean,
        **common,
    )
    return feed_forward(x, p["ffn"], layer_norm_type, hidden_act), self_scores, cross_scores


# ------------------------------------------------------- reading Keras layer weights
def _np(variable):
    return np.asarray(variable.numpy(), dtype=np.float64)


def _ln(layer):
    return (_np(layer.gamma), _np(layer.beta))


def _bias(dense_layer):
    """The layer's bias, or zeros for `use_bias=False`."""
    if dense_layer.bias is None:
        return np.zeros(dense_layer.kernel.shape[-1])
    return _np(dense_layer.bias)


def attention_params(layer):
    p = {
        "wq": _np(layer.query_dense.kernel),
        "bq": _bias(layer.query_dense),
        "wk": _np(layer.key_dense.kernel),
        "bk": _bias(layer.key_dense),
        "wv": _np(layer.value_dense.kernel),
        "bv": _bias(layer.value_dense),
        "wo": _np(layer.output_dense.kernel),
        "bo": _bias(layer.output_dense),
    }
    if getattr(layer, "use_head_scale", False):
        p["head_scale"] = _np(layer.head_scale)
    return p


def ffn_params(block):
    p = {
        "w1": _np(block.intermediate_dense.kernel),
        "b1": _np(block.intermediate_dense.bias),
        "w2": _np(block.output_dense.kernel),
        "b2": _np(block.output_dense.bias),
        "ln_out": _ln(block.output_layer_norm),
    }
    if hasattr(block, "intermediate_layer_norm"):
        p["ln_inner"] = _ln(block.intermediate_layer_norm)
    if getattr(block, "use_residual_scale", False):
        p["residual_scale"] = _np(block.residual_scale)
    if getattr(block, "ffn_residual_scale", None) is not None:
        p["admin_scale"] = _np(block.ffn_residual_scale)
    return p


def _with_admin_scale(p, scale):
    return p if scale is None else dict(p, admin_scale=_np(scale))


def encoder_block_params(block):
    p = {
        "attention": _with_admin_scale(attention_params(block.attention), getattr(block, "attention_residual_scale", None)),
        "ln_attention": _ln(block.attention_layer_norm),
        "ffn": ffn_params(block),
    }
    if hasattr(block, "attention_post_layer_norm"):
        p["ln_attention_post"] = _ln(block.attention_post_layer_norm)
    return p


def decoder_block_params(block):
    p = {
        "self_attention": _with_admin_scale(attention_params(block.self_attention),
                                            block.self_attention_residual_scale),
        "ln_self": _ln(block.self_attention_layer_norm),
        "cross_attention": _with_admin_scale(attention_params(block.cross_attention),
                                             block.cross_attention_residual_scale),
        "ln_cross": _ln(block.cross_attention_layer_norm),
        "ffn": ffn_params(block),
    }
    if hasattr(block, "self_attention_post_layer_norm"):
        p["ln_self_post"] = _ln(block.self_attention_post_layer_norm)
        p["ln_cross_post"] = _ln(block.cross_attention_post_layer_norm)
    return p


def stack_params(encoder):
    blocks = [encoder_block_params(b) for b in encoder.blocks]
    final = _ln(encoder.final_layer_norm) if encoder.final_layer_norm is not None else None
    return blocks, final


# ------------------------------------------------------------ randomizing weights
def randomize_weights(layer, seed=0):
    """Gives every variable of `layer` a random, non-trivial value (so LayerNorm
    gamma/beta, head scales and residual scales are exercised, not left at 1/0)."""
    rng = np.random.default_rng(seed)
    for v in layer.weights:
        shape = tuple(v.shape)
        name = v.name.split("/")[-1].split(":")[0]
        if name in ("gamma", "head_scale") or name.endswith("residual_scale"):
            value = rng.uniform(0.5, 1.5, size=shape)
        elif name in ("beta", "bias"):
            value = rng.normal(0.0, 0.2, size=shape)
        elif name == "kernel":
            value = rng.normal(0.0, 1.2 / math.sqrt(shape[0]), size=shape)
        else:  # embeddings and anything else
            value = rng.normal(0.0, 0.5, size=shape)
        v.assign(value.astype(v.dtype))
    return layer


def embeddings(input_ids, segment_ids, word, token_type, position, ln):
    """BERT embeddings: word + token type + position, then LayerNorm."""
    seq_len = input_ids.shape[1]
    x = word[input_ids] + token_type[segment_ids] + position[None, :seq_len]
    return layer_norm(x, *ln)


# ------------------------------------------------------------------ test helpers
def max_abs_diff(actual, expected):
    actual = to_numpy(actual)
    expected = to_numpy(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    return float(np.max(np.abs(actual - expected)))


def to_numpy(x):
    """A float64 NumPy copy of a NumPy array or a tensor of any Keras backend."""
    if not isinstance(x, np.ndarray):
        x = keras.ops.convert_to_numpy(x)
    return np.asarray(x, dtype=np.float64)


def assert_close(label, actual, expected, atol):
    """Asserts |actual - expected| <= atol elementwise and prints the deviation
    (visible with `pytest -s`) as `DEV <label> <max abs deviation>`."""
    dev = max_abs_diff(actual, expected)
    print(f"DEV {label} {dev:.3e}")
    assert dev <= atol, f"{label}: max abs deviation {dev:.3e} > {atol:.1e}"
    return dev


def padding_mask(batch, seq_len, lengths):
    """[B, L] 0/1 mask with the given real lengths."""
    return (np.arange(seq_len)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)


def numeric_grad(f, array, eps=1e-5, indices=None):
    """Central finite differences of scalar f() w.r.t. `array` (float64, perturbed in
    place and restored). `indices`: optional iterable of flat indices to probe; the
    other entries are returned as NaN."""
    grad = np.full(array.shape, np.nan)
    flat = array.reshape(-1)  # a view: array must be contiguous
    assert np.shares_memory(flat, array)
    for i in range(flat.size) if indices is None else indices:
        old = flat[i]
        flat[i] = old + eps
        up = f()
        flat[i] = old - eps
        down = f()
        flat[i] = old
        grad.reshape(-1)[i] = (up - down) / (2 * eps)
    return grad
