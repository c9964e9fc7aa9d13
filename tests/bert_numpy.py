"""An independent float64 NumPy forward pass of BERT / RealFormer / NormFormer that reads
weights by their ORIGINAL checkpoint names.

Nothing here imports realformer_tf: the model is rebuilt from the math of the original
BERT `modeling.py` (google-research/bert), the official RealFormer fork of it
(google-research/google-research/realformer) and NormFormer (Shleifer et al. 2021; the
fairseq flags scale_attn / scale_fc / scale_heads / scale_resids), as summarized in
docs/ARCHITECTURE.md. Weights are a dict {original name: np.ndarray} with BERT's 2-D kernel
shapes, exactly what `tf.train.load_checkpoint(prefix).get_tensor(name)` returns.

Facts encoded here:
* embeddings: word[ids] + token_type[segment_ids] + position[:L], then LayerNorm.
* LayerNorm epsilon 1e-12 (tf.contrib.layers.layer_norm over the last axis).
* gelu is the tanh approximation 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))).
* attention (official RealFormer): scores = Q K^T / sqrt(head_dim) (+ previous layer's
  carried scores); logits = scores / (i + 1) with use_running_mean; logits += (1 - mask)
  * -10000; softmax; context = probs V. The carried tensor is the undivided running sum,
  before the mask. Heads are the contiguous head_dim-wide column blocks of Q, K, V.
  With residual attention off, each layer's own scores are returned and the running
  mean (defined on the running sum) does not apply.
* post:       x = LN_a(x + W_o ctx);   x = LN_o(x + FFN(x))
  pre:        x = x + Attn(LN_a(x));   x = x + FFN(LN_o(x));   final LN at the end
  normformer: x = x + LN_post(HeadScale(Attn(LN_a(x))))
              x = r * x + W2 LN_fc(act(W1 LN_o(x) + b1)) + b2; final LN at the end
  HeadScale multiplies each head's context before W_o ("before_projection", the paper)
  or each of `heads` equal chunks of W_o's output, bias included ("after_projection",
  fairseq). r is `output/residual_scale` when present, else 1.
* The last entry of `encoder_outputs` is the sequence output (after the final LN of a
  pre/normformer stack), as BERT's get_sequence_output() == all_encoder_layers[-1].
* pooler: tanh(first_token W + b).
* MLM head: gather positions; LN(act(x W + b)); logits = x E^T + output_bias, E the
  word embeddings (tied). NSP: pooled @ output_weights^T + output_bias.
* classifier: pooled @ output_weights^T + output_bias; SQuAD: sequence @
  cls/squad/output_weights^T + output_bias, split into start/end logits.
"""

import math

import numpy as np

MASK_ADDER = -10000.0
LN_EPSILON = 1e-12

DEFAULTS = {
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_act": "gelu",
    "max_position_embeddings": 512,
    "type_vocab_size": 16,
    "residual_attention": True,
    "use_running_mean": False,
    "layer_norm_type": "post",
    "normformer_head_scale_position": "before_projection",
    "normformer_residual_scale": False,
}


def _cfg(config):
    cfg = dict(DEFAULTS)
    cfg.update(config)
    return cfg


# ------------------------------------------------------------------------------- math
def gelu(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * np.power(x, 3))))


def gelu_exact(x):
    erf = np.vectorize(math.erf)
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


ACTIVATIONS = {
    "gelu": gelu,
    "gelu_exact": gelu_exact,
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


def layer_norm(x, w, name):
    mean = np.mean(x, axis=-1, keepdims=True)
    variance = np.mean(np.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + LN_EPSILON) * w[name + "/gamma"] + w[name + "/beta"]


def dense(x, w, name):
    return np.matmul(x, w[name + "/kernel"]) + w[name + "/bias"]


def softmax(x):
    e = np.exp(x - np.max(x, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)


# ------------------------------------------------------------------------- attention
def attention_layer(x, w, prefix, cfg, layer_index, mask_adder, prev_scores):
    """Self-attention of one layer incl. output projection (no residual, no LN).

    Returns (attention output [B, L, H], carried scores [B, N, L, L])."""
    batch, length, _ = x.shape
    heads = cfg["num_attention_heads"]
    head_dim = cfg["hidden_size"] // heads

    def split(t):  # [B, L, N*d] -> [B, N, L, d]
        return t.reshape(batch, length, heads, head_dim).transpose(0, 2, 1, 3)

    q = split(dense(x, w, prefix + "/self/query"))
    k = split(dense(x, w, prefix + "/self/key"))
    v = split(dense(x, w, prefix + "/self/value"))

    scores = np.matmul(q, k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(head_dim))
    residual = cfg["residual_attention"]
    if residual and prev_scores is not None:
        scores = scores + prev_scores
    logits = scores
    if residual and cfg["use_running_mean"]:
        logits = scores / (layer_index + 1)
    logits = logits + mask_adder
    probs = softmax(logits)
    context = np.matmul(probs, v)  # [B, N, L, d]

    normformer = cfg["layer_norm_type"] == "normformer"
    position = cfg["normformer_head_scale_position"]
    if normformer:
        head_scale = w[prefix + "/output/head_scale"]
        if position == "before_projection":
            context = context * head_scale[None, :, None, None]
    context = context.transpose(0, 2, 1, 3).reshape(batch, length, heads * head_dim)
    out = dense(context, w, prefix + "/output/dense")
    if normformer and position == "after_projection":
        hidden = out.shape[-1]
        chunks = out.reshape(batch, length, heads, hidden // heads)
        out = (chunks * head_scale[None, None, :, None]).reshape(batch, length, hidden)
    return out, scores


# ----------------------------------------------------------------------------- layer
def transformer_layer(x, w, i, cfg, mask_adder, prev_scores):
    p = f"bert/encoder/layer_{i}"
    act = ACTIVATIONS[cfg["hidden_act"]]
    kind = cfg["layer_norm_type"]
    if kind == "post":
        att, scores = attention_layer(x, w, p + "/attention", cfg, i, mask_adder, prev_scores)
        x = layer_norm(att + x, w, p + "/attention/output/LayerNorm")
        inner = act(dense(x, w, p + "/intermediate/dense"))
        out = dense(inner, w, p + "/output/dense")
        return layer_norm(out + x, w, p + "/output/LayerNorm"), scores
    if kind not in ("pre", "normformer"):
        raise ValueError(kind)
    h = layer_norm(x, w, p + "/attention/output/LayerNorm")
    att, scores = attention_layer(h, w, p + "/attention", cfg, i, mask_adder, prev_scores)
    if kind == "normformer":
        att = layer_norm(att, w, p + "/attention/post_LayerNorm")
    x = x + att
    h = layer_norm(x, w, p + "/output/LayerNorm")
    inner = act(dense(h, w, p + "/intermediate/dense"))
    if kind == "normformer":
        inner = layer_norm(inner, w, p + "/intermediate/LayerNorm")
    out = dense(inner, w, p + "/output/dense")
    residual = x
    if kind == "normformer" and cfg["normformer_residual_scale"]:
        residual = x * w[p + "/output/residual_scale"]
    return residual + out, scores


# --------------------------------------------------------------------------- forward
def bert_forward(weights, config, input_ids, input_mask=None, segment_ids=None,
                 masked_lm_positions=None):
    """Float64 forward pass. Returns a dict with sequence_output, pooled_output,
    encoder_outputs (list), attention_scores (list) and, when the weights hold the
    pretraining heads and positions are given, masked_lm_logits / next_sentence_logits."""
    cfg = _cfg(config)
    w = {name: np.asarray(value, dtype=np.float64) for name, value in weights.items()}
    input_ids = np.asarray(input_ids)
    batch, length = input_ids.shape
    if input_mask is None:
        input_mask = np.ones((batch, length))
    if segment_ids is None:
        segment_ids = np.zeros((batch, length), dtype=np.int64)
    if length > cfg["max_position_embeddings"]:
        raise ValueError("sequence longer than max_position_embeddings")

    x = w["bert/embeddings/word_embeddings"][input_ids]
    x = x + w["bert/embeddings/token_type_embeddings"][np.asarray(segment_ids)]
    x = x + w["bert/embeddings/position_embeddings"][:length][None]
    x = layer_norm(x, w, "bert/embeddings/LayerNorm")

    # create_attention_mask_from_input_mask: [B, F, T] = ones(F) x mask(T), then the adder.
    mask = np.ones((batch, length, 1)) * np.asarray(input_mask, np.float64)[:, None, :]
    mask_adder = (1.0 - mask[:, None, :, :]) * MASK_ADDER  # [B, 1, F, T]

    encoder_outputs, attention_scores = [], []
    prev = None
    for i in range(cfg["num_hidden_layers"]):
        x, prev = transformer_layer(x, w, i, cfg, mask_adder, prev)
        encoder_outputs.append(x)
        attention_scores.append(prev)
    if cfg["layer_norm_type"] != "post":
        x = layer_norm(x, w, "bert/encoder/LayerNorm")
        encoder_outputs[-1] = x

    pooled = np.tanh(dense(x[:, 0], w, "bert/pooler/dense"))
    out = {
        "sequence_output": x,
        "pooled_output": pooled,
        "encoder_outputs": encoder_outputs,
        "attention_scores": attention_scores,
    }
    if "cls/predictions/output_bias" in w:
        if masked_lm_positions is not None:
            out["masked_lm_logits"] = masked_lm_logits(x, w, cfg, masked_lm_positions)
        out["next_sentence_logits"] = (
            pooled @ w["cls/seq_relationship/output_weights"].T
            + w["cls/seq_relationship/output_bias"]
        )
    if "output_weights" in w:
        out["logits"] = pooled @ w["output_weights"].T + w["output_bias"]
    if "cls/squad/output_weights" in w:
        span = x @ w["cls/squad/output_weights"].T + w["cls/squad/output_bias"]
        out["start_logits"], out["end_logits"] = span[..., 0], span[..., 1]
    return out


def masked_lm_logits(sequence_output, w, cfg, positions):
    positions = np.asarray(positions)
    batch = sequence_output.shape[0]
    # gather_indexes: flat index b * L + p.
    gathered = sequence_output[np.arange(batch)[:, None], positions]  # [B, P, H]
    h = ACTIVATIONS[cfg["hidden_act"]](dense(gathered, w, "cls/predictions/transform/dense"))
    h = layer_norm(h, w, "cls/predictions/transform/LayerNorm")
    return h @ w["bert/embeddings/word_embeddings"].T + w["cls/predictions/output_bias"]


# ------------------------------------------------------------- names, shapes, weights
def checkpoint_shapes(config, head=None, num_labels=2):
    """{original name: shape} of the variables a checkpoint of this variant holds.

    head: None (encoder only), "pretraining" (cls/predictions + cls/seq_relationship),
    "classifier" (unscoped output_weights / output_bias) or "squad" (cls/squad/...)."""
    cfg = _cfg(config)
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads = cfg["num_attention_heads"]
    shapes = {
        "bert/embeddings/word_embeddings": (cfg["vocab_size"], h),
        "bert/embeddings/token_type_embeddings": (cfg["type_vocab_size"], h),
        "bert/embeddings/position_embeddings": (cfg["max_position_embeddings"], h),
        "bert/embeddings/LayerNorm/gamma": (h,),
        "bert/embeddings/LayerNorm/beta": (h,),
        "bert/pooler/dense/kernel": (h, h),
        "bert/pooler/dense/bias": (h,),
    }
    normformer = cfg["layer_norm_type"] == "normformer"
    for i in range(cfg["num_hidden_layers"]):
        p = f"bert/encoder/layer_{i}"
        dense_shapes = {
            "attention/self/query": (h, h),
            "attention/self/key": (h, h),
            "attention/self/value": (h, h),
            "attention/output/dense": (h, h),
            "intermediate/dense": (h, inter),
            "output/dense": (inter, h),
        }
        for name, shape in dense_shapes.items():
            shapes[f"{p}/{name}/kernel"] = shape
            shapes[f"{p}/{name}/bias"] = (shape[1],)
        norms = {"attention/output/LayerNorm": h, "output/LayerNorm": h}
        if normformer:
            norms.update({"attention/post_LayerNorm": h, "intermediate/LayerNorm": inter})
            shapes[f"{p}/attention/output/head_scale"] = (heads,)
            if cfg["normformer_residual_scale"]:
                shapes[f"{p}/output/residual_scale"] = (h,)
        for name, width in norms.items():
            shapes[f"{p}/{name}/gamma"] = (width,)
            shapes[f"{p}/{name}/beta"] = (width,)
    if cfg["layer_norm_type"] != "post":
        shapes["bert/encoder/LayerNorm/gamma"] = (h,)
        shapes["bert/encoder/LayerNorm/beta"] = (h,)
    if head == "pretraining":
        shapes.update({
            "cls/predictions/transform/dense/kernel": (h, h),
            "cls/predictions/transform/dense/bias": (h,),
            "cls/predictions/transform/LayerNorm/gamma": (h,),
            "cls/predictions/transform/LayerNorm/beta": (h,),
            "cls/predictions/output_bias": (cfg["vocab_size"],),
            "cls/seq_relationship/output_weights": (2, h),
            "cls/seq_relationship/output_bias": (2,),
        })
    elif head == "classifier":
        shapes.update({"output_weights": (num_labels, h), "output_bias": (num_labels,)})
    elif head == "squad":
        shapes.update({"cls/squad/output_weights": (2, h), "cls/squad/output_bias": (2,)})
    elif head is not None:
        raise ValueError(head)
    return shapes


def random_weights(config, rng, head=None, num_labels=2):
    """Random float32 weights under the original names, every one non-trivial: LayerNorm
    gammas around 1 and betas around 0 (both random), head/residual scales in
    [0.5, 1.5], kernels scaled by 1/sqrt(fan_in) so activations stay O(1)."""
    weights = {}
    for name, shape in checkpoint_shapes(config, head, num_labels).items():
        leaf = name.rsplit("/", 1)[-1]
        if leaf == "gamma":
            value = 1.0 + 0.3 * rng.standard_normal(shape)
        elif leaf in ("head_scale", "residual_scale"):
            value = rng.uniform(0.5, 1.5, shape)
        elif leaf == "kernel":
            value = rng.standard_normal(shape) * (1.2 / math.sqrt(shape[0]))
        elif leaf in ("beta", "bias", "output_bias"):
            value = 0.2 * rng.standard_normal(shape)
        else:  # embeddings, output_weights
            value = 0.5 * rng.standard_normal(shape)
        weights[name] = value.astype(np.float32)
    return weights
