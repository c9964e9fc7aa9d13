"""The peer side of the pretraining comparison: Hugging Face `transformers`'
`BertForPreTraining`, trained by a plain PyTorch loop with this package's settings.

The loop takes what `run_pretraining.py` does, so that a gap between the two sides is
a difference in the models or the job, not in the recipe:

- the loss: mean masked-LM NLL over the real predictions plus mean next-sentence NLL;
- BERT's learning rate (linear warmup from 0, then linear decay to 0 at the last step;
  update k uses the rate of step k - 1, as TF's global step does);
- clipping to global norm 1.0 (`tf.clip_by_global_norm`'s factor);
- AdamW as Keras applies it (bias-corrected step size, epsilon outside the square root,
  decay `w -= lr * weight_decay * w` first), with no decay on LayerNorm weights and
  biases. (google-research/bert's optimizer has no bias correction; this package
  follows Keras, see the `--optimizer` row of docs/jobs.md.)

The loop is `TorchPretrainer`; `PeerBert` runs it on transformers' model, and
`peer_xtransformers` on x-transformers' NormFormer. The batches are given as
NumPy dicts in this package's feature layout, so both sides read the very same records
in the same order. torch and transformers are imported only here (pip install torch
transformers).
"""

import math

import numpy as np

# Hugging Face names that take no weight decay (this package's NO_WEIGHT_DECAY:
# LayerNorm gamma / beta, every bias).
_NO_DECAY = ("LayerNorm.weight", "LayerNorm.bias", "bias")


def learning_rate(step, peak, num_train_steps, num_warmup_steps):
    """BERT's schedule at global step `step` (this package's WarmupPolynomialDecay)."""
    if num_warmup_steps and step < num_warmup_steps:
        return peak * step / num_warmup_steps
    return peak * max(0.0, 1.0 - min(step, num_train_steps) / max(num_train_steps, 1))


def masked_lm_metrics(logits, ids, weights):
    """(weighted accuracy, weighted mean NLL, total weight) of masked-LM logits
    [N, P, V] against ids [N, P] with weights [N, P], in float64 NumPy: the one
    evaluation both sides go through."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, ids[..., None].astype(np.int64), -1)[..., 0]
    correct = logits.argmax(-1) == ids
    total = float(weights.sum())
    return float((correct * weights).sum() / total), float((nll * weights).sum() / total), total


class TorchPretrainer:
    """The loop above around a PyTorch pretraining model: subclasses give `model` and
    `_outputs(batch)` -> (masked-LM logits [B, P, V], next-sentence logits [B, 2]).

    Args:
        model: a `torch.nn.Module`.
        peak_learning_rate, num_train_steps, num_warmup_steps: BERT's schedule.
        weight_decay: decoupled decay (not on parameters whose name contains one of
            `no_decay`: LayerNorm weights and biases).
        clip_norm: global gradient norm bound (0: none).
        threads: torch's intra-op threads (None: torch's default).
    """

    no_decay = _NO_DECAY

    def __init__(self, model, peak_learning_rate, num_train_steps, num_warmup_steps, weight_decay=0.01,
                 clip_norm=1.0, threads=None):
        import torch

        if threads:
            torch.set_num_threads(threads)
        self.torch = torch
        self.model = model
        self.schedule = (peak_learning_rate, num_train_steps, num_warmup_steps)
        self.weight_decay, self.clip_norm = weight_decay, clip_norm
        self.step = 0
        self.params = [(name, p) for name, p in self.model.named_parameters() if p.requires_grad]
        self.slots = {name: (torch.zeros_like(p), torch.zeros_like(p)) for name, p in self.params}

    def _outputs(self, batch):
        raise NotImplementedError

    def _loss(self, batch):
        torch = self.torch
        mlm_logits, nsp_logits = self._outputs(batch)
        ids = torch.as_tensor(batch["masked_lm_ids"], dtype=torch.long)
        weights = torch.as_tensor(batch["masked_lm_weights"], dtype=torch.float32)
        nll = torch.nn.functional.cross_entropy(mlm_logits.transpose(1, 2), ids, reduction="none")
        nsp = torch.nn.functional.cross_entropy(
            nsp_logits, torch.as_tensor(np.reshape(batch["next_sentence_labels"], [-1]), dtype=torch.long))
        return (nll * weights).sum() / weights.sum() + nsp

    def train_step(self, batch):
        """One update on `batch`; returns its loss."""
        torch = self.torch
        self.model.train()
        self.model.zero_grad(set_to_none=True)
        loss = self._loss(batch)
        loss.backward()
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for _, p in self.params]
        multiplier = 1.0
        if self.clip_norm:
            norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads))
            multiplier = self.clip_norm * min(1.0 / norm, 1.0 / self.clip_norm)
        lr = learning_rate(self.step, *self.schedule)
        with torch.no_grad():
            for (name, p), g in zip(self.params, grads):
                self._adamw(name, p, g * multiplier, lr)
        self.step += 1
        return loss.item()

    def _adamw(self, name, p, g, lr, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
        """Keras' AdamW update of one parameter."""
        if self.weight_decay and not any(part in name for part in self.no_decay):
            p.sub_(p * (lr * self.weight_decay))
        m, v = self.slots[name]
        m.add_((g - m) * (1 - beta_1))
        v.add_((g * g - v) * (1 - beta_2))
        t = self.step + 1
        alpha = lr * math.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t)
        p.sub_(alpha * m / (v.sqrt() + epsilon))

    def masked_lm_logits(self, batch):
        """Masked-LM logits [B, P, V] (NumPy) in inference mode."""
        self.model.eval()
        with self.torch.no_grad():
            return self._outputs(batch)[0].numpy()

    def named_weights(self):
        """{Hugging Face name: NumPy array} of the current weights."""
        return {name: p.detach().numpy().copy() for name, p in self.model.state_dict().items()}


class PeerBert(TorchPretrainer):
    """A transformers `BertForPreTraining` loaded from a Hugging Face folder, trained by
    the loop above.

    Args:
        folder: a folder `checkpoints.bert.save_hf_folder` wrote from this package's
            pretraining model (vanilla post-LN BERT), so both sides start from the same
            weights.
        The other arguments are `TorchPretrainer`'s.
    """

    def __init__(self, folder, *args, **kwargs):
        import transformers

        super().__init__(transformers.BertForPreTraining.from_pretrained(folder), *args, **kwargs)

    def _outputs(self, batch):
        """(masked-LM logits [B, P, V], next-sentence logits [B, 2]) of a batch."""
        torch = self.torch
        out = self.model.bert(input_ids=torch.as_tensor(batch["input_ids"], dtype=torch.long),
                              attention_mask=torch.as_tensor(batch["input_mask"], dtype=torch.long),
                              token_type_ids=torch.as_tensor(batch["segment_ids"], dtype=torch.long))
        positions = torch.as_tensor(batch["masked_lm_positions"], dtype=torch.long)
        gathered = torch.gather(out.last_hidden_state, 1,
                                positions[..., None].expand(-1, -1, out.last_hidden_state.shape[-1]))
        return self.model.cls.predictions(gathered), self.model.cls.seq_relationship(out.pooler_output)
