"""Text generation from a causal LM with its key/value cache: greedy, temperature, top-k
and top-p sampling, in TensorFlow ops (one `tf.while_loop`), so the same function runs
in the `generate.py` program and inside an exported SavedModel.

The token choice reuses Model Garden's top-k and top-p filters
(`official.nlp.modeling.ops.sampling_module`). Its `SamplingModule` loop is not used:
it starts every row from one token (a batch of prompts of different lengths needs a
prefilled cache and per-row masks) and draws with `tf.random.categorical`, whose
stream a request cannot seed; here prompts are left-padded with a mask and each draw is
`tf.random.stateless_categorical` with the seed a caller gives.

    ids, mask = left_pad([[5, 9, 2], [7]])
    out = generate(model, ids, mask, max_new_tokens=20, temperature=0.8, top_k=40, seed=1)
    out["ids"]   # [batch, 20] new tokens (after an `eos_id`: `pad_id`)
"""

import numpy as np
import tensorflow as tf

_SAMPLING = ("greedy: temperature 0", "temperature > 0", "top_k >= 0 (0: off)", "0 < top_p <= 1")


def check_sampling(temperature, top_k, top_p, max_new_tokens):
    """Raises UsageError for sampling options out of range (one line naming them)."""
    from realformer_tf.errors import UsageError

    problems = []
    if not temperature >= 0:
        problems.append(f"temperature={temperature} (use 0 for greedy, or > 0)")
    if top_k < 0:
        problems.append(f"top_k={top_k} (use 0 for no top-k filter, or a positive count)")
    if not 0 < top_p <= 1:
        problems.append(f"top_p={top_p} (use a value in (0, 1]; 1 keeps every token)")
    if max_new_tokens < 1:
        problems.append(f"max_new_tokens={max_new_tokens} (use 1 or more)")
    if problems:
        raise UsageError("sampling options out of range: " + "; ".join(problems))


def left_pad(sequences, pad_id=0):
    """(ids, mask) int32 [batch, longest] with each sequence at the right end (so every
    row's next token comes at the same step)."""
    longest = max(len(s) for s in sequences)
    ids = np.full((len(sequences), longest), pad_id, np.int32)
    mask = np.zeros_like(ids)
    for row, seq in enumerate(sequences):
        if len(seq):
            ids[row, longest - len(seq):] = seq
            mask[row, longest - len(seq):] = 1
    return ids, mask


def choose_tokens(logits, temperature, top_k, top_p, seed):
    """The next token of each row: argmax when `temperature` is 0, else a draw from
    softmax(logits / temperature) after the top-k and top-p filters, seeded by `seed`
    (an int32 [2] stateless seed)."""
    from official.nlp.modeling.ops import sampling_module

    logits = tf.cast(logits, tf.float32)

    def sample():
        scaled = logits / tf.maximum(temperature, 1e-6)
        scaled = tf.cond(top_k > 0, lambda: sampling_module.sample_top_k(scaled, top_k), lambda: scaled)
        scaled = tf.cond(top_p < 1.0, lambda: sampling_module.sample_top_p(scaled, top_p), lambda: scaled)
        return tf.random.stateless_categorical(scaled, 1, seed, dtype=tf.int32)[:, 0]

    return tf.cond(temperature > 0.0, sample, lambda: tf.argmax(logits, -1, output_type=tf.int32))


def generate(model, ids, mask, max_new_tokens, temperature=0.0, top_k=0, top_p=1.0, seed=0, eos_id=-1,
             pad_id=0):
    """Continues left-padded prompts `ids` [batch, length] (`mask` 1 on real tokens).

    Args:
      model: a `CausalLMModel`.
      ids, mask: int32 [batch, length] (`left_pad`); every row has a real token.
      max_new_tokens: how many tokens to add (a Python int or scalar tensor).
      temperature, top_k, top_p: see `choose_tokens` (checked by `check_sampling`).
      seed: the int seed of the draws (the same seed, the same text).
      eos_id: a row that emits it stops: its later tokens are `pad_id` (-1: none).

    Returns:
      {"ids": int32 [batch, max_new_tokens], "length": int32 [batch] (new tokens up to
      and including eos_id), "log_probs": float32 [batch] (their log-probability under
      the model's softmax at temperature 1)}.
    """
    ids, mask = tf.convert_to_tensor(ids, tf.int32), tf.convert_to_tensor(mask, tf.int32)
    temperature, top_p = tf.cast(temperature, tf.float32), tf.cast(top_p, tf.float32)
    top_k, steps = tf.cast(top_k, tf.int32), tf.cast(max_new_tokens, tf.int32)
    positions = tf.maximum(tf.cumsum(mask, axis=1) - 1, 0)
    first = model.call_with_cache({"input_ids": ids, "input_mask": mask, "position_ids": positions},
                                  model.empty_cache(tf.shape(ids)[0]))
    batch = tf.shape(ids)[0]
    state = dict(step=tf.constant(0), logits=first["logits"][:, -1], cache=first["cache"], mask=mask,
                 position=positions[:, -1] + 1, done=tf.zeros([batch], tf.bool),
                 length=tf.zeros([batch], tf.int32), log_probs=tf.zeros([batch], tf.float32),
                 tokens=tf.TensorArray(tf.int32, size=steps, element_shape=[None]))

    def step(state):
        seed_pair = tf.stack([tf.cast(seed, tf.int32), state["step"]])
        token = choose_tokens(state["logits"], temperature, top_k, top_p, seed_pair)
        token = tf.where(state["done"], pad_id, token)
        log_prob = tf.gather(tf.nn.log_softmax(state["logits"]), token, batch_dims=1)
        live = tf.logical_not(state["done"])
        mask = tf.concat([state["mask"], tf.ones([batch, 1], tf.int32)], axis=1)
        out = model.call_with_cache({"input_ids": token[:, None], "input_mask": mask,
                                     "position_ids": state["position"][:, None]}, state["cache"])
        return [dict(step=state["step"] + 1, logits=out["logits"][:, -1], cache=out["cache"], mask=mask,
                    position=state["position"] + 1, done=state["done"] | tf.equal(token, eos_id),
                    length=state["length"] + tf.cast(live, tf.int32),
                    log_probs=state["log_probs"] + tf.where(live, log_prob, 0.0),
                    tokens=state["tokens"].write(state["step"], token))]

    def keep_going(state):
        return tf.logical_and(state["step"] < steps, tf.logical_not(tf.reduce_all(state["done"])))

    invariants = tf.nest.map_structure(_loop_shape, state)
    final = tf.while_loop(keep_going, step, [state], shape_invariants=[invariants])[0]
    tokens = tf.transpose(final["tokens"].stack())  # [batch, steps taken]
    tokens = tf.pad(tokens, [[0, 0], [0, steps - tf.shape(tokens)[1]]], constant_values=pad_id)
    return {"ids": tokens, "length": final["length"], "log_probs": final["log_probs"]}


def _loop_shape(value):
    """A loop variable's shape with its growing axis (the caches' and mask's length)
    left open."""
    if isinstance(value, tf.TensorArray):
        return tf.TensorShape(None)
    shape = value.shape
    if shape.rank == 4:  # a cache: [batch, length, heads, head_dim]
        return tf.TensorShape([None, None, shape[2], shape[3]])
    return tf.TensorShape([None] * shape.rank)
