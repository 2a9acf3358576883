"""One declaration per option, a dataclass field made by :func:`option`: its default, its help, and how
the command line spells it, written once.
"""

from __future__ import annotations

from dataclasses import field

#: How a flag reads its value (or a function that reads its own).
KINDS = (None, "int", "float", "flag", "no-flag", "append", "version")


def option(
    default,
    help: str,
    *,
    flags: tuple | None = None,
    kind=None,
    choices=None,
    metavar: str | None = None,
    cli: bool = True,
    cli_default=...,
    nargs: str | None = None,
    required: bool = False,
):
    """A dataclass field with its help beside it. ``flags``: the command line's spellings (default
    ``--name-with-dashes``; ``()``: a positional argument, ``nargs`` ``?``, ``*`` or ``+`` for an optional or
    repeated one); ``kind``: one of :data:`KINDS`, or a function from the text to the value;
    ``cli=False``: no flag (set in Python, or by another declaration); ``cli_default``: what the command
    line leaves it at when the flag is not given (default: ``default``; ``None`` lets the protocol or the
    pooling's sizes fill it in); ``required``: a flag that must be given. ``{default}`` in the help
    reads the command line's default, so the help never repeats it.

    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Sizes:
    ...     seq_len: int = option(512, "tokens per passage", kind="int")
    >>> fields(Sizes)[0].metadata["help"], Sizes().seq_len
    ('tokens per passage', 512)
    """
    if kind not in KINDS and not callable(kind):
        raise ValueError(f"kind {kind!r}: one of {KINDS} or a function")
    if isinstance(default, (list, dict, set)):
        raise ValueError("mutable defaults: use a tuple")
    metadata = {
        "help": help,
        "flags": flags,
        "kind": kind,
        "choices": choices,
        "metavar": metavar,
        "cli": cli,
        "cli_default": default if cli_default is ... else cli_default,
        "positional": flags == (),
        "nargs": nargs,
        "required": required,
    }
    return field(default=default, metadata=metadata)
