"""A causal language model's weights under our names, and checkpoint I/O under them.

The names are the weights' Keras paths without the model's own name:
`token_embeddings/embeddings` [vocab, hidden], `position_embeddings/embeddings`
[positions, hidden], `decoder/layer_N/attention/{query,key,value,output}/{kernel,bias}`,
`decoder/layer_N/{attention_layer_norm,output_layer_norm}/{gamma,beta}`,
`decoder/layer_N/{intermediate,output}/{kernel,bias}`, the NormFormer weights where the
config has them (`decoder/layer_N/attention/head_scale`,
`decoder/layer_N/attention_post_layer_norm/...`, `decoder/layer_N/intermediate_layer_norm/...`,
`decoder/layer_N/residual_scale`) and `decoder/final_layer_norm/{gamma,beta}` in Pre-LN.
The output projection is the token embedding table (tied), so there is no head of its
own. A Hugging Face GPT-2 folder, or one of our variants' folders (model_type
"realformer_causal_lm", with its PyTorch remote code), loads wherever a checkpoint does
(`checkpoints.hf.gpt2` presents its tensors under these names); `save_gpt2_folder`
writes one.

    causal_lm_checkpoint.save_lm_checkpoint(model, "out/lm_model.ckpt")
    causal_lm_checkpoint.load_lm_checkpoint(model, "out/lm_model.ckpt")
"""

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints.hf import gpt2
from realformer_tf.checkpoints.keras_paths import KerasPathNames

HEAD_PREFIXES = {"pretraining": ()}  # the tied output projection has no weights of its own
NAMES = KerasPathNames(marker="token_embeddings/embeddings", model_class="CausalLMModel", module="models.causal_lm",
                       owned_prefixes=("decoder/", "token_embeddings/", "position_embeddings/"))


def lm_variables(model, include_heads=True):
    """{name: variable} of every weight of a causal LM.

    Raises:
        TypeError for a model that is no causal LM.
    """
    return NAMES.variables(model, include_heads)


def check_checkpoint_fits(config, prefix):
    """Raises CheckpointError when the checkpoint at `prefix` is not of `config`'s
    size, before any model is built."""
    h = config.hidden_size
    expected = {
        NAMES.marker: [config.vocab_size, h],
        "position_embeddings/embeddings": [config.max_position_embeddings, h],
        "decoder/layer_0/intermediate/kernel": [h, config.intermediate_size],
    }
    weights = (config.vocab_size + config.max_position_embeddings) * h + config.num_hidden_layers * (
        4 * h * h + 2 * h * config.intermediate_size)
    ckpt.check_config_fits(prefix, expected, r"^decoder/layer_(\d+)/", config.num_hidden_layers,
                           f"the config ({config.describe()})", weights)


def load_lm_checkpoint(model, path, skip_heads=False, decide_variant=None, allow_nonfinite=False):
    """Loads a checkpoint of ours (`save_lm_checkpoint`, or a training checkpoint) into
    a causal LM. A causal LM config always states its variant, so `decide_variant` is
    never needed; it is taken for the families' common signature. Weights holding NaN
    or Inf are refused unless `allow_nonfinite`. Returns the prefix read.

    Raises:
        CheckpointError naming any missing, unexpected or mis-shaped weight.
    """
    return NAMES.load(model, path, check_checkpoint_fits, allow_nonfinite)


def save_lm_checkpoint(model, prefix):
    """Writes every weight of a causal LM under its name; returns the prefix written."""
    return NAMES.save(model, prefix)


def save_gpt2_folder(model, folder, allow_variant=False):
    """Writes a causal LM that GPT-2 computes (Pre-LN, no residual attention or
    NormFormer) as a Hugging Face `GPT2LMHeadModel` folder; returns `folder`.

    Other variants raise VariantExportError unless `allow_variant`: then the folder has
    model_type "realformer_causal_lm" and the PyTorch code that computes the model, for
    `transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`
    (`gpt2.write_gpt2_folder`)."""
    arrays = {name: variable.numpy() for name, variable in lm_variables(model).items()}
    return gpt2.write_gpt2_folder(folder, arrays, model.config, allow_variant=allow_variant)
