"""BERT-compatible models: `BertConfig`, `BertModel` and the task heads, reading and
writing original BERT / RealFormer checkpoints by name, and Hugging Face BERT folders.

    config = modeling.BertConfig.from_json_file("bert_config.json")
    model = modeling.BertModel(config)
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg})
    model.load_bert_checkpoint("bert_model.ckpt")
"""

import keras
import numpy as np
from keras import ops

from realformer_tf.models.bert import original_api as bert_compat
from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints import hf as hf_checkpoint
from realformer_tf.checkpoints.tf_checkpoint import CheckpointError  # noqa: F401  (public)
from realformer_tf.errors import ConfigError  # noqa: F401  (public)
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.layers.dropout import Dropout
from realformer_tf.layers.embeddings import BertEmbeddings
from realformer_tf.layers.encoder import TransformerEncoder
from realformer_tf.layers.heads import BertLogits, MaskedLMHead

# google-research/bert's module functions (README "Porting code from google-research/bert").
from realformer_tf.models.bert.original_api import (  # noqa: F401,E402  (public)
    assert_rank, attention_layer, create_attention_mask_from_input_mask, create_initializer,
    dropout, embedding_lookup, embedding_postprocessor, function_variables, gelu, get_activation,
    get_assignment_map_from_checkpoint, get_shape_list, layer_norm, layer_norm_and_dropout,
    realformer_model, reshape_from_matrix, reshape_to_matrix, residual_attention_layer,
    transformer_model,
)

LAYER_NORM_EPSILON = 1e-12
# Stored names whose group 1 is a layer index (checkpoint.check_config_fits).
BERT_LAYER_PATTERN = r"^bert/encoder/layer_(\d+)/"


def bert_key_shapes(config):
    """{original name: shape} of the weights that fix a BertConfig's model size (the
    word embeddings first: every BERT checkpoint holds them)."""
    h = config.hidden_size
    return {
        "bert/embeddings/word_embeddings": [config.vocab_size, h],
        "bert/embeddings/position_embeddings": [config.max_position_embeddings, h],
        "bert/embeddings/token_type_embeddings": [config.type_vocab_size, h],
        "bert/encoder/layer_0/intermediate/dense/kernel": [h, config.intermediate_size],
    }


def check_checkpoint_fits(config, prefix):
    """Raises CheckpointError when the checkpoint at `prefix` (a resolved prefix or a
    Hugging Face folder) is not of `config`'s size, before any model is built."""
    h, size = config.hidden_size, config.intermediate_size
    # A lower bound of the weights: embeddings, each layer's q/k/v/o and feed-forward.
    weights = ((config.vocab_size + config.max_position_embeddings + config.type_vocab_size) * h
               + config.num_hidden_layers * (4 * h * h + 2 * h * size))
    ckpt.check_config_fits(prefix, bert_key_shapes(config), BERT_LAYER_PATTERN,
                           config.num_hidden_layers, f"the config ({config.describe()})", weights)


def _dense_vars(prefix, dense):
    return {f"{prefix}/kernel": dense.kernel, f"{prefix}/bias": dense.bias}


def _layer_norm_vars(prefix, layer_norm):
    return {f"{prefix}/gamma": layer_norm.gamma, f"{prefix}/beta": layer_norm.beta}


def _logits_vars(prefix, logits_layer):
    return {f"{prefix}output_weights": logits_layer.output_weights,
            f"{prefix}output_bias": logits_layer.output_bias}


class _BertCheckpointIO:
    """`load_bert_checkpoint` / `save_bert_checkpoint` over a model's name map.

    Subclasses define `_checkpoint_variables(include_heads)`, `_head_prefixes`,
    `hf_architecture` (the transformers class with the same weights) and
    `_dummy_inputs()`; `_optional_prefixes` names weights the model's outputs do not use,
    which keep their values when a checkpoint lacks them.
    """

    _head_prefixes = ()
    _optional_prefixes = ()
    hf_architecture = None

    def _ensure_built(self):
        if not self.built:
            self(self._dummy_inputs(), training=False)

    def get_build_config(self):
        """Saved in `.keras` files: `build` needs nothing but the config, so loading
        rebuilds every weight before reading them (Keras would otherwise return a
        model without weights, with only a warning)."""
        return {"from_config": True}

    def build_from_config(self, build_config):
        self.build()

    def bert_checkpoint_variables(self, include_heads=True):
        """{original BERT name: variable} for every weight of the model."""
        self._ensure_built()
        return self._checkpoint_variables(include_heads)

    def load_bert_checkpoint(self, prefix, skip_heads=False):
        """Loads an original-named checkpoint (a prefix or a directory) or a Hugging Face
        BERT folder (config.json + model.safetensors; see `hf_checkpoint`).

        Optimizer slots and `global_step` are ignored, and so are heads the model does not
        have; `skip_heads=True` also leaves this model's own heads as initialized
        (fine-tuning from a pretraining checkpoint). Raises CheckpointError naming any
        missing, unexpected or mis-shaped variable.
        """
        if not self.built:  # sizes first: building a model the checkpoint does not fit could exhaust memory
            check_checkpoint_fits(self.config, ckpt.resolve_checkpoint(prefix))
        if not getattr(self.config, "residual_attention_stated", True):
            # A config file without residual_attention: the weights decide (or an error).
            from realformer_tf.checkpoints import variant_evidence
            from realformer_tf.families import get_family

            variant_evidence.check_loaded_model(self, get_family("bert"), ckpt.resolve_checkpoint(prefix))
        owned = ("bert/",) + (() if skip_heads else tuple(self._head_prefixes))
        optional = tuple(self._optional_prefixes)
        if hf_checkpoint.is_hf_folder(prefix):
            # transformers' BertForMaskedLM / BertForQuestionAnswering save no pooler and
            # initialize a fresh one when a task needs it; so do we (with a log line).
            optional += ("bert/pooler/",)
        return ckpt.load_named_variables(
            prefix, self.bert_checkpoint_variables(include_heads=not skip_heads), owned,
            description=f"{type(self).__name__} ({self.config.describe()})",
            optional_prefixes=optional,
        )

    def save_bert_checkpoint(self, prefix):
        """Writes every weight under its original BERT name (a TF1 name-based checkpoint)."""
        return ckpt.save_named_variables(prefix, self.bert_checkpoint_variables())

    def save_hf_folder(self, folder, allow_variant=False):
        """Writes a Hugging Face folder (config.json + model.safetensors) that
        `transformers.<hf_architecture>.from_pretrained` reads; variants stock
        transformers cannot compute are refused unless `allow_variant` (see
        `hf_checkpoint.save_hf_folder`)."""
        return hf_checkpoint.save_hf_folder(self, folder, allow_variant=allow_variant)


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertModel(bert_compat.OriginalBertModelApi, _BertCheckpointIO, keras.Model):
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

    hf_architecture = "BertModel"

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
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            name="embeddings",
            dtype=self.dtype_policy,
        )
        self.encoder = TransformerEncoder(
            **config.block_options(LAYER_NORM_EPSILON),
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
        bert_compat.register_model(self)
        if original is not None:
            self._init_original(original)

    def _dummy_inputs(self):
        return {"input_ids": np.zeros([1, 2], np.int32)}

    def build(self, input_shape=None):
        """Creates every weight from the config alone (no input needed), so `fit` on
        an unbuilt model works on every backend without tracing the call."""
        hidden = self.config.hidden_size
        self.embeddings.build((None, None))
        self.encoder.build((None, None, hidden))
        self.pooler.build((None, hidden))
        self.built = True

    def call(self, inputs, training=None):
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
        encoded = self.encoder(x, attention_mask=input_mask, training=training)
        pooled = self.pooler(encoded["sequence_output"][:, 0])
        return dict(encoded, pooled_output=pooled)

    def get_embedding_table(self):
        self._ensure_built()
        return self.embeddings.word_embeddings

    def _checkpoint_variables(self, include_heads=True):
        emb = self.embeddings
        names = {
            "bert/embeddings/word_embeddings": emb.word_embeddings,
            "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
            "bert/embeddings/position_embeddings": emb.position_embeddings,
            **_layer_norm_vars("bert/embeddings/LayerNorm", emb.layer_norm),
        }
        for i, block in enumerate(self.encoder.blocks):
            names.update(_block_checkpoint_variables(f"bert/encoder/layer_{i}", block))
        if self.encoder.final_layer_norm is not None:
            names.update(_layer_norm_vars("bert/encoder/LayerNorm", self.encoder.final_layer_norm))
        names.update(_dense_vars("bert/pooler/dense", self.pooler))
        return names

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(BertConfig.from_dict(config["config"]), name=config.get("name", "bert"))


def _block_checkpoint_variables(prefix, block):
    att = block.attention
    names = {
        **_dense_vars(f"{prefix}/attention/self/query", att.query_dense),
        **_dense_vars(f"{prefix}/attention/self/key", att.key_dense),
        **_dense_vars(f"{prefix}/attention/self/value", att.value_dense),
        **_dense_vars(f"{prefix}/attention/output/dense", att.output_dense),
        **_layer_norm_vars(f"{prefix}/attention/output/LayerNorm", block.attention_layer_norm),
        **_dense_vars(f"{prefix}/intermediate/dense", block.intermediate_dense),
        **_dense_vars(f"{prefix}/output/dense", block.output_dense),
        **_layer_norm_vars(f"{prefix}/output/LayerNorm", block.output_layer_norm),
    }
    if block.normformer:
        names[f"{prefix}/attention/output/head_scale"] = att.head_scale
        names.update(_layer_norm_vars(f"{prefix}/attention/post_LayerNorm", block.attention_post_layer_norm))
        names.update(_layer_norm_vars(f"{prefix}/intermediate/LayerNorm", block.intermediate_layer_norm))
    if block.use_residual_scale:
        names[f"{prefix}/output/residual_scale"] = block.residual_scale
    return names


class _BertWithHead(_BertCheckpointIO, keras.Model):
    """A `BertModel` (attribute `bert`) plus task heads."""

    def __init__(self, config, **kwargs):
        if isinstance(config, dict):
            config = BertConfig.from_dict(config)
        super().__init__(**kwargs)
        self.config = config
        self.bert = BertModel(config, name="bert", dtype=self.dtype_policy)
        bert_compat.register_model(self)

    def _dummy_inputs(self):
        return {"input_ids": np.zeros([1, 2], np.int32)}

    def build(self, input_shape=None):
        """Builds the encoder and the heads (`_build_heads(hidden)`) from the config."""
        self.bert.build()
        self._build_heads(self.config.hidden_size)
        self.built = True

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(BertConfig.from_dict(config["config"]), name=config.get("name"))


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertPretrainingModel(_BertWithHead):
    """BERT with the masked-LM (`cls/predictions`) and next-sentence
    (`cls/seq_relationship`) heads. Extra input: `masked_lm_positions` [B, P].
    Extra outputs: `masked_lm_logits` [B, P, vocab], `next_sentence_logits` [B, 2]."""

    _head_prefixes = ("cls/",)
    hf_architecture = "BertForPreTraining"

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "bert_pretraining")
        super().__init__(config, **kwargs)
        cfg = self.config
        self.masked_lm = MaskedLMHead(
            cfg.vocab_size, hidden_act=cfg.hidden_act, initializer_range=cfg.initializer_range,
            layer_norm_epsilon=LAYER_NORM_EPSILON, name="predictions", dtype=self.dtype_policy,
        )
        self.next_sentence = BertLogits(
            2, initializer_range=cfg.initializer_range, name="seq_relationship",
            dtype=self.dtype_policy,
        )

    def _dummy_inputs(self):
        return {"input_ids": np.zeros([1, 2], np.int32), "masked_lm_positions": np.zeros([1, 1], np.int32)}

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

    def _checkpoint_variables(self, include_heads=True):
        names = self.bert._checkpoint_variables()
        if include_heads:
            mlm = self.masked_lm
            names.update(_dense_vars("cls/predictions/transform/dense", mlm.transform_dense))
            names.update(_layer_norm_vars("cls/predictions/transform/LayerNorm", mlm.transform_layer_norm))
            names["cls/predictions/output_bias"] = mlm.output_bias
            names.update(_logits_vars("cls/seq_relationship/", self.next_sentence))
        return names


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertClassifierModel(_BertWithHead):
    """BERT + dropout + `output_weights`/`output_bias` on the pooled output (the original
    run_classifier names). Output: `logits` [B, num_labels] (float32)."""

    _head_prefixes = ("output_weights", "output_bias")
    hf_architecture = "BertForSequenceClassification"

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
        outputs = self.bert(inputs, training=training)
        pooled = self.dropout(outputs["pooled_output"], training=training)
        return {"logits": self.classifier(pooled), "pooled_output": outputs["pooled_output"]}

    def _checkpoint_variables(self, include_heads=True):
        names = self.bert._checkpoint_variables()
        if include_heads:
            names.update(_logits_vars("", self.classifier))
        return names

    def get_config(self):
        return dict(super().get_config(), num_labels=self.num_labels)

    @classmethod
    def from_config(cls, config):
        return cls(BertConfig.from_dict(config["config"]), config["num_labels"], name=config.get("name"))


@keras.saving.register_keras_serializable(package="realformer_tf")
class BertSquadModel(_BertWithHead):
    """BERT + `cls/squad/output_weights` [2, hidden] on every token.
    Outputs: `start_logits`, `end_logits` [B, L] (float32)."""

    _head_prefixes = ("cls/squad/",)
    # The span head reads the sequence output only; transformers'
    # BertForQuestionAnswering has no pooler at all.
    _optional_prefixes = ("bert/pooler/",)
    hf_architecture = "BertForQuestionAnswering"

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "bert_squad")
        super().__init__(config, **kwargs)
        self.span = BertLogits(2, initializer_range=self.config.initializer_range, name="squad",
                               dtype=self.dtype_policy)

    def _build_heads(self, hidden):
        self.span.build((None, None, hidden))

    def call(self, inputs, training=None):
        outputs = self.bert(inputs, training=training)
        logits = self.span(outputs["sequence_output"])
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def _checkpoint_variables(self, include_heads=True):
        names = self.bert._checkpoint_variables()
        if include_heads:
            names.update(_logits_vars("cls/squad/", self.span))
        return names
