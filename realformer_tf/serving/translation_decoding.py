"""Decoding a translation model: beam search (Model Garden's `sequence_beam_search`,
the search of its Transformer) and a plain greedy loop, both on the model's key/value
cache, TensorFlow ops only (so they run in a SavedModel).

    out = beam_search(model, source_ids, beam_size=4, alpha=0.6, max_extra_length=50)
    out["ids"]     # int32 [batch, length]: the best hypothesis, without <s>, zeros after </s>
    out["score"]   # float32 [batch]: its log-probability / length penalty

A hypothesis ends at the end-of-sentence id or after `source length +
max_extra_length` tokens (fairseq's `--max-len-a 1 --max-len-b`), capped by the
model's positions. The length penalty is GNMT's ((5 + length) / 6) ** alpha, with
which Model Garden ranks finished hypotheses; alpha 0 ranks by log-probability.
Neither search emits <pad> or <s>: their probability is moved to the other tokens.
"""

import numpy as np
import tensorflow as tf
from official.nlp.modeling.ops import beam_search as mg_beam_search


def _decode_length(model, source_mask, max_extra_length):
    """Target tokens to decode: the longest source plus `max_extra_length`, at most the
    model's positions less one (the <s> the decoder starts from)."""
    longest = tf.reduce_max(tf.reduce_sum(tf.cast(source_mask, tf.int32), axis=1))
    return tf.minimum(longest + max_extra_length, model.config.max_position_embeddings - 1)


def _source_mask(model, source_ids, source_mask):
    if source_mask is None:
        return tf.cast(tf.not_equal(source_ids, model.config.pad_id), tf.int32)
    return tf.cast(source_mask, tf.int32)


def _never_pad_or_bos(logits, config):
    """Step logits [batch, vocab] with <pad> and <s> ruled out (as fairseq's generator
    rules out <pad>): neither is a token a translation can hold."""
    banned = tf.reduce_any(tf.equal(tf.range(tf.shape(logits)[-1])[:, None], [[config.pad_id, config.bos_id]]), -1)
    return tf.where(banned[None, :], tf.cast(-1e9, logits.dtype), logits)


def _zeros_after_eos(ids, eos_id):
    """[B, T] ids with every position after the first `eos_id` of a row set to 0 (the
    end-of-sentence token itself kept)."""
    after = tf.cumsum(tf.cast(tf.equal(ids, eos_id), tf.int32), axis=1, exclusive=True) > 0
    return tf.where(after, tf.zeros_like(ids), ids)


def beam_search(model, source_ids, source_mask=None, beam_size=4, alpha=0.6, max_extra_length=50):
    """The best hypothesis per source sentence (see the module docstring): a dict with
    `ids` int32 [batch, length] and `score` float32 [batch]."""
    source_ids = tf.cast(source_ids, tf.int32)
    source_mask = _source_mask(model, source_ids, source_mask)
    batch = tf.shape(source_ids)[0]
    memory = model.encode(source_ids, source_mask)
    # Model Garden's search holds the scores and every cached tensor in one dtype:
    # float32 (the logits' dtype), the cache cast to the model's compute dtype to be used.
    compute = memory.dtype
    as_float32 = lambda tree: tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), tree)  # noqa: E731
    cache = as_float32({"memory": memory, "source_mask": source_mask, "layers": model.empty_cache(batch)})

    def symbols_to_logits(ids, index, cache):
        del index  # the cache's length says where the new token goes
        used = tf.nest.map_structure(lambda t: tf.cast(t, compute), cache)
        out = model.decode(ids[:, -1:], used["memory"], cache["source_mask"], cache=used["layers"])
        return _never_pad_or_bos(out["logits"][:, -1], model.config), dict(cache, layers=as_float32(out["cache"]))

    length = _decode_length(model, source_mask, max_extra_length)
    sequences, scores = mg_beam_search.sequence_beam_search(
        symbols_to_logits_fn=symbols_to_logits, initial_ids=tf.fill([batch], model.config.bos_id),
        initial_cache=cache, vocab_size=model.config.vocab_size, beam_size=beam_size, alpha=alpha,
        max_decode_length=length, eos_id=model.config.eos_id, padded_decode=False, dtype=tf.float32)
    best = sequences[:, 0, 1:]  # the top beam, without <s>
    return {"ids": _zeros_after_eos(best, model.config.eos_id), "score": tf.cast(scores[:, 0], tf.float32)}


def greedy(model, source_ids, source_mask=None, max_extra_length=50):
    """The most likely next token at every step, on the cache: a dict with `ids` int32
    [batch, length] (zeros after </s>) and `log_prob` float32 [batch], the sum of the
    chosen tokens' log-probabilities up to and with </s>."""
    source_ids = tf.cast(source_ids, tf.int32)
    source_mask = _source_mask(model, source_ids, source_mask)
    batch = tf.shape(source_ids)[0]
    memory = model.encode(source_ids, source_mask)
    eos = model.config.eos_id
    length = _decode_length(model, source_mask, max_extra_length)
    tokens = tf.TensorArray(tf.int32, size=0, dynamic_size=True, element_shape=[None])
    step = model.decode(tf.fill([batch, 1], model.config.bos_id), memory, source_mask,
                        cache=model.empty_cache(batch))

    def body(i, step_logits, cache, done, log_prob, tokens):
        log_probs = tf.nn.log_softmax(_never_pad_or_bos(step_logits, model.config))
        token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)
        chosen = tf.gather(log_probs, token, batch_dims=1)
        log_prob += tf.where(done, 0.0, chosen)
        token = tf.where(done, 0, token)
        tokens = tokens.write(i, token)
        done = done | tf.equal(token, eos)
        out = model.decode(token[:, None], memory, source_mask, cache=cache)
        return i + 1, out["logits"][:, -1], out["cache"], done, log_prob, tokens

    def running(i, step_logits, cache, done, log_prob, tokens):
        return (i < length) & ~tf.reduce_all(done)

    invariants = tf.nest.map_structure(lambda t: tf.TensorShape([None] * (t.shape.rank - 1) + [t.shape[-1]]),
                                       step["cache"])
    _, _, _, _, log_prob, tokens = tf.while_loop(
        running, body,
        (tf.constant(0), step["logits"][:, -1], step["cache"], tf.zeros([batch], tf.bool), tf.zeros([batch]), tokens),
        shape_invariants=(tf.TensorShape([]), tf.TensorShape([None, None]), invariants, tf.TensorShape([None]),
                          tf.TensorShape([None]), tf.TensorShape(None)))
    ids = tf.transpose(tokens.stack())
    return {"ids": tf.reshape(ids, [batch, -1]), "log_prob": log_prob}


def strip_special(ids, eos_id, pad_id):
    """Python lists of the ids before the first </s> of each row (pads dropped)."""
    rows = []
    for row in ids.numpy().tolist() if hasattr(ids, "numpy") else ids:
        kept = []
        for token in row:
            if token == eos_id:
                break
            if token != pad_id:
                kept.append(int(token))
        rows.append(kept)
    return rows


class Translator:
    """Text in, text out: tokenizes with the model's SentencePiece tokenizer, appends
    </s>, decodes batches of similar length with `beam_search` (beam 1: `greedy`)
    compiled once, and detokenizes, in the input's order.

    Args:
      model: a `TranslationModel`.
      tokenizer: an `lm_tokenizer.LmTokenizer` (SentencePiece) of the model's vocab.
      beam_size, alpha, max_extra_length: the search (`beam_search`).
      max_tokens: source tokens per batch.
      log: gets a progress line every tenth of the input (None: silent).
    """

    def __init__(self, model, tokenizer, beam_size=4, alpha=0.6, max_extra_length=50, max_tokens=4096, log=None):
        self.model, self.tokenizer, self.log = model, tokenizer, log
        self.max_tokens = max_tokens
        spec = [tf.TensorSpec([None, None], tf.int32)]
        if beam_size == 1:
            search = lambda ids: greedy(model, ids, max_extra_length=max_extra_length)["ids"]  # noqa: E731
        else:
            search = lambda ids: beam_search(model, ids, beam_size=beam_size, alpha=alpha,  # noqa: E731
                                             max_extra_length=max_extra_length)["ids"]
        self._search = tf.function(search, input_signature=spec)

    def translate(self, lines):
        """The translation of each line (an empty line translates to "")."""
        config = self.model.config
        limit = config.max_position_embeddings
        encoded = [self.tokenizer.encode(line)[:limit - 1] + [config.eos_id] for line in lines]
        order = sorted(range(len(lines)), key=lambda i: len(encoded[i]))
        outputs, next_report = [None] * len(lines), max(len(lines) // 10, 1)
        for members in self._batches(order, encoded):
            batch = np.full((len(members), len(encoded[members[-1]])), config.pad_id, np.int32)
            for row, i in enumerate(members):
                batch[row, :len(encoded[i])] = encoded[i]
            for i, ids in zip(members, strip_special(self._search(batch), config.eos_id, config.pad_id)):
                outputs[i] = self.tokenizer.decode(ids) if lines[i].strip() else ""
            done = sum(o is not None for o in outputs)
            if self.log and (done >= next_report or done == len(lines)):
                self.log(f"Translated {done}/{len(lines)} sentences")
                next_report = done + max(len(lines) // 10, 1)
        return outputs

    def _batches(self, order, encoded):
        """Consecutive runs of `order` (by length) of at most max_tokens padded tokens."""
        members = []
        for i in order:
            if members and (len(members) + 1) * len(encoded[i]) > self.max_tokens:
                yield members
                members = []
            members.append(i)
        if members:
            yield members


def corpus_bleu(hypotheses, references):
    """sacreBLEU's corpus BLEU of detokenized `hypotheses` against one reference each
    (its default 13a tokenization, as WMT reports it): (score, signature)."""
    from sacrebleu.metrics import BLEU

    metric = BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return score.score, str(metric.get_signature())
