"""Hugging Face GPT-2 folders (`GPT2LMHeadModel`: `config.json` + `model.safetensors`)
under the causal LM's names (`checkpoints.causal_lm`), both ways.

GPT-2's block is the causal LM's Pre-LN block: `ln_1`, attention (`c_attn`, the query,
key and value projections side by side, and `c_proj`), `ln_2`, the MLP (`c_fc`,
`c_proj`), with `ln_f` after the last block and the output projection tied to `wte`.
Its `Conv1D` weights are [in, out] like our kernels, so nothing is transposed; `c_attn`
is split into three kernels and joined back. Its "gelu_new" is our "gelu" (the tanh
form), its "gelu" our "gelu_exact". Only what GPT-2 computes is written as a GPT-2
folder: Pre-LN without residual attention or NormFormer.

The other variants (residual attention, Post-LN, NormFormer's switches, activations
GPT-2 lacks) are written only on request (`allow_variant`): model_type
"realformer_causal_lm", our CausalLMConfig fields in config.json, GPT-2's weight names
plus the variants' own (`_VARIANT_PER_LAYER`), and the PyTorch code that computes them
(remote_code/{configuration,modeling}_realformer_causal_lm.py, named by config.json's
auto_map), which transformers runs with trust_remote_code=True. Both kinds of folder
read back here (`is_causal_lm_folder`, `load_gpt2_config`, `Gpt2FolderWeights`).
"""

import dataclasses
import json
import os

import numpy as np
import safetensors.numpy

from absl import logging

from realformer_tf.checkpoints.hf import reading
from realformer_tf.checkpoints.hf.config import CONFIG_NAME, WEIGHTS_NAME
from realformer_tf.checkpoints.hf.writing import write_remote_code
from realformer_tf.errors import CheckpointError, ConfigError, VariantExportError
from realformer_tf.fileio import atomic_output, gfile
from realformer_tf.models.causal_lm.config import CausalLMConfig

MODEL_TYPE = "gpt2"
ARCHITECTURE = "GPT2LMHeadModel"
_ACTIVATIONS = {"gelu": "gelu_new", "gelu_exact": "gelu", "relu": "relu", "swish": "silu", "silu": "silu"}
_PER_LAYER = {  # our name under decoder/layer_N/ -> GPT-2's under transformer.h.N.
    "attention_layer_norm/gamma": "ln_1.weight", "attention_layer_norm/beta": "ln_1.bias",
    "attention/output/kernel": "attn.c_proj.weight", "attention/output/bias": "attn.c_proj.bias",
    "output_layer_norm/gamma": "ln_2.weight", "output_layer_norm/beta": "ln_2.bias",
    "intermediate/kernel": "mlp.c_fc.weight", "intermediate/bias": "mlp.c_fc.bias",
    "output/kernel": "mlp.c_proj.weight", "output/bias": "mlp.c_proj.bias",
}
_GLOBAL = {"token_embeddings/embeddings": "transformer.wte.weight",
           "position_embeddings/embeddings": "transformer.wpe.weight",
           "decoder/final_layer_norm/gamma": "transformer.ln_f.weight",
           "decoder/final_layer_norm/beta": "transformer.ln_f.bias"}
_QKV = ("query", "key", "value")

# The variants' folders (`allow_variant`): a model_type transformers does not know (so
# that its GPT-2 never loads them and computes plain GPT-2), the remote code beside the
# weights (package data of checkpoints/hf/remote_code, never imported here) and the
# classes each Auto class loads.
VARIANT_MODEL_TYPE = "realformer_causal_lm"
VARIANT_ARCHITECTURE = "RealFormerTfCausalLMForCausalLM"
REMOTE_CODE_FILES = ("configuration_realformer_causal_lm.py", "modeling_realformer_causal_lm.py")
VARIANT_AUTO_MAP = {
    "AutoConfig": "configuration_realformer_causal_lm.RealFormerTfCausalLMConfig",
    "AutoModel": "modeling_realformer_causal_lm.RealFormerTfCausalLMModel",
    "AutoModelForCausalLM": "modeling_realformer_causal_lm.RealFormerTfCausalLMForCausalLM",
}
# The variants' own weights: our name under decoder/layer_N/ -> theirs under transformer.h.N.
_VARIANT_PER_LAYER = {
    "attention/head_scale": "attn.head_scale",
    "attention_post_layer_norm/gamma": "attn.ln_out.weight", "attention_post_layer_norm/beta": "attn.ln_out.bias",
    "intermediate_layer_norm/gamma": "mlp.ln_act.weight", "intermediate_layer_norm/beta": "mlp.ln_act.bias",
    "residual_scale": "residual_scale",
}
# The CausalLMConfig fields a variant's config.json holds (its model_type is the folder's).
_CONFIG_FIELDS = tuple(f.name for f in dataclasses.fields(CausalLMConfig) if f.name != "model_type")


def folder_model_type(path):
    """The model_type of the Hugging Face folder at `path` (None: not such a folder)."""
    if not reading.is_hf_folder(path):
        return None
    values = reading.read_json_file(os.path.join(path, CONFIG_NAME))
    return values.get("model_type") if isinstance(values, dict) else None


def is_gpt2_folder(path):
    """True for a Hugging Face folder whose config.json says model_type "gpt2"."""
    return folder_model_type(path) == MODEL_TYPE


def is_causal_lm_folder(path):
    """True for a GPT-2 folder or one of our variants' (model_type "realformer_causal_lm")."""
    return folder_model_type(path) in (MODEL_TYPE, VARIANT_MODEL_TYPE)


# -- config ---------------------------------------------------------------------------------
def _variant_parts(config):
    """What makes `config`'s model other than GPT-2 (empty: GPT-2 computes it)."""
    variant = []
    if config.layer_norm_type != "pre" or any(config.switches().values()):
        variant.append(f"layer_norm_type={config.layer_norm_type!r} with NormFormer's switches "
                       f"{[k for k, v in config.switches().items() if v]}")
    if config.residual_attention:
        variant.append("residual attention")
    if config.hidden_act not in _ACTIVATIONS:
        variant.append(f"hidden_act={config.hidden_act!r}")
    return variant


def gpt2_computes(config):
    """True when transformers' GPT2LMHeadModel computes `config`'s model: Pre-LN without
    residual attention or NormFormer, with an activation GPT-2 has."""
    return not _variant_parts(config)


def check_exportable(config, folder, allow_variant=False):
    """Raises VariantExportError unless GPT-2 computes `config`'s model or
    `allow_variant` (a folder with our remote code; see `write_gpt2_folder`)."""
    variant = _variant_parts(config)
    if variant and not allow_variant:
        raise VariantExportError(
            f"{folder}: GPT-2 computes Pre-LN without residual attention or NormFormer; this model has "
            f"{', '.join(variant)}, which transformers' GPT2LMHeadModel would compute wrongly. Keep it as "
            "a checkpoint (--output_format=checkpoint), or opt in (allow_variant=True; convert_checkpoint.py "
            f"--hf_allow_variant) to a folder with model_type {VARIANT_MODEL_TYPE!r} and its own PyTorch code, "
            "which transformers loads only with trust_remote_code=True")


def variant_folder_warning(config):
    """The line that says what a variant's folder is and how to load it (what
    convert_checkpoint.py prints for --hf_allow_variant); None for what GPT-2 computes."""
    if gpt2_computes(config):
        return None
    return (f"warning: {config.describe()} is not the Pre-LN model GPT-2 computes; the folder is written with "
            f"model_type {VARIANT_MODEL_TYPE!r} and the PyTorch code that computes it: load it with transformers' "
            "AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True); realformer_tf reads it back "
            "exactly.")


def config_to_variant(config):
    """The config.json dict of a variant's folder: our fields, model_type
    "realformer_causal_lm", the remote code's auto_map."""
    values = {field: getattr(config, field) for field in _CONFIG_FIELDS}
    values.update(model_type=VARIANT_MODEL_TYPE, architectures=[VARIANT_ARCHITECTURE],
                  auto_map=dict(VARIANT_AUTO_MAP), tie_word_embeddings=True, use_cache=True)
    return values


def config_from_variant(values, source):
    """The CausalLMConfig of a variant folder's config.json dict (ours, or saved again by
    transformers: its own keys are ignored with one log line)."""
    ours = {field: values[field] for field in _CONFIG_FIELDS if field in values}
    ignored = sorted(set(values) - set(_CONFIG_FIELDS) - {"model_type"})
    if ignored:
        logging.info("%s: Hugging Face fields without effect on the computation ignored: %s",
                     source, ", ".join(ignored))
    return CausalLMConfig.from_dict(ours, source=source)


def config_to_gpt2(config):
    """The GPT-2 config.json dict of a CausalLMConfig (see `check_exportable`)."""
    return {
        "model_type": MODEL_TYPE, "architectures": [ARCHITECTURE], "vocab_size": config.vocab_size,
        "n_positions": config.max_position_embeddings, "n_ctx": config.max_position_embeddings,
        "n_embd": config.hidden_size, "n_layer": config.num_hidden_layers, "n_head": config.num_attention_heads,
        "n_inner": config.intermediate_size, "activation_function": _ACTIVATIONS[config.hidden_act],
        "resid_pdrop": config.hidden_dropout_prob, "embd_pdrop": config.hidden_dropout_prob,
        "attn_pdrop": config.attention_probs_dropout_prob, "layer_norm_epsilon": config.layer_norm_eps,
        "initializer_range": config.initializer_range, "scale_attn_weights": True,
        "tie_word_embeddings": True,
    }


def config_from_gpt2(values, source):
    """The CausalLMConfig of a GPT-2 config.json dict (what GPT-2 computes: Pre-LN, no
    residual attention)."""
    unsupported = {k: values.get(k) for k in ("scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                                              "add_cross_attention") if values.get(k)}
    if values.get("scale_attn_weights") is False:
        unsupported["scale_attn_weights"] = False
    activation = {v: k for k, v in _ACTIVATIONS.items() if k != "swish"}.get(values.get("activation_function",
                                                                                          "gelu_new"))
    if unsupported or activation is None:
        raise ConfigError(f"{source}: a GPT-2 with {unsupported or values.get('activation_function')} is not "
                          "a model this package computes")
    hidden = values.get("n_embd", 768)
    return CausalLMConfig(
        vocab_size=values.get("vocab_size", 50257), hidden_size=hidden, num_hidden_layers=values.get("n_layer", 12),
        num_attention_heads=values.get("n_head", 12), intermediate_size=values.get("n_inner") or 4 * hidden,
        hidden_act=activation, hidden_dropout_prob=values.get("resid_pdrop", 0.1),
        attention_probs_dropout_prob=values.get("attn_pdrop", 0.1),
        max_position_embeddings=values.get("n_positions", 1024),
        initializer_range=values.get("initializer_range", 0.02), residual_attention=False,
        layer_norm_type="pre", layer_norm_eps=values.get("layer_norm_epsilon", 1e-5))


def load_gpt2_config(path):
    """The CausalLMConfig of a GPT-2 folder, a variant's folder (model_type
    "realformer_causal_lm"), or its config.json."""
    file = os.path.join(path, CONFIG_NAME) if gfile().isdir(path) else path
    values = reading.read_json_file(file)
    model_type = values.get("model_type") if isinstance(values, dict) else None
    if model_type == VARIANT_MODEL_TYPE:
        return config_from_variant(values, file)
    if model_type != MODEL_TYPE:
        raise ConfigError(f"{file} is not a GPT-2 config (model_type {MODEL_TYPE!r}, or {VARIANT_MODEL_TYPE!r} "
                          "for our variants)")
    return config_from_gpt2(values, file)


# -- weights --------------------------------------------------------------------------------
def to_gpt2_tensors(named_arrays, num_layers):
    """{GPT-2 name: float32 array} from {our name: array} (`checkpoints.causal_lm`): a
    variant's own weights (`_VARIANT_PER_LAYER`) where it has them, and no ln_f in
    Post-LN."""
    tensors = {hf: named_arrays[ours] for ours, hf in _GLOBAL.items()
               if ours in named_arrays or not ours.startswith("decoder/final_layer_norm/")}
    for i in range(num_layers):
        ours = f"decoder/layer_{i}/"
        hf = f"transformer.h.{i}."
        tensors.update({hf + theirs: named_arrays[ours + mine] for mine, theirs in _PER_LAYER.items()})
        tensors.update({hf + theirs: named_arrays[ours + mine] for mine, theirs in _VARIANT_PER_LAYER.items()
                        if ours + mine in named_arrays})
        for part in ("kernel", "bias"):
            joined = np.concatenate([named_arrays[f"{ours}attention/{p}/{part}"] for p in _QKV], axis=-1)
            tensors[hf + ("attn.c_attn.weight" if part == "kernel" else "attn.c_attn.bias")] = joined
    return {name: np.ascontiguousarray(np.asarray(array, np.float32)) for name, array in tensors.items()}


def write_gpt2_folder(folder, named_arrays, config, allow_variant=False):
    """Writes a GPT2LMHeadModel folder (config.json + model.safetensors) for a model GPT-2
    computes; returns it.

    Other variants are refused (VariantExportError) unless `allow_variant`: then the
    folder has model_type "realformer_causal_lm", our config fields, GPT-2's weight names
    plus the variant's own, and the PyTorch code that computes it
    (configuration_realformer_causal_lm.py, modeling_realformer_causal_lm.py, named by
    config.json's auto_map): `transformers.AutoModelForCausalLM.from_pretrained(folder,
    trust_remote_code=True)` loads it, and this package reads it back exactly. A model
    GPT-2 computes is always a plain GPT-2 folder, without remote code.
    """
    check_exportable(config, folder, allow_variant)
    tensors = to_gpt2_tensors(named_arrays, config.num_hidden_layers)
    variant = not gpt2_computes(config)
    gfile().makedirs(folder)
    with atomic_output(os.path.join(folder, WEIGHTS_NAME), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    if variant:
        write_remote_code(folder, REMOTE_CODE_FILES)  # before the config.json whose auto_map names it
    with atomic_output(os.path.join(folder, CONFIG_NAME)) as f:
        values = config_to_variant(config) if variant else config_to_gpt2(config)
        f.write(json.dumps(values, indent=2, sort_keys=True) + "\n")
    return folder


class Gpt2FolderWeights:
    """The tensors of a GPT-2 folder (or a variant's) under the causal LM's names
    (`c_attn` split in three), read as `tf_checkpoint` reads any checkpoint: `path`,
    `shapes()`, `get(name)`, `stored_name(name)`."""

    def __init__(self, folder):
        self.folder = folder
        self.files = reading._weight_files(folder)
        self.path = self.files[0] if len(self.files) == 1 else folder
        self._hf_shapes = {}
        for path in self.files:
            self._hf_shapes.update({n: shape for n, (_, shape) in reading._read_header(path).items()})
        self._tensors = None
        self._names = self._our_names()

    def _our_names(self):
        """{our name: (GPT-2 name, which third of c_attn or None)}."""
        names = {ours: (hf, None) for ours, hf in _GLOBAL.items() if hf in self._hf_shapes}
        layers = {int(n.split(".")[2]) for n in self._hf_shapes if n.startswith("transformer.h.")}
        for i in sorted(layers):
            hf = f"transformer.h.{i}."
            names.update({f"decoder/layer_{i}/{mine}": (hf + theirs, None)
                          for mine, theirs in {**_PER_LAYER, **_VARIANT_PER_LAYER}.items()})
            for third, p in enumerate(_QKV):
                names[f"decoder/layer_{i}/attention/{p}/kernel"] = (hf + "attn.c_attn.weight", third)
                names[f"decoder/layer_{i}/attention/{p}/bias"] = (hf + "attn.c_attn.bias", third)
        return names

    def shapes(self):
        shapes = {}
        for ours, (hf, third) in self._names.items():
            shape = list(self._hf_shapes.get(hf, []))
            if third is not None and shape:
                shape[-1] //= 3
            shapes[ours] = shape
        return {name: shape for name, shape in shapes.items() if self._names[name][0] in self._hf_shapes}

    def stored_name(self, name):
        hf, third = self._names.get(name, (name, None))
        return hf if third is None else f"{hf}[{_QKV[third]}]"

    def get(self, name):
        if self._tensors is None:
            self._tensors = {}
            for path in self.files:
                self._tensors.update(reading._read_tensors(path))
        hf, third = self._names[name]
        if hf not in self._tensors:
            raise CheckpointError(f"{self.path} has no {hf}")
        head = self._tensors.get("lm_head.weight")
        if name == "token_embeddings/embeddings" and head is not None and not np.array_equal(head, self._tensors[hf]):
            raise CheckpointError(f"{self.path}: lm_head.weight differs from transformer.wte.weight; the causal LM's "
                                  "output projection is tied to its embeddings (as GPT-2's), so an untied head "
                                  "cannot be loaded")
        array = self._tensors[hf]
        if third is None:
            return array
        width = array.shape[-1] // 3
        return array[..., third * width:(third + 1) * width]
