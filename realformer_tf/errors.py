"""Errors a user can cause. The scripts turn each into one `error:` line and exit 1
(`realformer_tf.cli.run`); anything else is a bug and keeps its traceback."""


class UsageError(ValueError):
    """A bad option or combination of options (a flag, for the scripts)."""


def require(condition, message):
    """Raises UsageError(message) unless `condition` holds."""
    if not condition:
        raise UsageError(message)
