"""ETC (global-local attention) with residual attention: `etc_modeling.py`'s models.

ETC jobs read the same BERT-layout records and JSON files as the BERT jobs; this family
adds the ETC inputs in the input pipeline (and in the serving graph): one global token
per `etc_tokens_per_global` long tokens (ETC's "fixed blocks"), their masks and relative
position ids (`realformer_tf.models.etc.inputs.make_fixed_block_features`).
"""

import tensorflow as tf

from realformer_tf.models.etc import model as etc_modeling
from realformer_tf.models.etc import inputs as etc_inputs
from realformer_tf.errors import require
from realformer_tf.families.base import ModelFamily


class EtcFamily(ModelFamily):
    name = "etc"
    config_class = etc_modeling.EtcConfig
    checkpoint_name = "etc_model.ckpt"
    config_name = "etc_config.json"
    max_length_field = "max_absolute_position_embeddings"
    static_length = True
    export_tasks = ("classifier", "squad")
    classifier_weights_name = "classifier/output_weights"
    head_prefixes = {
        "pretraining": ("predictions/", "seq_relationship/"),
        "classifier": ("pooler/", "classifier/"),
        "squad": ("squad/",),
    }

    def check_options(self, options):
        tokens = options.etc_tokens_per_global
        require(tokens > 0, f"--etc_tokens_per_global={tokens} must be a positive integer (e.g. 16)")

    def describe_inputs(self, options):
        tokens = options.etc_tokens_per_global
        return (f"ETC inputs: {-(-options.max_seq_length // tokens)} global tokens "
                f"(one per {tokens} long tokens)")

    def run_identity(self, options):
        return {"etc_tokens_per_global": options.etc_tokens_per_global}

    def model_classes(self):
        return {"pretraining": etc_modeling.EtcPretrainingModel, "classifier": etc_modeling.EtcClassifierModel,
                "squad": etc_modeling.EtcSquadModel, "encoder": etc_modeling.EtcModel}

    def adapt_features(self, features, config, options):
        etc = etc_inputs.make_fixed_block_features(
            features["input_ids"], features["input_mask"], features["segment_ids"],
            options.etc_tokens_per_global, config.local_radius, config.relative_pos_max_distance,
            use_hard_g2l_mask=config.use_hard_g2l_mask, use_hard_l2g_mask=config.use_hard_l2g_mask)
        return dict(features, **etc)

    def adapt_dataset_fn(self, dataset_fn, config, options):
        def fn(input_context=None, **kwargs):  # kwargs: start_step for training datasets
            return dataset_fn(input_context, **kwargs).map(
                lambda f: self.adapt_features(f, config, options), num_parallel_calls=tf.data.AUTOTUNE)

        return fn

    def check_checkpoint_fits(self, config, prefix):
        etc_modeling.check_checkpoint_fits(config, prefix)

    def load_checkpoint(self, model, prefix, skip_heads=False):
        return model.load_etc_checkpoint(prefix, skip_heads=skip_heads)

    def save_checkpoint(self, model, prefix):
        return model.save_etc_checkpoint(prefix)
