"""{checkpoint name: variable} of any model of the package, whatever its family: the
original BERT names for BERT models (`checkpoints.bert`), ours for ETC models
(`checkpoints.etc_official`). The training loop keys its checkpoints by these.

    names.named_variables(model)["bert/pooler/dense/kernel"]
"""

from realformer_tf.checkpoints import bert as bert_checkpoint
from realformer_tf.checkpoints import etc_official


def named_variables(model, include_heads=True):
    """{name: variable} of every weight of a BERT or ETC model (built first if needed).

    Raises:
        TypeError for a model of neither family.
    """
    try:
        bert_checkpoint.model_kind(model)
    except TypeError:
        return etc_official.etc_variables(model, include_heads)
    return bert_checkpoint.bert_variables(model, include_heads)
