"""BERT-compatible models: `BertModel` and the task heads, built from a `BertConfig`.

    config = modeling.BertConfig.from_json_file("bert_config.json")
    model = modeling.BertModel(config)
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})

Checkpoints (the original BERT variable names, Hugging Face folders) are read and
written beside the models, in `realformer_tf.checkpoints.bert` and `.hf`:
`bert_checkpoint.load_bert_checkpoint(model, "bert_model.ckpt")`.
"""

import keras
from keras import ops

from realformer_tf.models.bert import original_api as bert_compat
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.embeddings import BertEmbeddings
from realformer_tf.layers.encoder import TransformerEncoder
from realformer_tf.layers.heads import BertLogits, MaskedLMHead
from realformer_tf.models.shared import ConfigModel, SpanHead




@keras.saving.register_keras_serializable(package="realformer_tf")
class BertModel(bert_compat.OriginalBertModelApi, ConfigModel, keras.Model):
    """The BERT / RealFormer / NormFormer encoder with BERT's outputs.

    Inputs: dict with `input_ids` [B, L] and optional `input_mask` (default all ones) and
    `segment_ids` (default zeros). Outputs: dict with `sequence_output` [B, L, H],
    `pooled_output` [B, H], `encoder_outputs` (one [B, L, H] per layer) and
    `attention_scores` (one carried [B, heads, L, L] score tensor per layer).

    Also constructible as in google-research/bert: `BertModel(config=config,
    is_training=False, input_ids=ids, input_mask=mask, token_type_ids=types)` builds the
    weights, and `get_pooled_output()`, `get_sequence_output()`,
    `get_all_encoder_layers()`, `get_embedding_output()` run it on those inputs with
    the weights of that moment (`is_training=False`: dropout 0, as the original);
    see `bert_compat.OriginalBertModelApi`.
    """

    config_class = BertConfig
    serving_inputs = ("input_ids", "input_mask", "segment_ids")

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        config, original = self._split_original_kwargs(config, kwargs)
        kwargs.setdefault("name", "bert")
        super().__init__(**kwargs)
        self.config = config
        self.embeddings = BertEmbeddings(
            vocab_size=config.vocab_size,
            hidden_size=config.hidden_size,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            hidden_dropout=config.hidden_dropout_prob,
            initializer_range=config.initializer_range,
            layer_norm_epsilon=config.layer_norm_eps,
            name="embeddings",
            dtype=self.dtype_policy,
        )
        self.encoder = TransformerEncoder(
            **config.block_options(),
            name="encoder",
            dtype=self.dtype_policy,
        )
        self.pooler = keras.layers.Dense(
            config.hidden_size,
            activation="tanh",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=config.initializer_range),
            name="pooler",
            dtype=self.dtype_policy,
        )
        if original is not None:
            self._init_original(original)

    def build(self, input_shape=None):
        """Creates every weight from the config alone (no input needed), so `fit` on
        an unbuilt model works on every backend without tracing the call."""
        hidden = self.config.hidden_size
        self.embeddings.build((None, None))
        self.encoder.build((None, None, hidden))
        self.pooler.build((None, hidden))
        self.built = True

    def call(self, inputs, training=None, output_range=None):
        """`output_range`: as `TransformerEncoder`'s (the last layer computes only the
        first positions; `sequence_output` then has that many)."""
        if not isinstance(inputs, dict) or "input_ids" not in inputs:
            raise ValueError(
                "BertModel takes a dict with 'input_ids' and optional 'input_mask', 'segment_ids'"
            )
        input_ids = inputs["input_ids"]
        input_mask = inputs.get("input_mask")
        if input_mask is None:
            input_mask = ops.ones_like(input_ids, "int32")
        segment_ids = inputs.get("segment_ids")

        x = self.embeddings(input_ids, segment_ids, training=training)
        encoded = self.encoder(x, attention_mask=input_mask, training=training, output_range=output_range)
        pooled = self.pooler(encoded["sequence_output"][:, 0])
        return dict(encoded, pooled_output=pooled)

    def get_embedding_table(self):
        self._ensure_built()
        return self.embeddings.word_embeddings



class _BertWithHead(ConfigModel, keras.Model):
    """A `BertModel` (attribute `bert`) plus task heads."""

    config_class = BertConfig
    serving_inputs = ("input_ids", "input_mask", "segment_ids")

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        super().__init__(**kwargs)
        self.config = config
        self.bert = BertModel(config, name="bert", dtype=self.dtype_policy)

    def build(self, input_shape=None):
        """Builds the encoder and the heads (`_build_heads(hidden)`) from the config."""
        self.bert.build()
        self._build_heads(self.config.hidden_size)
        self.built = True



@keras.saving.register_keras_serializable(package="realformer_tf")
class BertPretrainingModel(_BertWithHead):
    """BERT with the masked-LM (`cls/predictions`) and next-sentence
    (`cls/seq_relationship`) heads. Extra input: `masked_lm_positions` [B, P].
    Extra outputs: `masked_lm_logits` [B, P, vocab], `next_sentence_logits` [B, 2]."""

    serving_inputs = _BertWithHead.serving_inputs + ("masked_lm_positions",)

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "bert_pretraining")
        super().__init__(config, **kwargs)
        cfg = self.config
        self.masked_lm = MaskedLMHead(
            cfg.vocab_size, hidden_act=cfg.hidden_act, initializer_range=cfg.initializer_range,
            layer_norm_epsilon=self.config.layer_norm_eps, name="predictions", dtype=self.dtype_policy,
        )
        self.next_sentence = BertLogits(
            2, initializer_range=cfg.initializer_range, name="seq_relationship",
            dtype=self.dtype_policy,
        )

    def _build_heads(self, hidden):
        self.masked_lm.build((None, None, hidden))
        self.next_sentence.build((None, hidden))

    def call(self, inputs, training=None):
        outputs = self.bert(inputs, training=training)
        outputs["masked_lm_logits"] = self.masked_lm(
            outputs["sequence_output"], inputs["masked_lm_positions"], self.bert.get_embedding_table()
        )
        outputs["next_sentence_logits"] = self.next_sentence(outputs["pooled_output"])
        return outputs


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertClassifierModel(_BertWithHead):
    """BERT + dropout + `output_weights`/`output_bias` on the pooled output (the original
    run_classifier names). Output: `logits` [B, num_labels] (float32)."""

    def __init__(self, config, num_labels, **kwargs):
        kwargs.setdefault("name", "bert_classifier")
        super().__init__(config, **kwargs)
        self.num_labels = int(num_labels)
        self.dropout = Dropout(self.config.hidden_dropout_prob, dtype=self.dtype_policy)
        self.classifier = BertLogits(
            self.num_labels, initializer_range=self.config.initializer_range, name="classifier",
            dtype=self.dtype_policy,
        )

    def _build_heads(self, hidden):
        self.classifier.build((None, hidden))

    def call(self, inputs, training=None):
        # Only [CLS] reaches the head, so at inference the last layer computes it alone
        # (same logits, ~1/num_layers less work). Training keeps the full last layer:
        # the same dropout draws as the BertModel it fine-tunes.
        outputs = self.bert(inputs, training=training, output_range=None if training else 1)
        pooled = self.dropout(outputs["pooled_output"], training=training)
        return {"logits": self.classifier(pooled), "pooled_output": outputs["pooled_output"]}

    def get_config(self):
        return dict(super().get_config(), num_labels=self.num_labels)


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertSquadModel(SpanHead, _BertWithHead):
    """BERT + `cls/squad/output_weights` [2, hidden] on every token.
    Outputs: `start_logits`, `end_logits` [B, L] (float32)."""

    encoder_attribute, sequence_output_key = "bert", "sequence_output"

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "bert_squad")
        super().__init__(config, **kwargs)
        self._add_span_head()
