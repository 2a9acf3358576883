"""One declaration per option: its default, its help, and how the command line spells it.

Every option is a dataclass field made by :func:`option`; the command line's
flags are built from these declarations (:func:`effdepth.cli.arguments.add_option_arguments`),
so an option's name, default and help are written once.
"""

from __future__ import annotations

from dataclasses import field

#: How a flag reads its value: a whole number, a number, a switch that sets True, or one that sets False.
KINDS = (None, "int", "float", "flag", "no-flag")


def option(
    default,
    help: str,
    *,
    flags: tuple | None = None,
    kind: str | None = None,
    choices=None,
    metavar: str | None = None,
    cli: bool = True,
    cli_default=...,
):
    """A dataclass field with its help beside it. ``flags``: the command line's spellings (default
    ``--name-with-dashes``); ``kind``: one of :data:`KINDS`; ``cli=False``: no flag (set in Python, or by
    another declaration); ``cli_default``: what the command line leaves it at when the flag is not given
    (default: ``default``; ``None`` lets the protocol or the pooling's sizes fill it in).

    >>> from dataclasses import dataclass, fields
    >>> @dataclass
    ... class Sizes:
    ...     seq_len: int = option(512, "tokens per passage", kind="int")
    >>> fields(Sizes)[0].metadata["help"], Sizes().seq_len
    ('tokens per passage', 512)
    """
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: one of {KINDS}")
    metadata = {
        "help": help,
        "flags": flags,
        "kind": kind,
        "choices": choices,
        "metavar": metavar,
        "cli": cli,
        "cli_default": default if cli_default is ... else cli_default,
    }
    if isinstance(default, (list, dict, set)):
        raise ValueError("mutable defaults: use a tuple")
    return field(default=default, metadata=metadata)
