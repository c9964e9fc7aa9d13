"""`TranslationModel`: an encoder-decoder Transformer on the package's blocks.

One embedding table serves the source, the target and the output projection (no bias),
scaled by sqrt(hidden_size) and added to sinusoidal positions ("Attention Is All You
Need"'s frequencies, the sines in the first half of each vector and the cosines in the
second, positions from 0: Marian's layout) or learned ones; dropout; a `TransformerEncoder` and a `TransformerDecoder` in
the config's LayerNorm arrangement, with Admin's residual scales and each attention path's
residual attention where the config turns them on.

Admin's scales are set once, before training, by `profile_admin(batch)`: one eager
pass with dropout off in which every residual takes the running ratio of its stack
(`realformer_tf.layers.admin`).

Decoding: `encode` once, then `decode` the new target positions against its output
with a per-block key/value cache (`empty_cache`); with residual attention each block
adds the previous block's score rows of the same new positions, on both decoder paths,
so the cache holds keys and values alone.
"""

import math

import keras
import numpy as np
from keras import ops

from realformer_tf.layers.admin import AdminProfile
from realformer_tf.layers.decoder import TransformerDecoder
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.encoder import TransformerEncoder
from realformer_tf.models.shared import ConfigModel
from realformer_tf.models.translation.config import TranslationConfig


def sinusoidal_table(length, width):
    """[length, width] float32: row p is sin(p * f_i) for i < ceil(width / 2), then
    cos(p * f_i), with "Attention Is All You Need"'s f_i = 10000^(-2i / width), its sines
    and cosines each in one half (Marian's layout)."""
    half = width - width // 2
    frequencies = np.power(10000.0, -2.0 * np.arange(half) / width)
    angles = np.arange(length)[:, None] * frequencies[None, :]
    table = np.concatenate([np.sin(angles), np.cos(angles[:, :width // 2])], axis=1)
    return table.astype("float32")


@keras.saving.register_keras_serializable(package="realformer_tf")
class TranslationModel(ConfigModel, keras.Model):
    """An encoder-decoder translation model.

    Args:
      config: a `TranslationConfig` (or its dict).
      **kwargs: `keras.Model` arguments (`name`, `dtype`: e.g. "mixed_bfloat16").

    Call args:
      inputs: a dict with `source_ids` [batch, source_len] and `target_ids` [batch,
        target_len] (the decoder's input: <s> then the target shifted right), and
        optionally `source_mask`, `target_mask` (1 = a real token; default: id != pad).
      training: dropout on or off.

    Returns:
      A dict: `logits` [batch, target_len, vocab] (float32), and the carried scores of
      every block: `encoder_scores`, `decoder_self_scores`, `cross_scores`.

    Example:
    >>> import numpy as np
    >>> config = TranslationConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2,
    ...                            num_decoder_layers=2, num_attention_heads=2,
    ...                            intermediate_size=32, residual_attention=True)
    >>> model = TranslationModel(config)
    >>> source = np.array([[5, 9, 11, 3]], "int32")
    >>> target = np.array([[2, 7, 8]], "int32")
    >>> full = model({"source_ids": source, "target_ids": target})["logits"]
    >>> memory = model.encode(source)
    >>> step = model.decode(target[:, :2], memory, source != 0, cache=model.empty_cache(1))
    >>> last = model.decode(target[:, 2:], memory, source != 0, cache=step["cache"])["logits"]
    >>> bool(np.allclose(full[:, 2], last[:, 0], atol=1e-5))
    True
    """

    config_class = TranslationConfig
    serving_inputs = ("source_ids", "target_ids")

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = TranslationConfig.from_dict(config)
        kwargs.setdefault("name", "translation")
        super().__init__(**kwargs)
        self.config = config
        # fairseq's embedding initialization for a scaled embedding: N(0, hidden^-1/2).
        self.token_embeddings = keras.layers.Embedding(
            config.vocab_size, config.hidden_size, name="token_embeddings", dtype=self.dtype_policy,
            embeddings_initializer=keras.initializers.RandomNormal(stddev=config.hidden_size ** -0.5))
        self.position_embeddings = None
        if config.position_embedding == "learned":
            self.position_embeddings = keras.layers.Embedding(
                config.max_position_embeddings, config.hidden_size, name="position_embeddings",
                dtype=self.dtype_policy,
                embeddings_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range))
        self.embedding_dropout = Dropout(config.hidden_dropout_prob, dtype=self.dtype_policy)
        # fairseq's Transformer initializes every projection Glorot (Xavier) uniform; Admin's
        # profile is of that initialization (BERT's N(0, 0.02) leaves the branches near 0).
        stacks = dict(kernel_initializer="glorot_uniform", dtype=self.dtype_policy)
        self.encoder = TransformerEncoder(**config.block_options(), name="encoder", **stacks)
        self.decoder = TransformerDecoder(**config.decoder_options(), name="decoder", **stacks)

    def build(self, input_shape=None):
        """Creates every weight from the config alone."""
        hidden = (None, None, self.config.hidden_size)
        self.token_embeddings.build((None, None))
        if self.position_embeddings is not None:
            self.position_embeddings.build((None, None))
        self.encoder.build(hidden)
        self.decoder.build(hidden, hidden)
        self.built = True

    # -- the pieces ----------------------------------------------------------------------
    def _embed(self, ids, offset, training):
        x = self.token_embeddings(ids) * ops.cast(math.sqrt(self.config.hidden_size), self.compute_dtype)
        positions = ops.arange(ops.shape(ids)[1]) + offset
        if self.position_embeddings is not None:
            x = x + self.position_embeddings(positions)[None]
        else:
            table = sinusoidal_table(self.config.max_position_embeddings, self.config.hidden_size)
            x = x + ops.cast(ops.take(table, positions, axis=0), x.dtype)[None]
        return self.embedding_dropout(x, training=training)

    def _mask(self, ids, mask):
        return ops.cast(ops.not_equal(ids, self.config.pad_id) if mask is None else mask, "int32")

    def encode(self, source_ids, source_mask=None, training=False, admin_profile=None, return_scores=False):
        """The encoder's output [batch, source_len, hidden] (and its scores)."""
        self._ensure_built()
        source_ids = ops.cast(source_ids, "int32")
        out = self.encoder(self._embed(source_ids, 0, training), attention_mask=self._mask(source_ids, source_mask),
                           training=training, admin_profile=admin_profile)
        return (out["sequence_output"], out["attention_scores"]) if return_scores else out["sequence_output"]

    def decode(self, target_ids, memory, source_mask, target_mask=None, cache=None, training=False,
               admin_profile=None):
        """Logits of the target positions `target_ids` against the encoder output
        `memory`; with `cache` (from `empty_cache` or the previous step) `target_ids`
        are the new positions only and the new cache is returned too. Returns a dict:
        `logits`, `decoder_self_scores`, `cross_scores` (and `cache`)."""
        self._ensure_built()
        target_ids = ops.cast(target_ids, "int32")
        past = 0 if cache is None else ops.shape(cache[0]["key"])[1]
        self_mask = None if target_mask is None else ops.cast(target_mask, "int32")
        if self_mask is None and cache is None:
            self_mask = self._mask(target_ids, None)
        out = self.decoder(self._embed(target_ids, past, training), memory, self_attention_mask=self_mask,
                           memory_mask=ops.cast(source_mask, "int32"), training=training, cache=cache,
                           admin_profile=admin_profile)
        hidden = out["sequence_output"]
        table = ops.cast(self.token_embeddings.embeddings, hidden.dtype)
        outputs = {"logits": ops.cast(ops.matmul(hidden, ops.transpose(table)), "float32"),
                   "decoder_self_scores": out["self_attention_scores"], "cross_scores": out["cross_attention_scores"]}
        if cache is not None:
            outputs["cache"] = out["cache"]
        return outputs

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or not {"source_ids", "target_ids"} <= set(inputs):
            raise ValueError("TranslationModel takes a dict with 'source_ids' and 'target_ids' (and optional "
                             "'source_mask', 'target_mask')")
        source_mask = self._mask(ops.cast(inputs["source_ids"], "int32"), inputs.get("source_mask"))
        memory, encoder_scores = self.encode(inputs["source_ids"], source_mask, training, return_scores=True)
        outputs = self.decode(inputs["target_ids"], memory, source_mask, inputs.get("target_mask"),
                              training=training)
        return dict(outputs, encoder_scores=encoder_scores)

    def empty_cache(self, batch_size):
        """The decoder's cache before the first target token: per block, keys and
        values of length 0."""
        heads = self.config.num_attention_heads
        shape = (batch_size, 0, heads, self.config.hidden_size // heads)
        dtype = self.dtype_policy.compute_dtype
        return [{"key": ops.zeros(shape, dtype), "value": ops.zeros(shape, dtype)}
                for _ in range(self.config.num_decoder_layers)]

    def profile_admin(self, inputs):
        """Admin's profiling pass on one batch (a dict as `call` takes, eager): sets
        every residual scale of the encoder and the decoder, in order, with dropout off.
        Returns {"encoder": [...], "decoder": [...]}: (scale, Var[w x], Var[f(x)]) per
        sublayer.

        Raises:
          ValueError for a model without Admin's scales.
        """
        if not self.config.admin_residual_scale:
            raise ValueError(f"profile_admin needs admin_residual_scale in the config ({self.config.describe()})")
        source_mask = self._mask(ops.cast(inputs["source_ids"], "int32"), inputs.get("source_mask"))
        target_ids = ops.cast(inputs["target_ids"], "int32")
        target_mask = self._mask(target_ids, inputs.get("target_mask"))
        encoder_profile, decoder_profile = AdminProfile(source_mask), AdminProfile(target_mask)
        memory = self.encode(inputs["source_ids"], source_mask, admin_profile=encoder_profile)
        self.decode(target_ids, memory, source_mask, target_mask, admin_profile=decoder_profile)
        return {"encoder": encoder_profile.records, "decoder": decoder_profile.records}

    def get_embedding_table(self):
        self._ensure_built()
        return self.token_embeddings.embeddings
