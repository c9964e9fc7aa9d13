"""The NormFormer peer of the pretraining comparison: x-transformers' encoder with its
NormFormer options, trained by the same PyTorch loop as the transformers peer
(`peer_bert.TorchPretrainer`: loss, BERT's schedule, clipping, Keras' AdamW).

NormFormer (Shleifer et al. 2021) is Pre-LN plus three additions, and x-transformers
(lucidrains/x-transformers) has each as an `Encoder` option:

- a layer norm after self-attention: `sandwich_norm=True`, which x-transformers puts
  after the feed-forward too; that one is replaced by the identity here, since NormFormer
  normalizes the attention branch only (this package's `layer_norm_type="normformer"`);
- a learned scale per attention head: `attn_head_scale=True`;
- a layer norm after the feed-forward activation: `ff_post_act_ln=True`.

The rest is x-transformers' own, as a user of it gets it: its initialization, layer
norms with a gain and no bias, attention projections without biases, exact (erf) gelu,
learned absolute positions and a final layer norm. Its output layer is tied to the
token embeddings (`tie_embedding=True`), as BERT's masked-LM decoder is, but has no
transform or bias. Around the encoder this module adds what BERT pretraining needs and
x-transformers does not have: segment embeddings (added to the token embeddings) and a
next-sentence head on [CLS] (a tanh pooler and a linear layer, as BERT's).

`init="bert"` replaces x-transformers' initialization by BERT's (`bert_initialize`), so
that the comparison can tell the initialization's effect from the architecture's:
x-transformers draws token embeddings with Kaiming's normal (sd sqrt(2 / width), 0.18 at
width 64) and linear layers with PyTorch's uniform default (sd 1 / sqrt(3 * fan-in)),
where BERT draws every weight from a normal truncated at 2 sd, with sd 0.02.

torch and x-transformers are imported only here (pip install x-transformers).
"""

from experiments.study.peer_bert import TorchPretrainer


def xtransformers_normformer(vocab_size, hidden_size, num_layers, num_heads, intermediate_size, max_seq_length,
                             type_vocab_size=2):
    """A `torch.nn.Module` with `forward(input_ids, input_mask, segment_ids, positions)` ->
    (masked-LM logits [B, P, V], next-sentence logits [B, 2])."""
    import torch
    from x_transformers import Encoder, TransformerWrapper

    check_sizes(hidden_size, intermediate_size)

    class NormFormerForPretraining(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = TransformerWrapper(
                num_tokens=vocab_size, max_seq_len=max_seq_length,
                attn_layers=Encoder(dim=hidden_size, depth=num_layers, heads=num_heads,
                                    attn_dim_head=hidden_size // num_heads, ff_mult=intermediate_size // hidden_size,
                                    pre_norm=True, sandwich_norm=True, attn_head_scale=True, ff_post_act_ln=True),
                tie_embedding=True)
            drop_feed_forward_post_norms(self.encoder.attn_layers)
            self.segment_embeddings = torch.nn.Embedding(type_vocab_size, hidden_size)
            self.pooler = torch.nn.Linear(hidden_size, hidden_size)
            self.next_sentence = torch.nn.Linear(hidden_size, 2)

        def forward(self, input_ids, input_mask, segment_ids, positions):
            hidden = self.encoder(input_ids, mask=input_mask.bool(), return_embeddings=True,
                                  sum_embeds=self.segment_embeddings(segment_ids))
            gathered = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
            pooled = torch.tanh(self.pooler(hidden[:, 0]))
            return self.encoder.to_logits(gathered), self.next_sentence(pooled)

    return NormFormerForPretraining()


def bert_initialize(model, initializer_range=0.02):
    """Re-initializes `model` in place as BERT does: the weight of every linear layer
    and embedding from a normal with sd `initializer_range` truncated at 2 sd, biases
    0; norm gains and head scales keep their 1. Returns how many weights were drawn."""
    import torch

    drawn = 0
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                torch.nn.init.trunc_normal_(module.weight, std=initializer_range,
                                            a=-2 * initializer_range, b=2 * initializer_range)
                drawn += 1
                if getattr(module, "bias", None) is not None:
                    module.bias.zero_()
    return drawn


def check_sizes(hidden_size, intermediate_size):
    """x-transformers sizes the feed-forward as a whole multiple of the width (ff_mult)."""
    if intermediate_size % hidden_size:
        raise ValueError(f"x-transformers sizes the feed-forward as a multiple of the width: "
                         f"intermediate_size={intermediate_size} is not a multiple of hidden_size={hidden_size}")


def drop_feed_forward_post_norms(attn_layers):
    """Replaces the post-branch norm of every feed-forward block of an x-transformers
    `Encoder` built with `sandwich_norm=True` by the identity, keeping the attention
    blocks' ones. Returns how many were replaced."""
    import torch

    replaced = 0
    for layer_type, (norms, _, _) in zip(attn_layers.layer_types, attn_layers.layers):
        if layer_type == "f" and norms[1] is not None and not isinstance(norms[1], torch.nn.Identity):
            norms[1] = torch.nn.Identity()
            replaced += 1
    return replaced


class PeerXNormFormer(TorchPretrainer):
    """x-transformers' NormFormer (above) from its own initialization (or BERT's) under
    `seed`, trained by the shared loop.

    Args:
        sizes: dict with vocab_size, hidden_size, num_layers, num_heads,
            intermediate_size, max_seq_length.
        seed: torch's seed for the initial weights.
        init: "own" (x-transformers') or "bert" (`bert_initialize`).
        The other arguments are `TorchPretrainer`'s.
    """

    # As this package's NO_WEIGHT_DECAY: layer norm gains (x-transformers names them
    # `gamma`), biases and the head scales.
    no_decay = ("gamma", "bias", "head_scale")

    def __init__(self, sizes, seed, *args, init="own", **kwargs):
        import torch

        if init not in ("own", "bert"):
            raise ValueError(f"init={init!r}: expected 'own' (x-transformers') or 'bert'")
        torch.manual_seed(seed)
        model = xtransformers_normformer(**sizes)
        if init == "bert":
            bert_initialize(model)
        super().__init__(model, *args, **kwargs)

    def _outputs(self, batch):
        torch = self.torch
        return self.model(*(torch.as_tensor(batch[k], dtype=torch.long)
                            for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")))
