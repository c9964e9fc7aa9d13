"""BERT / RealFormer / NormFormer: `modeling.py`'s models under the original BERT
variable names."""

from realformer_tf.models.bert import model as modeling
from realformer_tf.models.bert.config import BertConfig
from realformer_tf.families.base import ModelFamily


class BertFamily(ModelFamily):
    name = "bert"
    config_class = BertConfig
    checkpoint_name = "bert_model.ckpt"
    config_name = "bert_config.json"
    max_length_field = "max_position_embeddings"
    export_tasks = ("classifier", "squad", "encoder")
    classifier_weights_name = "output_weights"
    head_prefixes = {
        "pretraining": ("cls/predictions/", "cls/seq_relationship/"),
        "classifier": ("output_weights", "output_bias"),
        "squad": ("cls/squad/",),
    }

    def model_classes(self):
        return {"pretraining": modeling.BertPretrainingModel, "classifier": modeling.BertClassifierModel,
                "squad": modeling.BertSquadModel, "encoder": modeling.BertModel}

    def build_model(self, config, kind, num_labels=None, dtype=None):
        model = super().build_model(config, kind, num_labels, dtype)
        if kind == "squad":
            # The span head reads the sequence output only: the pooler gets no gradient and,
            # as in the original (whose optimizer skips None gradients), stays as loaded.
            model.bert.pooler.trainable = False
        return model

    def check_checkpoint_fits(self, config, prefix):
        modeling.check_checkpoint_fits(config, prefix)

    def load_checkpoint(self, model, prefix, skip_heads=False):
        return model.load_bert_checkpoint(prefix, skip_heads=skip_heads)

    def save_checkpoint(self, model, prefix):
        return model.save_bert_checkpoint(prefix)
