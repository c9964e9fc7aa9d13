"""Model families: what the job runner needs to know about one kind of model.

A family (BERT, ETC) supplies its config class, its models per task, its checkpoint
I/O and an input adapter that turns the task's BERT-layout features into the model's
inputs. Tasks and the runner are written once against `ModelFamily`; adding a family
is one module here plus a line in `FAMILIES`.
"""

from realformer_tf.errors import UsageError
from realformer_tf.families.base import KINDS, ModelFamily
from realformer_tf.families.bert import BertFamily
from realformer_tf.families.etc import EtcFamily

FAMILIES = {"bert": BertFamily(), "etc": EtcFamily()}
MODEL_TYPES = tuple(FAMILIES)


def get_family(model_type):
    """The family for `--model_type` (bert, etc)."""
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise UsageError(f"--model_type={model_type!r} is not one of {', '.join(MODEL_TYPES)}") from None


__all__ = ["FAMILIES", "KINDS", "MODEL_TYPES", "ModelFamily", "get_family"]
