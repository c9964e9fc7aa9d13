"""The public ETC API in one import (`EtcConfig`, the models, `load_etc_checkpoint(model,
path)` / `save_etc_checkpoint(model, prefix)`); the classes live in
`realformer_tf.models.etc`, the checkpoint I/O in `realformer_tf.checkpoints.etc_official`, the loader that decides
an unstated variant in `realformer_tf.families.etc`.
This module only re-exports."""

from realformer_tf.checkpoints.etc_official import save_etc_checkpoint  # noqa: F401
from realformer_tf.families.etc import load_etc_checkpoint  # noqa: F401
from realformer_tf.errors import CheckpointError, ConfigError  # noqa: F401
from realformer_tf.models.etc.config import EtcConfig  # noqa: F401
from realformer_tf.models.etc.model import (  # noqa: F401
    EtcClassifierModel, EtcModel, EtcPretrainingModel, EtcSquadModel, PreActivationBlockStack,
)
