"""The Hugging Face `config.json` dialect of BERT, both ways: which settings this package
computes, their translation to and from `BertConfig`, and which configs may be
exported for stock `transformers` (the export policy); variants get model_type
"realformer_bert" and an auto_map naming the remote code written beside them.

    config = hf.config_from_hf_dict(json.load(open("folder/config.json")))
    values = hf.config_to_hf_dict(config, "BertForSequenceClassification")
"""

import os

from absl import logging

from realformer_tf.errors import ConfigError, VariantExportError
from realformer_tf.fileio import gfile
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.models.config import read_json_file

CONFIG_NAME = "config.json"
# model_type of the folders `save_hf_folder(..., allow_variant=True)` writes for
# variants stock transformers cannot compute: a type transformers does not know, so
# that its own BERT never loads them (it would compute plain BERT). The folder carries
# the PyTorch code that computes them (`remote_code/`), named by config.json's auto_map:
# transformers runs it with trust_remote_code=True.
VARIANT_MODEL_TYPE = "realformer_bert"
VARIANT_ARCHITECTURE_PREFIX = "RealFormerTf"
WEIGHTS_NAME = "model.safetensors"
# The remote code's files (package data, copied into variant folders; never imported by
# this package, which does not depend on torch) and the class each Auto class loads.
REMOTE_CODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "remote_code")
REMOTE_CODE_FILES = ("configuration_realformer_bert.py", "modeling_realformer_bert.py")
VARIANT_AUTO_MAP = {
    "AutoConfig": "configuration_realformer_bert.RealFormerTfBertConfig",
    "AutoModel": "modeling_realformer_bert.RealFormerTfBertModel",
    "AutoModelForPreTraining": "modeling_realformer_bert.RealFormerTfBertForPreTraining",
    "AutoModelForMaskedLM": "modeling_realformer_bert.RealFormerTfBertForMaskedLM",
    "AutoModelForSequenceClassification": "modeling_realformer_bert.RealFormerTfBertForSequenceClassification",
    "AutoModelForQuestionAnswering": "modeling_realformer_bert.RealFormerTfBertForQuestionAnswering",
}

# hidden_act: Hugging Face name -> ours. HF "gelu" is the exact erf form; BERT's (and
# our) "gelu" is the tanh approximation, which HF calls gelu_new / gelu_pytorch_tanh /
# gelu_fast (three spellings of the same function).
_ACTIVATIONS_FROM_HF = {
    "gelu": "gelu_exact", "gelu_new": "gelu", "gelu_pytorch_tanh": "gelu", "gelu_fast": "gelu",
    "relu": "relu", "tanh": "tanh", "silu": "silu", "swish": "silu", "linear": "linear",
}
_ACTIVATIONS_TO_HF = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu", "tanh": "tanh",
                      "silu": "silu", "swish": "silu", "linear": "linear"}
_SIZE_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
                "max_position_embeddings", "type_vocab_size", "initializer_range")
# Our fields beyond BERT's, stored in config.json for the variants stock BERT lacks.
VARIANT_FIELDS = ("residual_attention", "use_running_mean", "layer_norm_type",
               "normformer_head_scale_position", "normformer_residual_scale")


# -- config -------------------------------------------------------------------------------
def _refuse(source, field, value, what_to_do):
    raise ConfigError(f"{source}: {field}={value!r} is not computed by this package; {what_to_do}")


def _check_computable(values, source):
    """Refuses Hugging Face settings that change the computation in ways we lack."""
    if values.get("model_type", "bert") not in ("bert", VARIANT_MODEL_TYPE):
        _refuse(source, "model_type", values["model_type"], "only BERT folders (model_type bert) are read")
    if values.get("position_embedding_type", "absolute") != "absolute":
        _refuse(source, "position_embedding_type", values["position_embedding_type"],
                "only absolute position embeddings are supported")
    for field in ("is_decoder", "add_cross_attention"):
        if values.get(field):
            _refuse(source, field, values[field], "give an encoder-only BERT")
    if values.get("pruned_heads"):
        _refuse(source, "pruned_heads", values["pruned_heads"], "give a model without pruned heads")
    act = values.get("hidden_act", "gelu")
    if not isinstance(act, str):
        raise ConfigError(f"{source}: hidden_act must be a string, got {act!r}")
    if act not in _ACTIVATIONS_FROM_HF:
        _refuse(source, "hidden_act", act, f"use one of {', '.join(sorted(_ACTIVATIONS_FROM_HF))}")


def config_from_hf_dict(values, source="config.json"):
    """BertConfig from a Hugging Face BERT `config.json` dict.

    The sizes, dropouts and initializer range carry over; `hidden_act` is translated
    (HF "gelu" = exact erf GELU = our "gelu_exact"); residual attention is off (a stock
    HF BERT is vanilla) unless the file carries our own fields (folders written by
    `save_hf_folder`). Everything else is metadata, generation or training settings and
    is ignored with one log line.

    Raises:
        ConfigError naming the field, for settings we cannot compute (model_type other
        than bert, relative position embeddings, decoders, pruned heads, unknown
        activations).
    """
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a JSON object, got {type(values).__name__}")
    _check_computable(values, source)
    if values.get("model_type") == VARIANT_MODEL_TYPE and "residual_attention" not in values:
        raise ConfigError(f"{source}: model_type {VARIANT_MODEL_TYPE} without residual_attention; "
                          "write the folder again with realformer_tf")
    if "vocab_size" not in values:
        raise ConfigError(f"{source}: the required field vocab_size is missing")
    ours = {k: values[k] for k in _SIZE_FIELDS + ("layer_norm_eps",) if k in values}
    ours["hidden_act"] = _ACTIVATIONS_FROM_HF[values.get("hidden_act", "gelu")]
    ours["residual_attention"] = False
    ours.update({k: values[k] for k in VARIANT_FIELDS if k in values})
    used = set(_SIZE_FIELDS) | set(VARIANT_FIELDS) | {"hidden_act", "layer_norm_eps", "model_type"}
    ignored = sorted(set(values) - used)
    if ignored:
        logging.info("%s: Hugging Face fields without effect on the computation ignored: %s",
                     source, ", ".join(ignored))
    try:
        return BertConfig(**ours)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def config_to_hf_dict(config, architecture):
    """The Hugging Face `config.json` dict of a BertConfig (see `save_hf_folder`)."""
    values = {field: getattr(config, field) for field in _SIZE_FIELDS}
    values.update(
        architectures=[architecture], model_type="bert",
        hidden_act=_ACTIVATIONS_TO_HF[config.hidden_act], layer_norm_eps=config.layer_norm_eps,
        position_embedding_type="absolute", pad_token_id=0, tie_word_embeddings=True,
    )
    if not stock_transformers_computes(config):
        values.update({field: getattr(config, field) for field in VARIANT_FIELDS})
        values.update(model_type=VARIANT_MODEL_TYPE, architectures=[VARIANT_ARCHITECTURE_PREFIX + architecture],
                      auto_map=dict(VARIANT_AUTO_MAP))
    return values


def check_exportable(config, folder, allow_variant=False):
    """Raises VariantExportError for a variant stock transformers cannot compute,
    unless `allow_variant` (see `save_hf_folder`)."""
    if not stock_transformers_computes(config) and not allow_variant:
        raise VariantExportError(
            f"{folder}: {config.describe()} is not plain post-LN BERT, the only model stock "
            "transformers computes: it would load the folder and compute something else. Write an "
            "original-named checkpoint instead, or opt in (allow_variant=True; convert_checkpoint.py "
            f"--hf_allow_variant) to a folder with model_type {VARIANT_MODEL_TYPE!r} and its own PyTorch "
            "code, which transformers loads only with trust_remote_code=True")


def variant_folder_warning(config):
    """The line that says what a variant's folder is and how to load it (what
    convert_checkpoint.py prints for --hf_allow_variant); None for vanilla post-LN BERT."""
    if stock_transformers_computes(config):
        return None
    return (f"warning: {config.describe()} is not vanilla post-LN BERT, the only model stock transformers "
            f"computes; the folder is written with model_type {VARIANT_MODEL_TYPE!r} and the PyTorch code "
            "that computes it: load it with transformers' AutoModelFor<Task>.from_pretrained(folder, "
            "trust_remote_code=True) (AutoTokenizer with the same flag); realformer_tf reads it back exactly.")


def stock_transformers_computes(config):
    """True when transformers' BertModel computes what our model with `config` does:
    vanilla attention in BERT's post-LN order."""
    return not config.uses_residual_attention and config.layer_norm_type == "post"


def load_hf_config(path):
    """BertConfig of a Hugging Face folder, or of its config.json."""
    if gfile().isdir(path):
        path = os.path.join(path, CONFIG_NAME)
    if not gfile().exists(path):
        raise ConfigError(f"{path} does not exist; give a Hugging Face folder with {CONFIG_NAME}")
    return config_from_hf_dict(read_json_file(path), source=path)


def load_bert_config(path):
    """BertConfig from either format: a bert_config.json, or a Hugging Face folder / its
    config.json (recognized by its "model_type" key; translated by
    `config_from_hf_dict`: its "gelu" is the exact erf GELU, our "gelu_exact";
    residual attention off). What every program's --bert_config_file reads.

        config = hf.load_bert_config("uncased_L-12_H-768_A-12/bert_config.json")
        config = hf.load_bert_config("bert-base-uncased/")   # a Hugging Face folder
    """
    if gfile().isdir(path):
        return load_hf_config(path)
    if not gfile().exists(path):
        raise ConfigError(f"{BertConfig.file_description} {path} does not exist")
    values = read_json_file(path)
    if isinstance(values, dict) and values.get("model_type") == "causal_lm":
        raise ConfigError(f"{path} is a causal LM config (model_type causal_lm); give it with --model_type=causal_lm")
    if isinstance(values, dict) and "model_type" in values:
        config = config_from_hf_dict(values, source=str(path))
        logging.info("%s: Hugging Face config read as %s", path, config.describe())
        return config
    return BertConfig.from_dict(values, source=str(path))
