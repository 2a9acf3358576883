"""The one exception type users see.

Every failure a user can cause is raised as :class:`EffdepthError` with a one-line message that says
what went wrong, why, and what to do; the CLI prints it as ``effdepth: error: <message>`` and exits with
status 2. A hint names an option as the user gave it: a flag on the command line, an argument in Python.
"""

from __future__ import annotations

import contextlib
import contextvars

_INTERFACE = contextvars.ContextVar("effdepth_interface", default="python")


class EffdepthError(Exception):
    """A user-facing error with a one-line, actionable message."""

    exit_code = 2

    def __init__(self, message: str):
        # One line: newlines in a message would break the CLI's contract.
        super().__init__(" ".join(str(message).split()))


class UnknownOption(EffdepthError, TypeError):
    """An option name that no measurement has (a ``TypeError`` too, as for any unknown keyword argument)."""


@contextlib.contextmanager
def command_line():
    """Within this block, hints name command-line flags (the CLI runs every command in one).

    >>> with command_line():
    ...     spelled("--tokenizer PATH_OR_ID", "tokenizer=")
    '--tokenizer PATH_OR_ID'
    """
    token = _INTERFACE.set("cli")
    try:
        yield
    finally:
        _INTERFACE.reset(token)


def spelled(flag: str, argument: str) -> str:
    """``flag`` on the command line, ``argument`` in Python.

    >>> spelled("--tokenizer PATH_OR_ID", "tokenizer=")
    'tokenizer='
    """
    return flag if _INTERFACE.get() == "cli" else argument


def tokenizer_hint() -> str:
    """What to do when a text corpus has no tokenizer, in the user's own terms.

    >>> tokenizer_hint()
    "pass the model's tokenizer: tokenizer= a tokenizer object, or the folder, Hugging Face id or .gguf file of one (or give pre-tokenized ids)"
    """
    return "pass the model's tokenizer: " + spelled(
        "--tokenizer PATH_OR_ID (a folder holding the tokenizer files, a Hugging Face id or a .gguf file)",
        "tokenizer= a tokenizer object, or the folder, Hugging Face id or .gguf file of one (or give pre-tokenized ids)",
    )


def one_line(exc: BaseException, limit: int = 300) -> str:
    """What a library's error says, as one line of at most ``limit`` characters; its type when it says nothing.

    >>> one_line(ValueError("a\\n  b")), one_line(KeyError())
    ('a b', 'KeyError')
    """
    return " ".join(str(exc).split())[:limit] or type(exc).__name__


def causes(exc: BaseException | None) -> list:
    """``exc`` and what it was raised from, outermost first (libraries wrap one another's errors).

    >>> try:
    ...     try:
    ...         raise KeyError("inner")
    ...     except KeyError as inner:
    ...         raise ValueError("outer") from inner
    ... except ValueError as exc:
    ...     [type(e).__name__ for e in causes(exc)]
    ['ValueError', 'KeyError']
    """
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    return chain
