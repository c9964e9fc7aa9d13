"""The public ETC API in one import (`EtcConfig` and the models); the classes live in
`realformer_tf.models.etc`. This module only re-exports."""

from realformer_tf.errors import CheckpointError, ConfigError  # noqa: F401
from realformer_tf.models.etc.config import EtcConfig  # noqa: F401
from realformer_tf.models.etc.model import (  # noqa: F401
    EtcClassifierModel, EtcModel, EtcPretrainingModel, EtcSquadModel, PreActivationBlockStack,
)
