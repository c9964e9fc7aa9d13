"""realformer_tf's causal LM variants in PyTorch, as Hugging Face transformers remote code:
RealFormer residual attention on the causal path (with or without the running mean),
Post-LN / Pre-LN, NormFormer's four switches and the activations GPT-2 lacks, computing
what realformer_tf's CausalLMModel computes with the same weights.

realformer_tf copies this file and configuration_realformer_causal_lm.py into the
folders it writes for those variants (`convert_checkpoint.py --model_type=causal_lm
--output_format=hf --hf_allow_variant`) and names the classes in config.json's auto_map:

    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    out = model.generate(input_ids, attention_mask=mask, max_new_tokens=20, do_sample=False)

Weights keep GPT-2's names (`Conv1D` weights [in, out]; `c_attn` is the query, key and
value projections side by side), plus the variants' own:
  transformer.h.<i>.attn.head_scale      NormFormer's per-head scale [heads]
  transformer.h.<i>.attn.ln_out          NormFormer's LayerNorm on the attention output
  transformer.h.<i>.mlp.ln_act           NormFormer's LayerNorm on the feed-forward activation
  transformer.h.<i>.residual_scale       NormFormer's feed-forward residual scale [hidden]
In Post-LN blocks ln_1 and ln_2 come *after* the attention and the feed-forward residual
sums (GPT-2's Pre-LN: before them), and there is no ln_f. The output projection is the
token embedding table (`transformer.wte`, tied; no lm_head weight, no bias).

Embeddings: x = wte[input_ids] + wpe[position_ids] (positions from 0; generate() counts
them over the attention mask, so a left-padded row starts at 0), dropout. Each block
(x: [batch, length, hidden]):
  post  x = ln_1(x + Attn(x));                x = ln_2(x + W2 act(W1 x))
  pre   x = x + ln_out(Attn'(ln_1(x)));       x = r * x + W2 ln_act(act(W1 ln_2(x)))
with Attn' scaling each head, and ln_out, ln_act, the head scale and r (the residual
scale) only where the config switches them on; Pre-LN ends with ln_f. Dropout (training
only) on the embeddings, the attention probabilities and each sublayer's output before
its residual sum.

Attention: scores = q.k^T / sqrt(head_dim) + the previous block's scores (residual
attention; the carried scores are taken before the mask, and the first block has none);
probabilities = softmax(scores / divisor + (1 - mask) * -10000) in float32, divisor =
layer_index + 1 with the running mean, else 1; mask = causal AND attention_mask
(attention_mask: [batch, past + length] or [batch, length, past + length], 1 = a real
token / attend). With a cache (transformers' DynamicCache, generate()'s default) a step
feeds only the new tokens: the cache holds keys and values alone, since each block's
carried scores for the new positions come from the previous block in the same step.

Matches realformer_tf 0.1.0 (`REALFORMER_TF_VERSION`). Needs only torch and
transformers, not realformer_tf.
"""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import DynamicCache, GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import BaseModelOutputWithPast, CausalLMOutputWithPast

from .configuration_realformer_causal_lm import REALFORMER_TF_VERSION, RealFormerTfCausalLMConfig  # noqa: F401

try:  # transformers 5: initializers that leave loaded weights alone
    from transformers import initialization as init
except ImportError:
    from torch.nn import init

MASK_VALUE = -10000.0  # the additive bias of masked keys (original BERT's, realformer_tf's)
# The outputs' cache field: "cache" from transformers 5.24, "past_key_values" before.
CACHE_FIELD = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

# config.json's hidden_act (realformer_tf's names) -> the function.
ACTIVATIONS = {
    "gelu": lambda x: F.gelu(x, approximate="tanh"),  # BERT's / GPT-2's tanh form
    "gelu_exact": F.gelu,  # the erf form
    "relu": F.relu, "tanh": torch.tanh, "swish": F.silu, "silu": F.silu, "linear": lambda x: x,
}


def layer_norm(config, width=None):
    return nn.LayerNorm(width or config.hidden_size, eps=config.layer_norm_eps)


class Conv1D(nn.Module):
    """GPT-2's projection: x @ weight + bias, weight [in, out] (realformer_tf's kernels)."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class RealFormerTfCausalLMAttention(nn.Module):
    """Causal self-attention: c_attn, the residual scores, c_proj, NormFormer's head scale
    (before or after c_proj) and its output LayerNorm. Returns (output, scores, probs),
    `scores` [batch, heads, length, past + length] before the mask (what the next block
    adds)."""

    def __init__(self, config, layer_index):
        super().__init__()
        switches = config.normformer_switches()
        self.layer_index = layer_index
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.c_attn = Conv1D(config.hidden_size, 3 * config.hidden_size)
        self.c_proj = Conv1D(config.hidden_size, config.hidden_size)
        self.attn_dropout = nn.Dropout(config.attention_probs_dropout_prob)
        self.head_scale = nn.Parameter(torch.ones(self.num_heads)) if switches["normformer_head_scale"] else None
        self.head_scale_position = config.normformer_head_scale_position
        self.ln_out = layer_norm(config) if switches["normformer_attention_output_norm"] else None
        running_mean = config.residual_attention and config.use_running_mean
        self.divisor = float(layer_index + 1) if running_mean else 1.0

    def forward(self, x, bias, prev_scores=None, cache=None):
        batch, length, hidden = x.shape

        def heads(t):  # [batch, length, hidden] -> [batch, heads, length, head_dim]
            return t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = (heads(t) for t in self.c_attn(x).split(hidden, dim=-1))
        if cache is not None:  # the earlier positions' keys and values first
            k, v = cache.update(k, v, self.layer_index)
        scores = (q * self.head_dim ** -0.5) @ k.transpose(-1, -2)
        if prev_scores is not None:
            scores = scores + prev_scores
        probs = torch.softmax((scores / self.divisor).float() + bias, dim=-1).to(v.dtype)
        context = self.attn_dropout(probs) @ v  # [batch, heads, length, head_dim]
        if self.head_scale is not None and self.head_scale_position == "before_projection":
            context = context * self.head_scale[None, :, None, None]
        out = self.c_proj(context.transpose(1, 2).reshape(batch, length, hidden))
        if self.head_scale is not None and self.head_scale_position == "after_projection":
            out = (out.view(batch, length, self.num_heads, -1) * self.head_scale[:, None]).view(batch, length, -1)
        if self.ln_out is not None:
            out = self.ln_out(out)
        return out, scores, probs


class RealFormerTfCausalLMMLP(nn.Module):
    """c_fc, the activation, NormFormer's LayerNorm of it (where switched on), c_proj."""

    def __init__(self, config):
        super().__init__()
        name = str(config.hidden_act).lower()
        if name not in ACTIVATIONS:
            raise ValueError(f"hidden_act={config.hidden_act!r} is not one of {', '.join(sorted(ACTIVATIONS))}")
        self.act = ACTIVATIONS[name]
        self.c_fc = Conv1D(config.hidden_size, config.intermediate_size)
        self.c_proj = Conv1D(config.intermediate_size, config.hidden_size)
        switched_on = config.normformer_switches()["normformer_ffn_activation_norm"]
        self.ln_act = layer_norm(config, config.intermediate_size) if switched_on else None

    def forward(self, x):
        h = self.act(self.c_fc(x))
        if self.ln_act is not None:
            h = self.ln_act(h)
        return self.c_proj(h)


class RealFormerTfCausalLMBlock(nn.Module):
    """One block: post  x = ln_1(x + Attn(x)); x = ln_2(x + MLP(x));
    pre  x = x + Attn(ln_1(x)); x = r * x + MLP(ln_2(x))."""

    def __init__(self, config, layer_index):
        super().__init__()
        self.ln_1 = layer_norm(config)
        self.attn = RealFormerTfCausalLMAttention(config, layer_index)
        self.ln_2 = layer_norm(config)
        self.mlp = RealFormerTfCausalLMMLP(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        scaled = config.normformer_switches()["normformer_residual_scale"]
        self.residual_scale = nn.Parameter(torch.ones(config.hidden_size)) if scaled else None
        self.post_ln = config.layer_norm_type == "post"

    def forward(self, x, bias, prev_scores=None, cache=None):
        if self.post_ln:
            out, scores, probs = self.attn(x, bias, prev_scores, cache)
            x = self.ln_1(x + self.dropout(out))
            return self.ln_2(x + self.dropout(self.mlp(x))), scores, probs
        out, scores, probs = self.attn(self.ln_1(x), bias, prev_scores, cache)
        x = x + self.dropout(out)
        residual = x if self.residual_scale is None else x * self.residual_scale
        return residual + self.dropout(self.mlp(self.ln_2(x))), scores, probs


def mask_bias(attention_mask, batch, length, past, device):
    """The float32 additive bias [batch|1, 1, length, past + length]: -10000 on keys a
    query may not see (later positions; attention_mask 0)."""
    total = past + length
    rows = torch.arange(length, device=device)[:, None] + past
    mask = (torch.arange(total, device=device)[None, :] <= rows).float()[None, None]
    if attention_mask is not None:
        given = attention_mask.float()
        if given.dim() == 2 and tuple(given.shape) == (batch, total):
            mask = mask * given[:, None, None, :]
        elif given.dim() == 3 and tuple(given.shape) == (batch, length, total):
            mask = mask * given[:, None]
        else:
            raise ValueError(f"attention_mask has shape {tuple(given.shape)}; give 0/1 [batch, past + length] = "
                             f"[{batch}, {total}] or [batch, length, past + length] (1 = attend)")
    return (1.0 - mask) * MASK_VALUE


class RealFormerTfCausalLMPreTrainedModel(PreTrainedModel):
    config_class = RealFormerTfCausalLMConfig
    base_model_prefix = "transformer"

    def _init_weights(self, module):
        super()._init_weights(module)  # Embedding, LayerNorm
        if isinstance(module, Conv1D):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
            init.zeros_(module.bias)
        for name in ("head_scale", "residual_scale"):  # NormFormer's scales start at 1
            if isinstance(getattr(module, name, None), nn.Parameter):
                init.ones_(getattr(module, name))

    def _outputs(self, return_dict):
        return self.config.return_dict if return_dict is None else return_dict


class RealFormerTfCausalLMModel(RealFormerTfCausalLMPreTrainedModel):
    """The decoder: last_hidden_state (after ln_f in Pre-LN), the cache, and
    hidden_states / attentions when asked for."""

    def __init__(self, config):
        super().__init__(config)
        self.wte = nn.Embedding(config.vocab_size, config.hidden_size)
        self.wpe = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.drop = nn.Dropout(config.hidden_dropout_prob)
        self.h = nn.ModuleList(RealFormerTfCausalLMBlock(config, i) for i in range(config.num_hidden_layers))
        self.ln_f = layer_norm(config) if config.layer_norm_type != "post" else None
        self.post_init()

    def get_input_embeddings(self):
        return self.wte

    def set_input_embeddings(self, value):
        self.wte = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None,
                output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        """input_ids: [batch, length] (the new tokens only when `cache` holds earlier
        ones); attention_mask: see `mask_bias`; position_ids: default past + 0, 1, ...
        Other keyword arguments transformers passes are ignored."""
        cache = kwargs.pop("past_key_values", None) if cache is None else cache
        config = self.config
        use_cache = (config.use_cache and not self.training) if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = DynamicCache(config=config)
        batch, length = input_ids.shape
        past = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = torch.arange(past, past + length, device=input_ids.device)[None]
        if int(position_ids.max()) >= config.max_position_embeddings:
            raise ValueError(f"position {int(position_ids.max())} is beyond max_position_embeddings="
                             f"{config.max_position_embeddings}")
        x = self.drop(self.wte(input_ids) + self.wpe(position_ids))
        bias = mask_bias(attention_mask, batch, length, past, input_ids.device)
        hidden, attentions, scores = [x], [], None
        for block in self.h:
            x, scores, probs = block(x, bias, scores if config.residual_attention else None, cache)
            hidden.append(x)
            attentions.append(probs)
        if self.ln_f is not None:
            x = hidden[-1] = self.ln_f(x)
        output = BaseModelOutputWithPast(
            last_hidden_state=x,
            hidden_states=tuple(hidden) if output_hidden_states or getattr(config, "output_hidden_states", False)
            else None,
            attentions=tuple(attentions) if output_attentions or getattr(config, "output_attentions", False) else None,
            **{CACHE_FIELD: cache if use_cache else None})
        return output if self._outputs(return_dict) else output.to_tuple()


class RealFormerTfCausalLMForCausalLM(RealFormerTfCausalLMPreTrainedModel, GenerationMixin):
    """Next-token logits = last_hidden_state @ wte^T (tied, no bias); `labels` give the
    mean cross-entropy of each position's next token (shifted here; -100: ignored).
    Works with generate() (greedy, sampling, beams) with or without the cache."""

    def __init__(self, config):
        super().__init__(config)
        self.transformer = RealFormerTfCausalLMModel(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.transformer.wte

    def set_input_embeddings(self, value):
        self.transformer.wte = value

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=None, labels=None,
                logits_to_keep=0, output_attentions=None, output_hidden_states=None, return_dict=None, **kwargs):
        out = self.transformer(input_ids, attention_mask, position_ids, cache, use_cache, output_attentions,
                               output_hidden_states, return_dict=True, **kwargs)
        hidden = out.last_hidden_state
        if logits_to_keep:  # generate() asks for the last position's only
            hidden = hidden[:, -logits_to_keep:]
        logits = (hidden @ self.transformer.wte.weight.T).float()
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        output = CausalLMOutputWithPast(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                        attentions=out.attentions, **{CACHE_FIELD: getattr(out, CACHE_FIELD)})
        return output if self._outputs(return_dict) else output.to_tuple()
