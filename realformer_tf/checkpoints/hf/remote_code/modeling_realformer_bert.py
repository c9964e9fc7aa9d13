"""realformer_tf's BERT variants in PyTorch, as Hugging Face transformers remote code:
RealFormer residual attention (with or without the running mean), pre-LN and NormFormer,
computing what realformer_tf's Keras models compute with the same weights.

realformer_tf copies this file and configuration_realformer_bert.py into the folders it
writes for those variants (`convert_checkpoint.py --output_format=hf --hf_allow_variant`)
and names the classes in config.json's auto_map:

    from transformers import AutoModelForPreTraining, AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True)

Weights keep Hugging Face BERT's names, plus the variants' own:
  encoder.layer.<i>.attention.output.head_scale   NormFormer's per-head scale [heads]
  encoder.layer.<i>.attention.post_LayerNorm      NormFormer's attention-output LayerNorm
  encoder.layer.<i>.intermediate.LayerNorm        NormFormer's feed-forward-activation LayerNorm
  encoder.layer.<i>.output.residual_scale         NormFormer's feed-forward residual scale [hidden]
  encoder.LayerNorm                               the final LayerNorm of pre-LN / NormFormer
In pre-LN / NormFormer layers attention.output.LayerNorm and output.LayerNorm are the
LayerNorms *before* the attention and the feed-forward (BERT's post-LN: after them).

Each layer (x: [batch, length, hidden]):
  post        x = LN(x + Attn(x));            x = LN(x + FFN(x))                  (BERT)
  pre         x = x + Attn(LN(x));            x = x + W2 act(W1 LN(x))
  normformer  x = x + LN_post(Attn'(LN(x)));  x = r * x + W2 LN_fc(act(W1 LN(x)))
with Attn' scaling each head, r the optional residual scale; pre / normformer end with
a final LayerNorm. Dropout (training only) on the embeddings, the attention
probabilities and each sublayer's output before its residual sum.

Attention: scores = q.k^T / sqrt(head_dim) + the previous layer's scores (residual
attention; the carried scores are taken before the mask, and the first layer has none);
probabilities = softmax(scores / divisor + (1 - mask) * -10000) in float32, divisor =
layer_index + 1 with the running mean, else 1. attention_mask: [batch, key_len] or
[batch, query_len, key_len], 1 = attend.

Matches realformer_tf 0.1.0 (`REALFORMER_TF_VERSION`). Needs only torch and
transformers, not realformer_tf.
"""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling, MaskedLMOutput, QuestionAnsweringModelOutput, SequenceClassifierOutput)
from transformers.models.bert.modeling_bert import BertForPreTrainingOutput

from .configuration_realformer_bert import REALFORMER_TF_VERSION, RealFormerTfBertConfig  # noqa: F401

try:  # transformers 5: initializers that leave loaded weights alone
    from transformers import initialization as init
except ImportError:
    from torch.nn import init

MASK_VALUE = -10000.0  # the additive bias of masked keys (original BERT's)

# config.json's hidden_act (Hugging Face's names) -> the function.
ACTIVATIONS = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"),  # BERT's tanh form: realformer_tf's "gelu"
    "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu_fast": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu,  # the exact erf form: realformer_tf's "gelu_exact"
    "relu": F.relu, "tanh": torch.tanh, "silu": F.silu, "swish": F.silu, "linear": lambda x: x,
}


def activation(name):
    if name not in ACTIVATIONS:
        raise ValueError(f"hidden_act={name!r} is not one of {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


def layer_norm(config):
    return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


def mask_bias(attention_mask):
    """A [batch, key_len] or [batch, query_len, key_len] 0/1 mask -> the float32 additive
    bias [batch, 1, query_len|1, key_len] of the logits."""
    mask = attention_mask.float()
    mask = mask[:, None, None, :] if mask.dim() == 2 else mask[:, None, :, :]
    return (1.0 - mask) * MASK_VALUE


class RealFormerTfBertEmbeddings(nn.Module):
    """word + token type + position embeddings, LayerNorm, dropout (BERT's)."""

    def __init__(self, config):
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = layer_norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)

    def forward(self, input_ids, token_type_ids, position_ids=None):
        length = input_ids.shape[1]
        if length > self.position_embeddings.num_embeddings:
            raise ValueError(f"input_ids has length {length}, longer than max_position_embeddings="
                             f"{self.position_embeddings.num_embeddings}")
        if position_ids is None:
            position_ids = torch.arange(length, device=input_ids.device)[None]
        x = (self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids)
             + self.position_embeddings(position_ids))
        return self.dropout(self.LayerNorm(x))


class RealFormerTfBertSelfAttention(nn.Module):
    """Returns (context [batch, heads, length, head_dim], scores, probabilities): scores
    = q.k^T / sqrt(head_dim) + prev_scores, before the mask (what the next layer adds)."""

    def __init__(self, config, layer_index):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // config.num_attention_heads
        self.query = nn.Linear(config.hidden_size, config.hidden_size)
        self.key = nn.Linear(config.hidden_size, config.hidden_size)
        self.value = nn.Linear(config.hidden_size, config.hidden_size)
        self.dropout = nn.Dropout(config.attention_probs_dropout_prob)
        residual = config.residual_attention is not False
        self.divisor = float(layer_index + 1) if residual and config.use_running_mean else 1.0

    def forward(self, x, bias, prev_scores=None):
        batch, length, _ = x.shape

        def heads(t):  # [batch, length, heads * head_dim] -> [batch, heads, length, head_dim]
            return t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = (q * self.head_dim ** -0.5) @ k.transpose(-1, -2)
        if prev_scores is not None:
            scores = scores + prev_scores
        logits = (scores / self.divisor).float()
        if bias is not None:
            logits = logits + bias
        probs = torch.softmax(logits, dim=-1).to(v.dtype)
        return self.dropout(probs) @ v, scores, probs


class RealFormerTfBertAttentionOutput(nn.Module):
    """The output projection with NormFormer's per-head scale (where the config has it)
    before or after it; `LayerNorm` is the sublayer's (after it in post-LN, before the
    attention in pre-LN / NormFormer)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = layer_norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        normformer = config.layer_norm_type == "normformer"
        self.head_scale = nn.Parameter(torch.ones(config.num_attention_heads)) if normformer else None
        self.head_scale_position = config.normformer_head_scale_position

    def forward(self, context):  # context: [batch, heads, length, head_dim]
        batch, heads, length, head_dim = context.shape
        if self.head_scale is not None and self.head_scale_position == "before_projection":
            context = context * self.head_scale[None, :, None, None]
        out = self.dense(context.transpose(1, 2).reshape(batch, length, heads * head_dim))
        if self.head_scale is not None and self.head_scale_position == "after_projection":
            out = (out.view(batch, length, heads, -1) * self.head_scale[:, None]).view(batch, length, -1)
        return out


class RealFormerTfBertAttention(nn.Module):
    """The attention sublayer: post  x = LN(x + Attn(x)); pre  x = x + Attn(LN(x));
    normformer  x = x + LN_post(Attn'(LN(x)))."""

    def __init__(self, config, layer_index):
        super().__init__()
        self.self = RealFormerTfBertSelfAttention(config, layer_index)
        self.output = RealFormerTfBertAttentionOutput(config)
        self.post_LayerNorm = layer_norm(config) if config.layer_norm_type == "normformer" else None
        self.pre_ln = config.layer_norm_type != "post"

    def forward(self, x, bias, prev_scores=None):
        norm = self.output.LayerNorm
        context, scores, probs = self.self(norm(x) if self.pre_ln else x, bias, prev_scores)
        out = self.output(context)
        if self.post_LayerNorm is not None:
            out = self.post_LayerNorm(out)
        out = self.output.dropout(out)
        return (x + out if self.pre_ln else norm(x + out)), scores, probs


class RealFormerTfBertIntermediate(nn.Module):
    """W1 (and NormFormer's LayerNorm of the activation, applied by the layer)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)
        normformer = config.layer_norm_type == "normformer"
        self.LayerNorm = nn.LayerNorm(config.intermediate_size, eps=config.layer_norm_eps) if normformer else None


class RealFormerTfBertOutput(nn.Module):
    """W2, the feed-forward sublayer's LayerNorm (after it in post-LN, before W1 in pre-LN /
    NormFormer) and NormFormer's residual scale (where the config has it)."""

    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = layer_norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        scaled = config.normformer_residual_scale
        self.residual_scale = nn.Parameter(torch.ones(config.hidden_size)) if scaled else None


class RealFormerTfBertLayer(nn.Module):
    """One block: the attention sublayer, then the feed-forward one
    (post  x = LN(x + W2 act(W1 x)); pre  x = x + W2 act(W1 LN(x));
    normformer  x = r * x + W2 LN_fc(act(W1 LN(x))))."""

    def __init__(self, config, layer_index):
        super().__init__()
        self.attention = RealFormerTfBertAttention(config, layer_index)
        self.intermediate = RealFormerTfBertIntermediate(config)
        self.output = RealFormerTfBertOutput(config)
        self.act = activation(config.hidden_act)
        self.pre_ln = config.layer_norm_type != "post"

    def forward(self, x, bias, prev_scores=None):
        x, scores, probs = self.attention(x, bias, prev_scores)
        inner, out = self.intermediate, self.output
        h = self.act(inner.dense(out.LayerNorm(x) if self.pre_ln else x))
        if inner.LayerNorm is not None:
            h = inner.LayerNorm(h)
        h = out.dropout(out.dense(h))
        if not self.pre_ln:
            return out.LayerNorm(x + h), scores, probs
        residual = x if out.residual_scale is None else x * out.residual_scale
        return residual + h, scores, probs


class RealFormerTfBertEncoder(nn.Module):
    """The layers, threading the carried scores from each to the next (residual
    attention), and the final LayerNorm of pre-LN / NormFormer."""

    def __init__(self, config):
        super().__init__()
        self.layer = nn.ModuleList(RealFormerTfBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.LayerNorm = layer_norm(config) if config.layer_norm_type != "post" else None
        self.residual_attention = config.residual_attention is not False

    def forward(self, x, bias):
        """Returns (output, hidden states: the input and each layer's output, the last
        after the final LayerNorm; attention probabilities per layer)."""
        hidden, attentions, scores = [x], [], None
        for layer in self.layer:
            x, scores, probs = layer(x, bias, scores if self.residual_attention else None)
            hidden.append(x)
            attentions.append(probs)
        if self.LayerNorm is not None:
            x = hidden[-1] = self.LayerNorm(x)
        return x, tuple(hidden), tuple(attentions)


class RealFormerTfBertPooler(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, sequence_output):
        return torch.tanh(self.dense(sequence_output[:, 0]))


class RealFormerTfBertPreTrainedModel(PreTrainedModel):
    config_class = RealFormerTfBertConfig
    base_model_prefix = "bert"

    def _init_weights(self, module):
        super()._init_weights(module)  # Linear, Embedding, LayerNorm
        for name in ("head_scale", "residual_scale"):  # NormFormer's scales start at 1
            if isinstance(getattr(module, name, None), nn.Parameter):
                init.ones_(getattr(module, name))
        if isinstance(module, RealFormerTfBertLMPredictionHead):
            init.zeros_(module.bias)

    def _outputs(self, return_dict):
        return self.config.return_dict if return_dict is None else return_dict


class RealFormerTfBertModel(RealFormerTfBertPreTrainedModel):
    """The encoder: last_hidden_state, pooler_output (tanh(dense([CLS])); None without a
    pooler), and hidden_states / attentions when asked for."""

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config)
        self.embeddings = RealFormerTfBertEmbeddings(config)
        self.encoder = RealFormerTfBertEncoder(config)
        self.pooler = RealFormerTfBertPooler(config) if add_pooling_layer else None
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.word_embeddings

    def set_input_embeddings(self, value):
        self.embeddings.word_embeddings = value

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                output_attentions=None, output_hidden_states=None, return_dict=None):
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        x = self.embeddings(input_ids, token_type_ids, position_ids)
        bias = None if attention_mask is None else mask_bias(attention_mask)
        sequence_output, hidden, attentions = self.encoder(x, bias)
        pooled = self.pooler(sequence_output) if self.pooler is not None else None
        config = self.config
        output = BaseModelOutputWithPooling(
            last_hidden_state=sequence_output, pooler_output=pooled,
            hidden_states=hidden if output_hidden_states or getattr(config, "output_hidden_states", False) else None,
            attentions=attentions if output_attentions or getattr(config, "output_attentions", False) else None)
        return output if self._outputs(return_dict) else output.to_tuple()


class RealFormerTfBertLMPredictionHead(nn.Module):
    """cls.predictions: dense + act + LayerNorm, then logits against the word
    embeddings (tied, as realformer_tf's: no decoder weight of its own) + bias."""

    def __init__(self, config):
        super().__init__()
        self.transform = nn.Module()
        self.transform.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.transform.LayerNorm = layer_norm(config)
        self.act = activation(config.hidden_act)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))

    def forward(self, sequence_output, word_embeddings):
        h = self.transform.LayerNorm(self.act(self.transform.dense(sequence_output)))
        return h @ word_embeddings.T + self.bias


def _cross_entropy(logits, labels):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))  # -100: ignored


class RealFormerTfBertForPreTraining(RealFormerTfBertPreTrainedModel):
    """The masked-LM (prediction_logits at every position) and next-sentence heads."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = RealFormerTfBertModel(config)
        self.cls = nn.Module()
        self.cls.predictions = RealFormerTfBertLMPredictionHead(config)
        self.cls.seq_relationship = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                next_sentence_label=None, output_attentions=None, output_hidden_states=None, return_dict=None):
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states, return_dict=True)
        logits = self.cls.predictions(out.last_hidden_state, self.bert.embeddings.word_embeddings.weight)
        nsp_logits = self.cls.seq_relationship(out.pooler_output)
        loss = None
        if labels is not None and next_sentence_label is not None:
            loss = _cross_entropy(logits, labels) + _cross_entropy(nsp_logits, next_sentence_label)
        output = BertForPreTrainingOutput(loss=loss, prediction_logits=logits, seq_relationship_logits=nsp_logits,
                                          hidden_states=out.hidden_states, attentions=out.attentions)
        return output if self._outputs(return_dict) else output.to_tuple()


class RealFormerTfBertForMaskedLM(RealFormerTfBertPreTrainedModel):
    """The masked-LM head alone (no pooler, no next-sentence head)."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = RealFormerTfBertModel(config, add_pooling_layer=False)
        self.cls = nn.Module()
        self.cls.predictions = RealFormerTfBertLMPredictionHead(config)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                output_attentions=None, output_hidden_states=None, return_dict=None):
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states, return_dict=True)
        logits = self.cls.predictions(out.last_hidden_state, self.bert.embeddings.word_embeddings.weight)
        loss = None if labels is None else _cross_entropy(logits, labels)
        output = MaskedLMOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                attentions=out.attentions)
        return output if self._outputs(return_dict) else output.to_tuple()


class RealFormerTfBertForSequenceClassification(RealFormerTfBertPreTrainedModel):
    """Dropout and `classifier` on the pooled output (realformer_tf's output_weights /
    output_bias); the loss by config.problem_type, as BertForSequenceClassification's."""

    def __init__(self, config):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.bert = RealFormerTfBertModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout_prob)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                output_attentions=None, output_hidden_states=None, return_dict=None):
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states, return_dict=True)
        logits = self.classifier(self.dropout(out.pooler_output))
        loss = None
        if labels is not None:
            problem = self.config.problem_type or (
                "regression" if self.num_labels == 1 else
                "single_label_classification" if labels.dtype in (torch.long, torch.int) else
                "multi_label_classification")
            if problem == "regression":
                loss = F.mse_loss(logits.squeeze(-1), labels.squeeze(-1).to(logits.dtype))
            elif problem == "single_label_classification":
                loss = _cross_entropy(logits, labels)
            else:
                loss = F.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        output = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=out.hidden_states,
                                          attentions=out.attentions)
        return output if self._outputs(return_dict) else output.to_tuple()


class RealFormerTfBertForQuestionAnswering(RealFormerTfBertPreTrainedModel):
    """Span logits on every token (`qa_outputs`, realformer_tf's cls/squad); no pooler."""

    def __init__(self, config):
        super().__init__(config)
        self.bert = RealFormerTfBertModel(config, add_pooling_layer=False)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None,
                start_positions=None, end_positions=None, output_attentions=None, output_hidden_states=None,
                return_dict=None):
        out = self.bert(input_ids, attention_mask, token_type_ids, position_ids, output_attentions,
                        output_hidden_states, return_dict=True)
        start, end = self.qa_outputs(out.last_hidden_state).unbind(-1)
        loss = None
        if start_positions is not None and end_positions is not None:
            length = start.shape[1]  # positions outside the input are ignored, as in BERT's
            loss = (F.cross_entropy(start, start_positions.clamp(0, length), ignore_index=length)
                    + F.cross_entropy(end, end_positions.clamp(0, length), ignore_index=length)) / 2
        output = QuestionAnsweringModelOutput(loss=loss, start_logits=start, end_logits=end,
                                              hidden_states=out.hidden_states, attentions=out.attentions)
        return output if self._outputs(return_dict) else output.to_tuple()
