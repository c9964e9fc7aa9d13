"""Hugging Face Marian folders (`MarianMTModel`: `config.json` + `model.safetensors`)
written from a translation model under our names (`checkpoints.translation`).

Marian's model is this package's post-LN translation model without Admin or residual
attention: one shared embedding table scaled by sqrt(d_model), the same sinusoidal
positions, post-LN blocks with no embedding or final LayerNorm, the output projection
tied to the embeddings (plus `final_logits_bias`, written as zeros). Its `nn.Linear`
weights are [out, in], so every kernel is transposed. Only what Marian computes is
written.
"""

import json
import os

import numpy as np
import safetensors.numpy

from realformer_tf.checkpoints.hf.config import CONFIG_NAME, WEIGHTS_NAME
from realformer_tf.errors import VariantExportError
from realformer_tf.fileio import atomic_output, gfile

MODEL_TYPE = "marian"
ARCHITECTURE = "MarianMTModel"
_ACTIVATIONS = {"relu": "relu", "gelu_exact": "gelu", "gelu": "gelu_new", "swish": "swish", "silu": "swish"}
_ATTENTION = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "output": "out_proj"}
_ENCODER_SUBLAYERS = {"attention": "self_attn"}
_DECODER_SUBLAYERS = {"self_attention": "self_attn", "cross_attention": "encoder_attn"}
_LAYER_NORMS = {"attention_layer_norm": "self_attn_layer_norm", "self_attention_layer_norm": "self_attn_layer_norm",
                "cross_attention_layer_norm": "encoder_attn_layer_norm", "output_layer_norm": "final_layer_norm"}


def check_exportable(config, folder):
    """Raises VariantExportError unless Marian computes `config`'s model."""
    variant = [what for what, on in (
        ("residual attention", any(config.paths().values())),
        ("Admin's residual scales", config.admin_residual_scale),
        (f"layer_norm_type={config.layer_norm_type!r}", config.layer_norm_type != "post"),
        ("learned positions", config.position_embedding != "sinusoidal"),
        (f"hidden_act={config.hidden_act!r}", config.hidden_act not in _ACTIVATIONS)) if on]
    if variant:
        raise VariantExportError(
            f"{folder}: Marian computes a post-LN Transformer without residual attention or Admin; this model "
            f"has {', '.join(variant)}, which transformers' MarianMTModel would compute wrongly. Keep it as a "
            "checkpoint")


def config_to_marian(config):
    """The Marian config.json dict of a TranslationConfig (see `check_exportable`)."""
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "vocab_size": config.vocab_size,
        "decoder_vocab_size": config.vocab_size, "d_model": config.hidden_size,
        "encoder_layers": config.num_hidden_layers, "decoder_layers": config.num_decoder_layers,
        "encoder_attention_heads": config.num_attention_heads, "decoder_attention_heads": config.num_attention_heads,
        "encoder_ffn_dim": config.intermediate_size, "decoder_ffn_dim": config.intermediate_size,
        "activation_function": _ACTIVATIONS[config.hidden_act], "max_position_embeddings": config.max_position_embeddings,
        "dropout": config.hidden_dropout_prob, "attention_dropout": config.attention_probs_dropout_prob,
        "activation_dropout": 0.0, "scale_embedding": True, "share_encoder_decoder_embeddings": True,
        "tie_word_embeddings": True, "pad_token_id": config.pad_id, "eos_token_id": config.eos_id,
        "bos_token_id": config.bos_id, "decoder_start_token_id": config.bos_id, "forced_eos_token_id": config.eos_id,
        "is_encoder_decoder": True, "normalize_before": False, "layer_norm_eps": config.layer_norm_eps,
    }


def _linear(named_arrays, ours, hf, tensors):
    tensors[f"{hf}.weight"] = np.transpose(named_arrays[f"{ours}/kernel"])
    tensors[f"{hf}.bias"] = named_arrays[f"{ours}/bias"]


def _layer(named_arrays, ours, hf, sublayers, tensors):
    for mine, theirs in sublayers.items():
        for part, proj in _ATTENTION.items():
            _linear(named_arrays, f"{ours}/{mine}/{part}", f"{hf}.{theirs}.{proj}", tensors)
    for mine, theirs in _LAYER_NORMS.items():
        if f"{ours}/{mine}/gamma" in named_arrays:
            tensors[f"{hf}.{theirs}.weight"] = named_arrays[f"{ours}/{mine}/gamma"]
            tensors[f"{hf}.{theirs}.bias"] = named_arrays[f"{ours}/{mine}/beta"]
    _linear(named_arrays, f"{ours}/intermediate", f"{hf}.fc1", tensors)
    _linear(named_arrays, f"{ours}/output", f"{hf}.fc2", tensors)


def to_marian_tensors(named_arrays, config):
    """{Marian name: float32 array} from {our name: array} (`checkpoints.translation`)."""
    table = named_arrays["token_embeddings/embeddings"]
    tensors = {"model.shared.weight": table, "final_logits_bias": np.zeros((1, config.vocab_size))}
    for i in range(config.num_hidden_layers):
        _layer(named_arrays, f"encoder/layer_{i}", f"model.encoder.layers.{i}", _ENCODER_SUBLAYERS, tensors)
    for i in range(config.num_decoder_layers):
        _layer(named_arrays, f"decoder/layer_{i}", f"model.decoder.layers.{i}", _DECODER_SUBLAYERS, tensors)
    return {name: np.ascontiguousarray(np.asarray(array, np.float32)) for name, array in tensors.items()}


def write_marian_folder(folder, named_arrays, config):
    """Writes a MarianMTModel folder (config.json + model.safetensors); returns it."""
    check_exportable(config, folder)
    tensors = to_marian_tensors(named_arrays, config)
    gfile().makedirs(folder)
    with atomic_output(os.path.join(folder, WEIGHTS_NAME), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    with atomic_output(os.path.join(folder, CONFIG_NAME)) as f:
        f.write(json.dumps(config_to_marian(config), indent=2, sort_keys=True) + "\n")
    return folder
