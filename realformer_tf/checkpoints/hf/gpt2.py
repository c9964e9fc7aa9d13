"""Hugging Face GPT-2 folders (`GPT2LMHeadModel`: `config.json` + `model.safetensors`)
under the causal LM's names (`checkpoints.causal_lm`), both ways.

GPT-2's block is the causal LM's Pre-LN block: `ln_1`, attention (`c_attn`, the query,
key and value projections side by side, and `c_proj`), `ln_2`, the MLP (`c_fc`,
`c_proj`), with `ln_f` after the last block and the output projection tied to `wte`.
Its `Conv1D` weights are [in, out] like our kernels, so nothing is transposed; `c_attn`
is split into three kernels and joined back. Its "gelu_new" is our "gelu" (the tanh
form), its "gelu" our "gelu_exact". Only what GPT-2 computes is written: Pre-LN without
residual attention or NormFormer.
"""

import json
import os

import numpy as np
import safetensors.numpy

from realformer_tf.checkpoints.hf import reading
from realformer_tf.checkpoints.hf.config import CONFIG_NAME, WEIGHTS_NAME
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


def is_gpt2_folder(path):
    """True for a Hugging Face folder whose config.json says model_type "gpt2"."""
    if not reading.is_hf_folder(path):
        return False
    values = reading.read_json_file(os.path.join(path, CONFIG_NAME))
    return isinstance(values, dict) and values.get("model_type") == MODEL_TYPE


# -- config ---------------------------------------------------------------------------------
def check_exportable(config, folder):
    """Raises VariantExportError unless GPT-2 computes `config`'s model."""
    variant = []
    if config.layer_norm_type != "pre" or any(config.switches().values()):
        variant.append(f"layer_norm_type={config.layer_norm_type!r} with NormFormer's switches "
                       f"{[k for k, v in config.switches().items() if v]}")
    if config.residual_attention:
        variant.append("residual attention")
    if config.hidden_act not in _ACTIVATIONS:
        variant.append(f"hidden_act={config.hidden_act!r}")
    if variant:
        raise VariantExportError(
            f"{folder}: GPT-2 computes Pre-LN without residual attention or NormFormer; this model has "
            f"{', '.join(variant)}, which transformers' GPT2LMHeadModel would compute wrongly. Keep it as "
            "a checkpoint (--output_format=checkpoint)")


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
    """The CausalLMConfig of a GPT-2 folder or its config.json."""
    file = os.path.join(path, CONFIG_NAME) if gfile().isdir(path) else path
    values = reading.read_json_file(file)
    if not isinstance(values, dict) or values.get("model_type") != MODEL_TYPE:
        raise ConfigError(f"{file} is not a GPT-2 config (model_type {MODEL_TYPE!r})")
    return config_from_gpt2(values, file)


# -- weights --------------------------------------------------------------------------------
def to_gpt2_tensors(named_arrays, num_layers):
    """{GPT-2 name: float32 array} from {our name: array} (`checkpoints.causal_lm`)."""
    tensors = {hf: named_arrays[ours] for ours, hf in _GLOBAL.items()}
    for i in range(num_layers):
        ours = f"decoder/layer_{i}/"
        hf = f"transformer.h.{i}."
        tensors.update({hf + theirs: named_arrays[ours + mine] for mine, theirs in _PER_LAYER.items()})
        for part in ("kernel", "bias"):
            joined = np.concatenate([named_arrays[f"{ours}attention/{p}/{part}"] for p in _QKV], axis=-1)
            tensors[hf + ("attn.c_attn.weight" if part == "kernel" else "attn.c_attn.bias")] = joined
    return {name: np.ascontiguousarray(np.asarray(array, np.float32)) for name, array in tensors.items()}


def write_gpt2_folder(folder, named_arrays, config):
    """Writes a GPT2LMHeadModel folder (config.json + model.safetensors); returns it."""
    check_exportable(config, folder)
    tensors = to_gpt2_tensors(named_arrays, config.num_hidden_layers)
    gfile().makedirs(folder)
    with atomic_output(os.path.join(folder, WEIGHTS_NAME), "wb") as f:
        f.write(safetensors.numpy.save(tensors, metadata={"format": "pt"}))
    with atomic_output(os.path.join(folder, CONFIG_NAME)) as f:
        f.write(json.dumps(config_to_gpt2(config), indent=2, sort_keys=True) + "\n")
    return folder


class Gpt2FolderWeights:
    """The tensors of a GPT-2 folder under the causal LM's names (`c_attn` split in
    three), read as `tf_checkpoint` reads any checkpoint: `path`, `shapes()`,
    `get(name)`, `stored_name(name)`."""

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
            names.update({f"decoder/layer_{i}/{mine}": (hf + theirs, None) for mine, theirs in _PER_LAYER.items()})
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
