"""realformer_tf: RealFormer (residual attention) and NormFormer BERT models for Keras 3.

The layers, `BertModel` and its heads run on any Keras backend, also where TensorFlow
is not installed; training scripts, tf.distribute, SavedModel export, tensorflow-text
serving, TF1 checkpoints and the ETC model need TensorFlow. Importing the package never
changes which backend Keras uses (`KERAS_BACKEND`, else `~/.keras/keras.json`); the
command-line programs pick TensorFlow themselves when the user has not set one.

Importing the package registers every public layer and model with Keras
(package "realformer_tf"), so `.keras` files load with `keras.saving.load_model` and no
`custom_objects`.
"""

__version__ = "0.1.0"

from realformer_tf.errors import BackendError, UserError, require_tensorflow_backend  # noqa: F401  (light: no TensorFlow)

# Registration: importing these modules runs their @register_keras_serializable.
import keras  # noqa: E402

from realformer_tf import layers  # noqa: E402,F401
from realformer_tf.models.bert import model as _bert_model  # noqa: E402,F401
from realformer_tf.training import optimization as _optimization  # noqa: E402,F401

if keras.backend.backend() == "tensorflow":  # the ETC model is written in TensorFlow ops
    from realformer_tf.models.etc import model as _etc_model  # noqa: F401
