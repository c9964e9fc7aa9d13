"""ETC (Extended Transformer Construction) with RealFormer residual attention.

    config = etc_modeling.EtcConfig(vocab_size=30522, local_radius=84)
    model = etc_modeling.EtcModel(config)
    features = etc_inputs.features_for_config(config, long_token_ids, global_seq_len=64,
                                              sentence_ids=sentence_ids)
    out = model(features)
    out["long_output"], out["global_output"]    # [B, L, H], [B, G, H]
    out["long_scores"], out["global_scores"]    # lists, one carried score tensor per layer

Each attention type has its own residual score path (the long side's fused l2l+l2g
logits and the global side's fused g2g+g2l logits), both pre-mask running sums; see
`realformer_tf/layers/etc/blocked.py` for the layouts. Checkpoints (our names and the
official etcmodel ones) are read and written beside the models, in
`realformer_tf.checkpoints.etc_official`.
"""

import keras
import tensorflow as tf

from realformer_tf.errors import ConfigError  # noqa: F401  (public here)
from realformer_tf.models.etc.config import LAYOUTS, EtcConfig  # noqa: F401  (public here)
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.etc import (
    SIDE_INPUT_NAMES,
    GlobalLocalBlock,
    GlobalLocalEncoder,
)
from realformer_tf.layers.heads import BertLogits, MaskedLMHead
from realformer_tf.models.config import DEFAULT_LAYER_NORM_EPS
from realformer_tf.models.shared import ConfigModel, SpanHead


# ----------------------------------------------------------------------------- layers
@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcEmbeddings(keras.layers.Layer):
    """Token (+ segment, + optional absolute position) embeddings for the long and the
    global input: one token and one segment table for both sides (ETC), a LayerNorm per
    side, dropout. Call: `emb(long_ids, global_ids, long_type_ids, global_type_ids)`.

    Args:
        embedding_size: token table width; when it differs from hidden_size, lookups
            are projected to hidden_size by a Dense (`embedding_projection`), as the
            official EmbeddingLookup does.
        separate_position_tables: a position table per side (`position_embeddings` for
            the long input, `global_position_embeddings`), as the official model has;
            False shares `position_embeddings` between the sides.
    """

    def __init__(self, vocab_size, hidden_size, segment_vocab_size=16,
                 max_absolute_position_embeddings=0, hidden_dropout=0.1, initializer_range=0.02,
                 layer_norm_epsilon=DEFAULT_LAYER_NORM_EPS, embedding_size=None,
                 separate_position_tables=False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.embedding_size = int(embedding_size or hidden_size)
        self.separate_position_tables = bool(separate_position_tables)
        self.segment_vocab_size = int(segment_vocab_size)
        self.max_absolute_position_embeddings = int(max_absolute_position_embeddings)
        self.hidden_dropout = float(hidden_dropout)
        self.initializer_range = float(initializer_range)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.long_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="long_layer_norm", dtype=self.dtype_policy)
        self.global_layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="global_layer_norm", dtype=self.dtype_policy)
        self.dropout = Dropout(self.hidden_dropout, dtype=self.dtype_policy)
        self.embedding_projection = None
        if self.embedding_size != self.hidden_size:
            self.embedding_projection = keras.layers.Dense(
                self.hidden_size, name="embedding_projection", dtype=self.dtype_policy,
                kernel_initializer=keras.initializers.TruncatedNormal(stddev=self.embedding_size ** -0.5))

    def build(self, long_ids_shape=None, global_ids_shape=None):
        init = lambda: keras.initializers.TruncatedNormal(stddev=self.initializer_range)  # noqa: E731
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.embedding_size), initializer=init())
        if self.embedding_projection is not None:
            self.embedding_projection.build((None, None, self.embedding_size))
        self.segment_embeddings = self.add_weight(
            name="segment_embeddings", shape=(self.segment_vocab_size, self.hidden_size),
            initializer=init())
        if self.max_absolute_position_embeddings:
            shape = (self.max_absolute_position_embeddings, self.hidden_size)
            self.position_embeddings = self.add_weight(
                name="position_embeddings", shape=shape, initializer=init())
            if self.separate_position_tables:
                self.global_position_embeddings = self.add_weight(
                    name="global_position_embeddings", shape=shape, initializer=init())
        self.long_layer_norm.build((None, None, self.hidden_size))
        self.global_layer_norm.build((None, None, self.hidden_size))
        super().build(long_ids_shape)

    def _embed(self, ids, type_ids, side, training):
        x = tf.gather(self.word_embeddings, ids)
        if self.embedding_projection is not None:
            x = self.embedding_projection(x)
        x += tf.gather(self.segment_embeddings, type_ids)
        if self.max_absolute_position_embeddings:
            table = self.position_embeddings
            if side == "global" and self.separate_position_tables:
                table = self.global_position_embeddings
            x += table[None, : tf.shape(ids)[1], :]
        layer_norm = self.long_layer_norm if side == "long" else self.global_layer_norm
        return self.dropout(layer_norm(x), training=training)

    def call(self, long_ids, global_ids, long_type_ids=None, global_type_ids=None, training=None):
        if long_type_ids is None:
            long_type_ids = tf.zeros_like(long_ids)
        if global_type_ids is None:
            global_type_ids = tf.zeros_like(global_ids)
        return (self._embed(long_ids, long_type_ids, "long", training),
                self._embed(global_ids, global_type_ids, "global", training))

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            segment_vocab_size=self.segment_vocab_size,
            max_absolute_position_embeddings=self.max_absolute_position_embeddings,
            hidden_dropout=self.hidden_dropout, initializer_range=self.initializer_range,
            layer_norm_epsilon=self.layer_norm_epsilon, embedding_size=self.embedding_size,
            separate_position_tables=self.separate_position_tables)
        return config


@keras.saving.register_keras_serializable(package="realformer_tf")
class PreActivationBlockStack(keras.layers.Layer):
    """`GlobalLocalBlock`s in sequence without a final LayerNorm: the official ETC
    pre-activation order ends with the last block's residual sum (GlobalLocalEncoder
    adds a LayerNorm per side there). Same call and outputs as GlobalLocalEncoder, same
    weight names for the blocks (`layer_N`).

    Args:
        num_layers: number of blocks.
        **block_config: GlobalLocalBlock arguments (also `name`, `dtype`).
    """

    def __init__(self, num_layers, name=None, dtype=None, trainable=True, **block_config):
        super().__init__(name=name, dtype=dtype, trainable=trainable)
        self.num_layers = int(num_layers)
        self.block_config = dict(block_config)
        self.blocks = [GlobalLocalBlock(layer_index=i, name=f"layer_{i}", dtype=self.dtype_policy,
                                        **self.block_config) for i in range(self.num_layers)]

    def build(self, long_input_shape, global_input_shape=None):
        for block in self.blocks:
            block.build(long_input_shape, global_input_shape or long_input_shape)
        super().build(long_input_shape)

    def call(self, long_input, global_input, side_inputs=None, training=None):
        outputs = {key: [] for key in ("long_encoder_outputs", "global_encoder_outputs",
                                       "long_scores", "global_scores")}
        x_long, x_global, s_long, s_global = long_input, global_input, None, None
        for block in self.blocks:
            x_long, x_global, s_long, s_global = block(
                x_long, x_global, side_inputs=side_inputs, prev_long_scores=s_long,
                prev_global_scores=s_global, training=training)
            for key, value in zip(outputs, (x_long, x_global, s_long, s_global)):
                outputs[key].append(value)
        return dict(outputs, long_output=x_long, global_output=x_global)

    def get_config(self):
        config = super().get_config()
        config.update(num_layers=self.num_layers, **self.block_config)
        return config


# ----------------------------------------------------------------------------- models
def _as_config(config):
    return EtcConfig.from_dict(config) if isinstance(config, dict) else config



@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcModel(ConfigModel, keras.Model):
    """The ETC encoder (global-local attention) with RealFormer residual scores.

    Inputs: dict with `long_token_ids` [B, L] and `global_token_ids` [B, G] (0 = padding),
    optional `long_token_type_ids` / `global_token_type_ids` (default 0) and any of the
    side inputs (`realformer_tf.models.etc.inputs.make_side_inputs`). A missing mask is
    derived from padding (token id 0): keys that are padding are masked; extra keys
    (e.g. `long_input_mask`, `sentence_ids`) are ignored.

    Outputs: dict with `long_output` [B, L, H], `global_output` [B, G, H],
    `long_encoder_outputs` / `global_encoder_outputs` (one per layer), `long_scores` and
    `global_scores` (lists, one carried score tensor per layer; layouts in
    `realformer_tf.layers.etc.blocked`).
    """

    config_class = EtcConfig
    serving_inputs = ("long_token_ids", "global_token_ids")

    def __init__(self, config, **kwargs):
        config = _as_config(config)
        kwargs.setdefault("name", "etc")
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = EtcEmbeddings(
            vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            segment_vocab_size=config.segment_vocab_size,
            max_absolute_position_embeddings=config.max_absolute_position_embeddings,
            hidden_dropout=config.hidden_dropout_prob, initializer_range=config.initializer_range,
            embedding_size=config.embedding_size, separate_position_tables=config.official,
            layer_norm_epsilon=config.layer_norm_eps, name="embeddings", dtype=self.dtype_policy)
        options = config.block_options()
        options.update(
            local_radius=config.local_radius,
            relative_pos_max_distance=config.relative_pos_max_distance,
            relative_vocab_size=config.relative_vocab_size,
            share_feed_forward_params=config.share_feed_forward_params,
            share_kv_projections=config.share_kv_projections,
            share_qkv_projections=config.share_qkv_projections,
            share_att_output_projection=config.share_att_output_projection)
        if config.official and config.layer_norm_type != "post":
            self.encoder = PreActivationBlockStack(name="encoder", dtype=self.dtype_policy, **options)
        else:
            self.encoder = GlobalLocalEncoder(**options, name="encoder", dtype=self.dtype_policy)

    def build(self, input_shape=None):
        # Explicit shapes: Keras would otherwise trace the whole call symbolically.
        hidden = self.config.hidden_size
        self.embeddings.build()
        self.encoder.build((None, None, hidden), (None, None, hidden))
        super().build(input_shape)

    def get_embedding_table(self):
        self._ensure_built()
        return self.embeddings.word_embeddings

    def _check_length(self, long_ids):
        limit = self.config.max_absolute_position_embeddings
        if not limit:
            return
        static_len = long_ids.shape[1]
        if static_len is not None and static_len > limit:
            raise ValueError(
                f"long input length {static_len} exceeds max_absolute_position_embeddings={limit}")
        if static_len is None:
            tf.debugging.assert_less_equal(
                tf.shape(long_ids)[1], limit,
                message=f"long input length exceeds max_absolute_position_embeddings={limit}")

    def call(self, inputs, training=None):
        if not isinstance(inputs, dict) or "long_token_ids" not in inputs or "global_token_ids" not in inputs:
            raise ValueError(
                "EtcModel takes a dict with 'long_token_ids' and 'global_token_ids' (and optional "
                "token type ids and side inputs; see realformer_tf.models.etc.inputs)")
        long_ids = tf.cast(inputs["long_token_ids"], tf.int32)
        global_ids = tf.cast(inputs["global_token_ids"], tf.int32)
        self._check_length(long_ids)

        def optional_int(name):
            value = inputs.get(name)
            return None if value is None else tf.cast(value, tf.int32)

        long_types = optional_int("long_token_type_ids")
        if long_types is None and self.config.official:
            long_types = tf.ones_like(long_ids)  # the official default: long segment 1
        x_long, x_global = self.embeddings(
            long_ids, global_ids, long_types, optional_int("global_token_type_ids"), training=training)
        side = {name: optional_int(name) for name in SIDE_INPUT_NAMES if inputs.get(name) is not None}
        if not self.config.official:  # the official model masks nothing unless told
            side = self._padding_masks(side, long_ids, global_ids)
        return self.encoder(x_long, x_global, side_inputs=side, training=training)

    @staticmethod
    def _padding_masks(side, long_ids, global_ids):
        """Masks not given are derived from padding (token id 0) on the key side."""
        long_real = tf.cast(tf.not_equal(long_ids, 0), tf.int32)
        global_real = tf.cast(tf.not_equal(global_ids, 0), tf.int32)
        batch, long_len, global_len = tf.shape(long_ids)[0], tf.shape(long_ids)[1], tf.shape(global_ids)[1]
        side.setdefault("l2l_att_mask", long_real)           # [B, L] key padding
        side.setdefault("g2g_att_mask", global_real)         # [B, G] key padding
        if "l2g_att_mask" not in side:
            side["l2g_att_mask"] = tf.broadcast_to(global_real[:, None, :], [batch, long_len, global_len])
        if "g2l_att_mask" not in side:
            side["g2l_att_mask"] = tf.broadcast_to(long_real[:, None, :], [batch, global_len, long_len])
        return side



class _EtcWithHead(ConfigModel, keras.Model):
    config_class = EtcConfig
    serving_inputs = ("long_token_ids", "global_token_ids")

    def __init__(self, config, **kwargs):
        config = _as_config(config)
        super().__init__(**kwargs)
        self.config = config
        self.etc = EtcModel(config, name="etc", dtype=self.dtype_policy)

    def build(self, input_shape=None):
        self.etc.build()
        self._build_heads(self.config.hidden_size)
        super().build(input_shape)



@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcPretrainingModel(_EtcWithHead):
    """ETC + a masked-LM head on the long output (weights tied to the token embeddings)
    and, with `next_sentence_head` (default), BERT's next-sentence head on the first
    global token (so BERT pretraining records train it unchanged).
    Extra input: `masked_lm_positions` [B, P] (long positions). Extra outputs:
    `masked_lm_logits` [B, P, vocab], `next_sentence_logits` [B, 2] (float32)."""

    serving_inputs = _EtcWithHead.serving_inputs + ("masked_lm_positions",)

    def __init__(self, config, next_sentence_head=True, **kwargs):
        kwargs.setdefault("name", "etc_pretraining")
        super().__init__(config, **kwargs)
        cfg = self.config
        if cfg.factorized_embedding:
            raise ConfigError(
                f"EtcPretrainingModel ties its masked-LM head to the token embeddings, which are "
                f"{cfg.embedding_size} wide (embedding_size) against hidden_size {cfg.hidden_size}; "
                "fine-tune with EtcClassifierModel / EtcModel, or use embedding_size = hidden_size")
        self.next_sentence_head = bool(next_sentence_head)
        self.masked_lm = MaskedLMHead(
            cfg.vocab_size, hidden_act=cfg.hidden_act, initializer_range=cfg.initializer_range,
            layer_norm_epsilon=cfg.layer_norm_eps, name="predictions", dtype=self.dtype_policy)
        self.next_sentence = None
        if self.next_sentence_head:
            self.next_sentence = BertLogits(2, initializer_range=cfg.initializer_range,
                                            name="seq_relationship", dtype=self.dtype_policy)

    def _build_heads(self, hidden):
        self.masked_lm.build((None, None, hidden))
        if self.next_sentence is not None:
            self.next_sentence.build((None, hidden))

    def call(self, inputs, training=None):
        outputs = dict(self.etc(inputs, training=training))
        outputs["masked_lm_logits"] = self.masked_lm(
            outputs["long_output"], inputs["masked_lm_positions"], self.etc.get_embedding_table())
        if self.next_sentence is not None:
            outputs["next_sentence_logits"] = self.next_sentence(outputs["global_output"][:, 0])
        return outputs

    def get_config(self):
        return dict(super().get_config(), next_sentence_head=self.next_sentence_head)


@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcClassifierModel(_EtcWithHead):
    """ETC + classifier on the first global token (ETC's choice for long documents):
    tanh pooler, dropout, `BertLogits`. Output: `logits` [B, num_labels] (float32)."""

    def __init__(self, config, num_labels, **kwargs):
        kwargs.setdefault("name", "etc_classifier")
        super().__init__(config, **kwargs)
        self.num_labels = int(num_labels)
        cfg = self.config
        self.pooler = keras.layers.Dense(
            cfg.hidden_size, activation="tanh",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=cfg.initializer_range),
            name="pooler", dtype=self.dtype_policy)
        self.dropout = Dropout(cfg.hidden_dropout_prob, dtype=self.dtype_policy)
        self.classifier = BertLogits(self.num_labels, initializer_range=cfg.initializer_range,
                                     name="classifier", dtype=self.dtype_policy)

    def _build_heads(self, hidden):
        self.pooler.build((None, hidden))
        self.classifier.build((None, hidden))

    def call(self, inputs, training=None):
        outputs = self.etc(inputs, training=training)
        pooled = self.pooler(outputs["global_output"][:, 0])
        logits = self.classifier(self.dropout(pooled, training=training))
        return {"logits": logits, "pooled_output": pooled}

    def get_config(self):
        return dict(super().get_config(), num_labels=self.num_labels)


@keras.saving.register_keras_serializable(package="realformer_tf")
class EtcSquadModel(SpanHead, _EtcWithHead):
    """ETC + span logits on every long token (BERT's SQuAD head, `squad/output_weights`
    [2, hidden]): the whole context is one long input, so a question over a document of
    thousands of tokens needs no doc_stride windows. Outputs: `start_logits`,
    `end_logits` [B, L] (float32)."""

    encoder_attribute, sequence_output_key = "etc", "long_output"

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "etc_squad")
        super().__init__(config, **kwargs)
        self._add_span_head()
