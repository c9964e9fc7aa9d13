"""`CausalLMModel`: a GPT-style decoder-only language model on the package's blocks.

Token and learned position embeddings (GPT-2's: positions from 0, no embedding
LayerNorm, no scaling), dropout, a `TransformerEncoder` run with the causal mask (so
RealFormer's scores run along the causal self-attention path, NormFormer's operations
where the config turns them on, a final LayerNorm in Pre-LN), and the output projection
tied to the token embeddings (no bias, as GPT-2 and fairseq's
`--share-decoder-input-output-embed`).

Decoding keeps a key/value cache per block (`empty_cache`, `call_with_cache`): each
step feeds the new tokens only. With residual attention a block adds the previous
block's score rows of the same new positions, which the step computes anyway, so the
cache holds keys and values alone.
"""

import keras
from keras import ops

from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.encoder import TransformerEncoder
from realformer_tf.models.causal_lm.config import CausalLMConfig
from realformer_tf.models.shared import ConfigModel


@keras.saving.register_keras_serializable(package="realformer_tf")
class CausalLMModel(ConfigModel, keras.Model):
    """A causal language model.

    Args:
      config: a `CausalLMConfig` (or its dict).
      **kwargs: `keras.Model` arguments (`name`, `dtype`: e.g. "mixed_bfloat16").

    Call args:
      inputs: a dict with `input_ids` [batch, length] and optionally `input_mask`
        [batch, length] (1 = a real token) and `position_ids` [batch, length] (default
        0, 1, ...).
      training: dropout on or off.

    Returns:
      A dict: `logits` [batch, length, vocab] (float32), `hidden_states` [batch, length,
      hidden] (after the final LayerNorm, if any) and `attention_scores` (one carried
      [batch, heads, length, length] per block).

    Decoding: `call_with_cache(inputs, cache)` with `cache` from `empty_cache` or the
    previous step; `input_mask` then covers the cached and the new positions (a
    left-padded prompt masks its padding), `position_ids` default to the cache's length
    plus 0, 1, ...; it also returns the new `cache`.

    Example:
    >>> import numpy as np
    >>> config = CausalLMConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2,
    ...                         num_attention_heads=2, intermediate_size=32)
    >>> model = CausalLMModel(config)
    >>> ids = np.array([[3, 7, 9, 4]], "int32")
    >>> full = model({"input_ids": ids})["logits"]
    >>> step = model.call_with_cache({"input_ids": ids[:, :3]}, model.empty_cache(1))
    >>> last = model.call_with_cache({"input_ids": ids[:, 3:]}, step["cache"])["logits"]
    >>> bool(np.allclose(full[:, 3], last[:, 0], atol=1e-5))
    True
    """

    config_class = CausalLMConfig
    serving_inputs = ("input_ids", "input_mask")

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = CausalLMConfig.from_dict(config)
        kwargs.setdefault("name", "causal_lm")
        super().__init__(**kwargs)
        self.config = config
        embedding = dict(embeddings_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
                         dtype=self.dtype_policy)
        self.token_embeddings = keras.layers.Embedding(config.vocab_size, config.hidden_size,
                                                       name="token_embeddings", **embedding)
        self.position_embeddings = keras.layers.Embedding(config.max_position_embeddings, config.hidden_size,
                                                          name="position_embeddings", **embedding)
        self.embedding_dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)
        self.decoder = TransformerEncoder(**config.block_options(), name="decoder", dtype=self.dtype_policy)

    def build(self, input_shape=None):
        """Creates every weight from the config alone."""
        self.token_embeddings.build((None, None))
        self.position_embeddings.build((None, None))
        self.decoder.build((None, None, self.config.hidden_size))
        self.built = True

    def empty_cache(self, batch_size):
        """The cache before the first token: per block, keys and values of length 0."""
        heads = self.config.num_attention_heads
        shape = (batch_size, 0, heads, self.config.hidden_size // heads)
        dtype = self.dtype_policy.compute_dtype
        return [{"key": ops.zeros(shape, dtype), "value": ops.zeros(shape, dtype)}
                for _ in range(self.config.num_hidden_layers)]

    def call(self, inputs, training=None):
        return self._forward(inputs, training, None)

    def call_with_cache(self, inputs, cache):
        """One decoding step (inference): the logits of the new positions and the new
        cache. Called directly, not through Keras' `__call__`, whose argument handling
        is not meant for a cache that changes every step (KerasHub's decoders do the
        same)."""
        self._ensure_built()
        return self._forward(inputs, False, cache)

    def _forward(self, inputs, training, cache):
        if not isinstance(inputs, dict) or "input_ids" not in inputs:
            raise ValueError("CausalLMModel takes a dict with 'input_ids' (and optional 'input_mask', "
                             "'position_ids')")
        ids = ops.cast(inputs["input_ids"], "int32")
        positions = inputs.get("position_ids")
        if positions is None:
            past = 0 if cache is None else ops.shape(cache[0]["key"])[1]
            positions = ops.arange(ops.shape(ids)[1])[None, :] + past
        x = self.token_embeddings(ids) + self.position_embeddings(ops.cast(positions, "int32"))
        x = self.embedding_dropout(x, training=training)
        mask = inputs.get("input_mask")
        out = self.decoder(x, attention_mask=None if mask is None else ops.cast(mask, "int32"),
                           training=training, use_causal_mask=True, cache=cache)
        hidden = out["sequence_output"]
        table = ops.cast(self.token_embeddings.embeddings, hidden.dtype)
        logits = ops.cast(ops.matmul(hidden, ops.transpose(table)), "float32")
        outputs = {"logits": logits, "hidden_states": hidden, "attention_scores": out["attention_scores"]}
        if cache is not None:
            outputs["cache"] = out["cache"]
        return outputs

    def get_embedding_table(self):
        self._ensure_built()
        return self.token_embeddings.embeddings
