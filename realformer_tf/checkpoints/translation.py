"""A translation model's weights under our names, and checkpoint I/O under them.

The names are the weights' Keras paths without the model's own name:
`token_embeddings/embeddings` [vocab, hidden] (source, target and output projection),
`position_embeddings/embeddings` with learned positions,
`encoder/layer_N/attention/{query,key,value,output}/{kernel,bias}`,
`encoder/layer_N/{attention_layer_norm,output_layer_norm}/{gamma,beta}`,
`encoder/layer_N/{intermediate,output}/{kernel,bias}`,
`decoder/layer_N/{self_attention,cross_attention}/...` with
`decoder/layer_N/{self_attention,cross_attention,output}_layer_norm/...`, and Admin's
scales where the config has them (`encoder/layer_N/{attention,ffn}_residual_scale`,
`decoder/layer_N/{self_attention,cross_attention,ffn}_residual_scale`). A model that
Marian computes is also written as a Hugging Face Marian folder (`save_marian_folder`).

    translation_checkpoint.save_translation_checkpoint(model, "out/translation_model.ckpt")
    translation_checkpoint.load_translation_checkpoint(model, "out/translation_model.ckpt")
"""

from realformer_tf.checkpoints import tf_checkpoint as ckpt
from realformer_tf.checkpoints.hf import marian
from realformer_tf.checkpoints.keras_paths import KerasPathNames

HEAD_PREFIXES = {"translation": ()}  # the tied output projection has no weights of its own
NAMES = KerasPathNames(marker="decoder/layer_0/cross_attention/query/kernel", model_class="TranslationModel",
                       module="models.translation",
                       owned_prefixes=("encoder/", "decoder/", "token_embeddings/", "position_embeddings/"))


def translation_variables(model, include_heads=True):
    """{name: variable} of every weight of a translation model.

    Raises:
        TypeError for a model that is no translation model.
    """
    return NAMES.variables(model, include_heads)


def check_checkpoint_fits(config, prefix):
    """Raises CheckpointError when the checkpoint at `prefix` is not of `config`'s
    size, before any model is built."""
    h = config.hidden_size
    expected = {"token_embeddings/embeddings": [config.vocab_size, h],
                "encoder/layer_0/intermediate/kernel": [h, config.intermediate_size],
                "decoder/layer_0/intermediate/kernel": [h, config.intermediate_size]}
    per_layer = 4 * h * h + 2 * h * config.intermediate_size
    weights = config.vocab_size * h + config.num_hidden_layers * per_layer + config.num_decoder_layers * (
        per_layer + 4 * h * h)
    ckpt.check_config_fits(prefix, expected, r"^encoder/layer_(\d+)/", config.num_hidden_layers,
                           f"the config ({config.describe()})", weights)
    ckpt.check_config_fits(prefix, expected, r"^decoder/layer_(\d+)/", config.num_decoder_layers,
                           f"the config ({config.describe()})", weights)


def load_translation_checkpoint(model, path, skip_heads=False, decide_variant=None, allow_nonfinite=False):
    """Loads a checkpoint of ours (`save_translation_checkpoint`, or a training
    checkpoint) into a translation model. Its config always states the variant, so
    `skip_heads` and `decide_variant` are taken for the families' common signature only.
    Weights holding NaN or Inf are refused unless `allow_nonfinite`. Returns the
    prefix read."""
    return NAMES.load(model, path, check_checkpoint_fits, allow_nonfinite)


def save_translation_checkpoint(model, prefix):
    """Writes every weight of a translation model under its name; returns the prefix."""
    return NAMES.save(model, prefix)


def save_marian_folder(model, folder):
    """Writes a translation model that Marian computes (post-LN, no Admin or residual
    attention, sinusoidal positions) as a Hugging Face `MarianMTModel` folder."""
    arrays = {name: variable.numpy() for name, variable in translation_variables(model).items()}
    return marian.write_marian_folder(folder, arrays, model.config)
