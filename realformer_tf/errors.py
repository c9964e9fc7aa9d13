"""Errors a user can cause. The scripts turn each into one `error:` line and exit 1
(`realformer_tf.cli.run`); anything else is a bug and keeps its traceback."""


class UserError(ValueError):
    """Base of every error a user can cause (a bad option, config, checkpoint or input
    file, a diverged run). Its message names the thing and says what to do."""


class UsageError(UserError):
    """A bad option or combination of options (a flag, for the scripts)."""


def require(condition, message):
    """Raises UsageError(message) unless `condition` holds."""
    if not condition:
        raise UsageError(message)
