"""The command lines built from the declarations (:func:`~effdepth.options.option`): the one place that
adds arguments to a parser. Every argument keeps its declaration (``action.declared``).
"""

from __future__ import annotations

import argparse
import re
from dataclasses import fields

from effdepth.errors import EffdepthError
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions
from effdepth.options.groups import HubOptions, OutputOptions


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, and which keeps its flags (``option_actions``).

    >>> p = Parser(prog="x"); add_option_arguments(p, AnalysisOptions, names=("seed",))
    >>> [a.dest for a in p.option_actions]
    ['help', 'seed']
    """

    def __init__(self, *args, **kwargs):
        self.option_actions: list = []  # before argparse adds --help through add_argument
        # Whole flags only: `--num-seq 100` must not pass for --num-seqs (a resume compares names).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.option_strings:
            self.option_actions.append(action)
        return action

    def error(self, message):
        raise EffdepthError(f"{self.prog}: {message} (see {self.prog} --help)")


def int_arg(text: str) -> int:
    """``type=`` for integer flags, with a readable error.

    >>> int_arg("12")
    12
    """
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def float_arg(text: str) -> float:
    """``type=`` for number flags, with a readable error.

    >>> float_arg("0.5")
    0.5
    """
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def option_flags(declared) -> tuple:
    """A declared option's spellings on the command line (``--name-with-dashes`` unless declared otherwise)."""
    return declared.metadata["flags"] or ("--" + declared.name.replace("_", "-"),)


def add_option_arguments(
    p: argparse.ArgumentParser, cls, *, names=None, default=..., help_suffix: str = "", notes=None, required=()
) -> None:
    """The arguments of the dataclass ``cls``'s options declared for the command line
    (:func:`effdepth.options.option`), in declaration order; ``names`` keeps some of them, ``default``
    sets every one's default (e.g. ``None``: "the saved result's"), ``help_suffix`` ends every help,
    ``notes`` ends the help of the options it names (a command's own default, in words) and ``required``
    names the flags this command cannot do without.

    >>> q = Parser(prog="x"); add_option_arguments(q, AnalysisOptions, names=("bootstrap", "pooling"))
    >>> q.parse_args(["--pooling", "none"]).pooling, q.parse_args([]).bootstrap
    ('none', 1000)
    """
    for f in fields(cls):
        if f.metadata.get("cli") and (names is None or f.name in names):
            kwargs = _argument(f, default, help_suffix + (notes or {}).get(f.name, ""))
            if f.name in required:
                kwargs.update(required=True, default=None)
            spelling = (f.name,) if f.metadata["positional"] else option_flags(f)
            p.add_argument(*spelling, **kwargs).declared = f


def _argument(f, default, help_suffix: str) -> dict:
    """``add_argument``'s keywords for the declared option ``f``."""
    meta = f.metadata
    value = meta["cli_default"] if default is ... else default
    shown = ",".join(map(str, value)) if isinstance(value, tuple) else value
    text = meta["help"].replace("{default}", f"{shown:g}" if isinstance(shown, float) else str(shown))
    if default is not ...:
        text = re.sub(r"\s*\(default[^()]*\)", "", text)
    kwargs = {"help": text + help_suffix}
    if not meta["positional"]:
        kwargs["dest"] = f.name
    kind = meta["kind"]
    if kind == "version":
        from effdepth.results.version import __version__

        return {**kwargs, "action": "version", "version": f"effdepth {__version__}"}
    if kind == "flag":
        return {**kwargs, "action": "store_true", "default": False if value is None and default is ... else value}
    if kind == "no-flag":
        return {**kwargs, "action": "store_false", "default": True if default is ... else value}
    if kind == "append":
        kwargs.update(action="append", default=list(value))
    else:
        kwargs["default"] = shown
    converters = {"int": int_arg, "float": float_arg}
    if kind in converters or callable(kind):
        kwargs["type"] = converters.get(kind, kind)
    for key in ("choices", "metavar", "nargs"):
        if meta[key] is not None:
            kwargs[key] = tuple(meta[key]) if key == "choices" else meta[key]
    if meta["required"]:
        kwargs["required"] = True
    return kwargs


def add_measure_arguments(p: argparse.ArgumentParser, *, model: bool = True, run=("progress",)) -> None:
    """Every measurement option as a flag, the run options named in ``run``, and ``--offline``."""
    add_option_arguments(
        p, LoadOptions, names=None if model else [f.name for f in fields(LoadOptions) if f.name != "model"]
    )
    add_option_arguments(p, AnalysisOptions)
    add_option_arguments(p, RunOptions, names=run)
    add_option_arguments(p, HubOptions)


def add_output_arguments(p: argparse.ArgumentParser, folder: str | None, names=("out", "figures")) -> None:
    """``--out``, whose default the command says in words (``folder``; None: ``--out`` is required), and
    the others of :class:`~effdepth.options.groups.OutputOptions` named in ``names``."""
    notes = {"out": f" (default: {folder})"} if folder else {}
    add_option_arguments(p, OutputOptions, names=names, notes=notes, required=() if folder else ("out",))
