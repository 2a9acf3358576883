"""The one exception type users see.

Every failure a user can cause (bad arguments, a missing model, a corpus too
small, non-finite activations) is raised as :class:`EffdepthError` with a
one-line message that says what went wrong, why, and what to do. The CLI
prints it as ``effdepth: error: <message>`` and exits with status 2; nothing
else should reach the user as a traceback.
"""


class EffdepthError(Exception):
    """A user-facing error with a one-line, actionable message."""

    exit_code = 2

    def __init__(self, message: str):
        # One line: newlines in a message would break the CLI's contract.
        super().__init__(" ".join(str(message).split()))


class UnknownOption(EffdepthError, TypeError):
    """An option name that no measurement has (a ``TypeError`` too, as for any unknown keyword argument)."""
