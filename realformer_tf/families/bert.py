"""BERT / RealFormer / NormFormer: the models of `realformer_tf.models.bert` under the
original BERT variable names (`realformer_tf.checkpoints.bert`)."""

from realformer_tf.checkpoints.bert import BertFormat
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.bert.config import BertConfig


class BertFamily(BertFormat, ModelFamily):
    """The BERT format (models by kind, builder, names, loading) plus the jobs' side."""

    config_class = BertConfig
    checkpoint_name = "bert_model.ckpt"
    config_name = "bert_config.json"
    export_tasks = ("classifier", "squad", "encoder")
