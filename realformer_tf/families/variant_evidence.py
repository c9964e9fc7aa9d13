"""Whether a checkpoint was trained with residual attention, told by its own weights.

Google's BERT releases and the RealFormer releases ship the same eleven-field
`bert_config.json` and the same variables; only the computation differs. When a config
read from a file does not state `residual_attention` and weights are loaded, the
checkpoint's masked-LM head (`cls/predictions`, which both releases ship) is asked: its
masked-LM loss on a few examples with residual attention on and off. A model computed
the way it was trained predicts far better than the same weights computed the other
way; the decision is taken only with a clear margin, and logged in one line with its
evidence. Without a masked-LM head (e.g. a fine-tuned classifier) or without a clear
margin, a ConfigError asks to state the field.

    config = BertConfig.from_json_file("bert_config.json")   # no residual_attention
    config = variant_evidence.resolve(families.BERT, config, "bert_model.ckpt")

A family asks this module (`ModelFamily.load_checkpoint`); `realformer_tf.checkpoints`
only reads the tensors.

Examples, best first: the run's own (pretraining records with their masked positions;
a few classifier / SQuAD training texts, 15% of their tokens masked with the vocab's
[MASK]); otherwise a deterministic sample of token ids, scored at unmasked positions
(the MLM head predicting the token it sees, which BERT's 10% "keep" masking trains:
this needs no vocab, and a model computed the wrong way loses it too).
"""

import dataclasses
import math

import numpy as np
from absl import logging

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.errors import ConfigError

NUM_EXAMPLES = 8
SAMPLE_LENGTH = 64
MASK_FRACTION = 0.15
SEED = 12345
# A clear decision: the worse setting's loss exceeds the better one's by MIN_GAP nats
# and by a factor MIN_RATIO, and the better one predicts clearly better than uniform.
MIN_GAP = 0.5
MIN_RATIO = 1.25

WHAT_TO_DO = ('add "residual_attention": true (a RealFormer release) or false (a Google BERT '
              'release) to the config')


def decided(config):
    """`config` with residual_attention stated: as it is when stated, else with the
    default a model built from it computes with (on: RealFormer). For a model that
    loads no weights (training from scratch); with weights, `resolve` asks them."""
    if config.residual_attention_stated:
        return config
    return dataclasses.replace(config, residual_attention=config.uses_residual_attention)


@dataclasses.dataclass
class Examples:
    """Evidence inputs: `batch` ({name: int32/float32 array [B, ...]}: input_ids,
    input_mask, segment_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights) and
    what they are, for the log line."""

    batch: dict
    what: str


@dataclasses.dataclass
class Evidence:
    loss_on: float
    loss_off: float
    what: str
    vocab_size: int

    @property
    def decision(self):
        """True / False, or None when the margin is not clear."""
        better, worse = sorted((self.loss_on, self.loss_off))
        if not (math.isfinite(better) and math.isfinite(worse)):
            return None
        clear = (worse - better >= MIN_GAP and worse >= MIN_RATIO * better
                 and better <= math.log(self.vocab_size) - MIN_GAP)
        return (self.loss_on < self.loss_off) if clear else None

    def describe(self):
        return (f"masked-LM loss {self.loss_on:.3f} with residual attention on vs {self.loss_off:.3f} "
                f"off, on {self.what}")


# -- examples -----------------------------------------------------------------------------
def _pad(sequences, length):
    ids = np.zeros([len(sequences), length], np.int32)
    mask = np.zeros_like(ids)
    for i, seq in enumerate(sequences):
        seq = list(seq)[:length]
        ids[i, :len(seq)] = seq
        mask[i, :len(seq)] = 1
    return ids, mask


def _choose_positions(mask, rng, max_predictions):
    """[B, P] positions (never the first token, [CLS]) and weights, P = max_predictions."""
    batch = mask.shape[0]
    positions = np.zeros([batch, max_predictions], np.int32)
    weights = np.zeros([batch, max_predictions], np.float32)
    for b in range(batch):
        real = int(mask[b].sum())
        candidates = np.arange(1, max(real, 2))
        count = min(max_predictions, len(candidates), max(1, int(round(real * MASK_FRACTION))))
        chosen = np.sort(rng.choice(candidates, size=count, replace=False))
        positions[b, :count] = chosen
        weights[b, :count] = 1.0
    return positions, weights


def from_token_ids(sequences, max_length, mask_id=None, what="examples", segments=None):
    """Examples from token id lists (e.g. tokenized training texts; `segments`: their
    segment ids, default 0): 15% of each sequence's tokens (deterministically chosen)
    are the targets, replaced by `mask_id` when given (masked LM), else kept (the head
    predicts the token it sees)."""
    keep = [i for i, s in enumerate(sequences) if len(s) >= 2][:NUM_EXAMPLES]
    sequences = [sequences[i] for i in keep]
    length = min(max_length, max(len(s) for s in sequences))
    ids, mask = _pad(sequences, length)
    segment_ids = _pad([segments[i] for i in keep], length)[0] if segments else np.zeros_like(ids)
    rng = np.random.default_rng(SEED)
    max_predictions = max(1, int(math.ceil(length * MASK_FRACTION)))
    positions, weights = _choose_positions(mask, rng, max_predictions)
    labels = np.take_along_axis(ids, positions, axis=1) * (weights > 0)
    if mask_id is not None:
        for b in range(ids.shape[0]):
            for p, w in zip(positions[b], weights[b]):
                if w:
                    ids[b, p] = mask_id
    batch = dict(input_ids=ids, input_mask=mask, segment_ids=segment_ids,
                 masked_lm_positions=positions, masked_lm_ids=labels.astype(np.int32),
                 masked_lm_weights=weights)
    return Examples(batch, f"{ids.shape[0]} {what}" + ("" if mask_id is not None else " (unmasked)"))


def deterministic_sample(vocab_size, max_length):
    """NUM_EXAMPLES sequences of seeded uniform token ids (the same for every run),
    scored at unmasked positions (no vocab, hence no [MASK] id, is needed)."""
    rng = np.random.default_rng(SEED)
    length = max(4, min(SAMPLE_LENGTH, max_length))
    low = min(5, vocab_size - 1)  # past [PAD] and the usual first special tokens
    sequences = rng.integers(low, vocab_size, size=[NUM_EXAMPLES, length]).tolist()
    return from_token_ids(sequences, length, what="sequences of seeded random token ids")


def from_texts(texts, tokenizer, max_length, what):
    """Examples from raw texts (pairs allowed: tuples) with a FullTokenizer."""
    sequences, segments = [], []
    for text in texts:
        parts = [p for p in (text if isinstance(text, tuple) else (text,)) if p]
        tokens, segment = ["[CLS]"], [0]
        for index, part in enumerate(parts):
            pieces = tokenizer.tokenize(part) + ["[SEP]"]
            tokens += pieces
            segment += [min(index, 1)] * len(pieces)
        sequences.append(tokenizer.convert_tokens_to_ids(tokens[:max_length]))
        segments.append(segment[:max_length])
    mask_id = tokenizer.vocab.get("[MASK]")
    return from_token_ids(sequences, max_length, mask_id=mask_id, what=what, segments=segments)


# -- evidence -----------------------------------------------------------------------------
def _masked_lm_losses(family, config, prefix, batch, options):
    """{residual_attention: masked-LM loss} for True and False. The checkpoint is read
    once: residual attention adds no weight, so the second model takes the first's."""
    losses, weights = {}, None
    for value in (True, False):
        model = family.build_model(dataclasses.replace(config, residual_attention=value), "pretraining",
                                   dtype="float32")
        if weights is None:
            family.load_checkpoint(model, prefix)
            weights = model.get_weights()
        else:
            if not model.built:
                model.build()
            model.set_weights(weights)
        losses[value] = _masked_lm_loss(model, family, config, batch, options)
    return losses


def _masked_lm_loss(model, family, config, batch, options):
    import tensorflow as tf

    features = family.adapt_features({k: tf.constant(v) for k, v in batch.items()}, config, options)
    logits = np.asarray(model(features, training=False)["masked_lm_logits"], np.float64)
    logits -= logits.max(-1, keepdims=True)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, batch["masked_lm_ids"][..., None].astype(np.int64), -1)[..., 0]
    weights = batch["masked_lm_weights"].astype(np.float64)
    return float(-(picked * weights).sum() / max(weights.sum(), 1.0))


def measure(family, config, prefix, examples=None, options=None):
    """Evidence (masked-LM losses on / off) for the weights at resolved `prefix`; None
    when the checkpoint has no pretraining heads. `options`: the job's (its inputs, e.g.
    ETC's global tokens); None: the family's defaults."""
    if not family.checkpoint_heads(prefix, "pretraining"):
        return None
    if examples is None:
        examples = deterministic_sample(config.vocab_size, family.max_length(config) or 512)
    losses = _masked_lm_losses(family, config, prefix, examples.batch, options)
    return Evidence(losses[True], losses[False], examples.what, config.vocab_size)


def decide(family, config, checkpoint, examples=None, options=None, source="the config"):
    """(residual_attention, one-line explanation) from the weights at `checkpoint`.

    Raises:
        ConfigError asking to state the field, when the checkpoint has no masked-LM
        head or its evidence is not clear.
    """
    prefix = ckpt.resolve_checkpoint(checkpoint)
    evidence = measure(family, config, prefix, examples, options)
    if evidence is None:
        raise ConfigError(
            f"{source} does not state residual_attention and {prefix} has no masked-LM head "
            f"({family.head_prefixes['pretraining'][0]}) to tell it from the weights (e.g. a fine-tuned "
            f"checkpoint); {WHAT_TO_DO}")
    if evidence.decision is None:
        raise ConfigError(
            f"{source} does not state residual_attention and the weights of {prefix} do not tell "
            f"clearly ({evidence.describe()}); {WHAT_TO_DO}")
    value = evidence.decision
    line = (f"residual attention {'on' if value else 'off'}: decided from the weights of {prefix} "
            f"({source} does not state it): {evidence.describe()}")
    return value, line


def resolve(family, config, checkpoint, examples=None, options=None, source="the config", log=None):
    """`config` itself when it states residual_attention or no `checkpoint` is given;
    else a copy with the value the weights tell (see `decide`), logged in one line
    (`log`, default absl logging)."""
    if config.residual_attention_stated or not checkpoint:
        return config
    value, line = decide(family, config, checkpoint, examples, options, source)
    (log or logging.info)(line)
    return dataclasses.replace(config, residual_attention=value)


def check_loaded_model(model, family, prefix, log=None):
    """For a family's loader in Python: a model built from a config that does not state
    residual_attention (hence built with the default, on) gets the weights' evidence
    first; a contradiction is a ConfigError, agreement one line to `log` (default absl
    logging), and the model's config is replaced by the stated one (a new config: the
    old one is not changed)."""
    config = model.config
    if config.residual_attention_stated:
        return
    value, line = decide(family, config, prefix)
    if value != config.uses_residual_attention:
        raise ConfigError(
            f"{line}; but {type(model).__name__} was built with residual attention "
            f"{'on' if config.uses_residual_attention else 'off'} (the default). Set \"residual_attention\": "
            f"{'true' if value else 'false'} in the config (or build the model from "
            "variant_evidence.resolve(family, config, checkpoint))")
    (log or logging.info)(line)
    model.config = dataclasses.replace(config, residual_attention=value)
