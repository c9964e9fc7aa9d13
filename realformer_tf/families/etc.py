"""ETC (global-local attention) with residual attention: the models of
`realformer_tf.models.etc` under our names or the official etcmodel ones
(`realformer_tf.checkpoints.etc_official`), and the public loader.

ETC jobs read the same BERT-layout records and JSON files as the BERT jobs; this family
adds the ETC inputs in the input pipeline (and in the serving graph): one global token
per `etc_tokens_per_global` long tokens (ETC's "fixed blocks"), their masks and relative
position ids (`adapt_features`, through
`realformer_tf.models.etc.inputs.make_fixed_block_features`).
"""

from realformer_tf.checkpoints import etc_official
from realformer_tf.errors import require
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.etc.config import EtcConfig

# Global tokens per long tokens where a caller gives no job options (ETC's fixed blocks).
DEFAULT_TOKENS_PER_GLOBAL = 16


class EtcFamily(ModelFamily):
    """ETC's models by kind, their names (ours or the official ones), the ETC inputs,
    and the jobs' side."""

    name = "etc"
    config_class = EtcConfig
    head_prefixes = etc_official.HEAD_PREFIXES
    classifier_weights_name = etc_official.CLASSIFIER_WEIGHTS_NAME
    max_length_field = "max_absolute_position_embeddings"
    checkpoint_name = "etc_model.ckpt"
    names_description = "ETC's names (ours; official etcmodel names on request)"
    config_name = "etc_config.json"
    static_length = True
    export_tasks = ("classifier", "squad")

    _named_variables = staticmethod(etc_official.etc_variables)
    _check_fits = staticmethod(etc_official.check_checkpoint_fits)
    _load = staticmethod(etc_official.load_etc_checkpoint)
    _save = staticmethod(etc_official.save_etc_checkpoint)

    def model_classes(self):
        from realformer_tf.models.etc import model as etc_models  # TensorFlow-only: imported on use

        return {"pretraining": etc_models.EtcPretrainingModel, "classifier": etc_models.EtcClassifierModel,
                "squad": etc_models.EtcSquadModel, "encoder": etc_models.EtcModel}

    def check_options(self, options):
        tokens = options.etc_tokens_per_global
        require(tokens > 0, f"--etc_tokens_per_global={tokens} must be a positive integer (e.g. 16)")

    def describe_inputs(self, options):
        tokens = options.etc_tokens_per_global
        return (f"ETC inputs: {-(-options.max_seq_length // tokens)} global tokens "
                f"(one per {tokens} long tokens)")

    def run_identity(self, options):
        return {"etc_tokens_per_global": options.etc_tokens_per_global}

    def adapt_features(self, features, config, options=None):
        """Adds the ETC inputs (one global token per `options.etc_tokens_per_global` long
        tokens, default 16; their masks and relative ids) to BERT-layout features."""
        from realformer_tf.models.etc import inputs as etc_inputs  # TensorFlow-only: imported on use

        tokens = DEFAULT_TOKENS_PER_GLOBAL if options is None else options.etc_tokens_per_global
        etc = etc_inputs.make_fixed_block_features(
            features["input_ids"], features["input_mask"], features["segment_ids"],
            tokens, config.local_radius, config.relative_pos_max_distance,
            use_hard_g2l_mask=config.use_hard_g2l_mask, use_hard_l2g_mask=config.use_hard_l2g_mask)
        return dict(features, **etc)

    def adapt_dataset_fn(self, dataset_fn, config, options):
        import tensorflow as tf

        def fn(input_context=None, **kwargs):  # kwargs: start_step for training datasets
            return dataset_fn(input_context, **kwargs).map(
                lambda f: self.adapt_features(f, config, options), num_parallel_calls=tf.data.AUTOTUNE)

        return fn


ETC = EtcFamily()


def load_etc_checkpoint(model, path, skip_heads=False, allow_nonfinite=False):
    """Loads an ETC checkpoint (ours, a training checkpoint, or official etcmodel names)
    into `model` (`checkpoints.etc_official.load_etc_checkpoint`); a config that does
    not state residual_attention is decided from the weights first, or refused with one
    ConfigError. Returns the prefix read."""
    return ETC.load_checkpoint(model, path, skip_heads=skip_heads, allow_nonfinite=allow_nonfinite)
