"""ETC (global-local attention) with residual attention: the models of
`realformer_tf.models.etc` under our names or the official etcmodel ones
(`realformer_tf.checkpoints.etc_official`).

ETC jobs read the same BERT-layout records and JSON files as the BERT jobs; this family
adds the ETC inputs in the input pipeline (and in the serving graph): one global token
per `etc_tokens_per_global` long tokens (ETC's "fixed blocks"), their masks and relative
position ids (`checkpoints.etc_official.EtcFormat.adapt_features`, through
`realformer_tf.models.etc.inputs.make_fixed_block_features`).
"""

import tensorflow as tf

from realformer_tf.checkpoints import etc_official
from realformer_tf.errors import require
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.etc.config import EtcConfig


class EtcFamily(ModelFamily):
    """The ETC format (models by kind, builder, names, loading, the ETC inputs) plus the
    jobs' side."""

    checkpoint_format = etc_official.FORMAT
    config_class = EtcConfig
    checkpoint_name = "etc_model.ckpt"
    config_name = "etc_config.json"
    static_length = True
    export_tasks = ("classifier", "squad")

    def check_options(self, options):
        tokens = options.etc_tokens_per_global
        require(tokens > 0, f"--etc_tokens_per_global={tokens} must be a positive integer (e.g. 16)")

    def describe_inputs(self, options):
        tokens = options.etc_tokens_per_global
        return (f"ETC inputs: {-(-options.max_seq_length // tokens)} global tokens "
                f"(one per {tokens} long tokens)")

    def run_identity(self, options):
        return {"etc_tokens_per_global": options.etc_tokens_per_global}

    def adapt_dataset_fn(self, dataset_fn, config, options):
        def fn(input_context=None, **kwargs):  # kwargs: start_step for training datasets
            return dataset_fn(input_context, **kwargs).map(
                lambda f: self.checkpoint_format.adapt_features(f, config, options), num_parallel_calls=tf.data.AUTOTUNE)

        return fn
