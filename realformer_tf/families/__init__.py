"""Model families: everything the jobs know about one kind of model.

A family (BERT, ETC, the causal LM, the translation model) is one object: its config class, its models by kind, the input
adapter that turns the task's BERT-layout features into the model's inputs, its
checkpoint names and formats (through `realformer_tf.checkpoints`), and the decision of
an unstated variant from weights. Tasks and the runner are written once against
`ModelFamily`; adding a family is one module here plus an entry in `FAMILIES`
(docs/ARCHITECTURE.md, "Adding a model family").
"""

from realformer_tf.errors import UsageError
from realformer_tf.families.base import KINDS, ModelFamily
from realformer_tf.families.bert import BERT
from realformer_tf.families.causal_lm import CAUSAL_LM
from realformer_tf.families.etc import ETC
from realformer_tf.families.translation import TRANSLATION

FAMILIES = {family.name: family for family in (BERT, ETC, CAUSAL_LM, TRANSLATION)}
MODEL_TYPES = tuple(FAMILIES)


def get_family(model_type):
    """The family for `--model_type` (bert, etc, causal_lm, translation)."""
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise UsageError(f"--model_type={model_type!r} is not one of {', '.join(MODEL_TYPES)}") from None


def family_of(model):
    """The family whose model `model` is.

    Raises:
        TypeError for a model of no family.
    """
    for family in FAMILIES.values():
        if family.owns(model):
            return family
    raise TypeError(f"{type(model).__name__} is no model of the families {', '.join(MODEL_TYPES)}")


__all__ = ["FAMILIES", "KINDS", "MODEL_TYPES", "ModelFamily", "family_of", "get_family"]
