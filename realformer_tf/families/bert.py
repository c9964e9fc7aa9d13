"""BERT / RealFormer / NormFormer: the models of `realformer_tf.models.bert` under the
original BERT variable names (`realformer_tf.checkpoints.bert`)."""

from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import hf
from realformer_tf.families.base import ModelFamily
from realformer_tf.models.bert.config import BertConfig


class BertFamily(ModelFamily):
    """The BERT format (models by kind, builder, names, loading) plus the jobs' side."""

    checkpoint_format = bert_checkpoint.FORMAT
    config_class = BertConfig
    checkpoint_name = "bert_model.ckpt"
    config_name = "bert_config.json"
    export_tasks = ("classifier", "squad", "encoder")

    def read_config(self, path):
        """A bert_config.json, or a Hugging Face folder / config.json (translated)."""
        return hf.load_bert_config(path)
