"""Every error a user can cause, in one place: import them from here. The programs turn
each into one `error:` line and exit 1 (`realformer_tf.app.run_program`); anything else,
a ValueError from a bug included, keeps its traceback. Light: importing this module
imports nothing else of the package."""


class UserError(Exception):
    """Base of every error a user can cause (a bad option, config, checkpoint or input
    file, a diverged run). Its message names the thing and says what to do."""


class UsageError(UserError):
    """A bad option or combination of options (a flag, for the scripts)."""


class BackendError(UserError):
    """A TensorFlow-only feature was called under another Keras backend."""


class ConfigError(UserError, ValueError):
    """A bert_config.json (or config argument) that cannot describe a model. Also a
    ValueError, as google-research/bert's config and modeling functions raise, for code
    ported from it."""


class VariantExportError(ConfigError):
    """A Hugging Face export of a variant stock transformers would misread."""


class CheckpointError(UserError):
    """A checkpoint that does not match the model it is loaded into."""


class InputError(UserError):
    """Input files that cannot be read as the job expects."""


class OriginalApiError(UserError, ValueError):
    """An argument of the original modeling.py API this package cannot honour (a
    ValueError too, as the original raises)."""


class NonFiniteLossError(UserError, RuntimeError):
    """Training produced a NaN or infinite loss (the run stops and says at which step)."""


class TpuSetupError(UserError):
    """The TPU flags cannot work on this machine, or the TPU did not answer."""


class ExportError(UsageError):
    """An export that cannot be written as asked."""


class OutputPathError(UsageError):
    """An output path that cannot be written (a file where a folder is needed, a
    folder that cannot be created or is not writable)."""


class OutputDirInUseError(OutputPathError):
    """Another run holds the output_dir's lock."""


def require(condition, message):
    """Raises UsageError(message) unless `condition` holds."""
    if not condition:
        raise UsageError(message)


def require_tensorflow_backend(feature):
    """Raises BackendError unless Keras runs on TensorFlow.

    Args:
      feature: what needs TensorFlow, for the message (e.g. "SavedModel export").
    """
    import keras

    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise BackendError(
            f"{feature} is TensorFlow only, but Keras runs on KERAS_BACKEND={backend!r};"
            " set KERAS_BACKEND=tensorflow (the layers and BertModel themselves run on"
            " any backend)"
        )
