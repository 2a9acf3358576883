"""Every argument of every command line is built from one option declaration: a test walks the whole
``effdepth`` parser and the torchrun entry point's, and fails on an argument written by hand."""

import argparse
import ast
from pathlib import Path

import pytest

from effdepth.cli import build_parser
from effdepth.options.flags import option_flags
from effdepth.scale.distributed.__main__ import build_parser as torchrun_parser

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "effdepth"


def parsers():
    """``(command, parser)`` for the program, every command and every subcommand, torchrun's too."""
    todo = [("effdepth", build_parser()[0]), ("effdepth.scale.distributed", torchrun_parser())]
    while todo:
        name, parser = todo.pop()
        yield name, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", p) for sub, p in action.choices.items()]


def arguments():
    """Every argument but argparse's own (``--help``, the subcommand choosers)."""
    for name, parser in parsers():
        for action in parser._actions:
            if not isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
                yield pytest.param(action, id=f"{name} {'/'.join(action.option_strings) or action.dest}")


@pytest.mark.parametrize("action", arguments())
def test_every_argument_has_its_declaration(action):
    declared = getattr(action, "declared", None)
    assert declared is not None, "an argument added by hand: declare it with effdepth.options.option"
    assert declared.metadata["help"] and declared.metadata["cli"]
    if action.option_strings:
        assert tuple(action.option_strings) == option_flags(declared)
        assert action.dest == declared.name
    else:
        assert declared.metadata["positional"] and action.dest == declared.name


def test_the_walk_sees_the_flags_and_positionals_of_every_command():
    seen = {(name, a.dest) for name, p in parsers() for a in [*p.option_actions, *p._positionals._group_actions]}
    for expected in [
        ("effdepth measure", "model"),
        ("effdepth measure", "checkpoint_every_s"),
        ("effdepth sweep", "models"),
        ("effdepth experiment carry", "carries"),
        ("effdepth fetch", "revision"),
        ("effdepth.scale.distributed measure", "backend"),
    ]:
        assert expected in seen


def test_no_argument_is_added_by_hand_outside_the_builder():
    """``add_argument`` is called in one module: the builder (the parser walk cannot see a hand-written
    argument of a parser built elsewhere)."""
    calls = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                calls.append(path.relative_to(PACKAGE).as_posix())
    assert set(calls) == {"options/flags.py"}
