"""The ``effdepth`` command line: one module per command group registers its commands; :func:`main`
dispatches.
"""

from __future__ import annotations

import os
import sys
import traceback

from effdepth.cli import carry, compare, fetch, measure, report, scale, studies
from effdepth.cli.arguments import silence_stdout
from effdepth.errors import EffdepthError
from effdepth.options.flags import Parser, add_option_arguments
from effdepth.options.groups import ProgramOptions, default_out, ensure_writable

__all__ = ["main", "build_parser", "default_out", "ensure_writable"]

#: Command groups in the order ``effdepth --help`` lists them.
GROUPS = (measure, compare, report, carry, studies, scale, fetch)


def build_parser() -> tuple:
    """``(parser, {command: handler})``.

    >>> parser, commands = build_parser()
    >>> sorted(commands)[:3]
    ['analyse', 'claims', 'compare']
    """
    parser = Parser(prog="effdepth", description="Effective depth (D_eff) of a transformer's residual stream.")
    add_option_arguments(parser, ProgramOptions)
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND")
    commands: dict = {}
    for group in GROUPS:
        commands.update(group.register(sub))
    return parser, commands


def run_command(command, args) -> int:
    """Apply ``--offline`` before anything reads from the hub, and keep the hub library's retry chatter quiet."""
    from effdepth.errors import command_line
    from effdepth.models.hub import quiet_hub, set_offline

    if getattr(args, "offline", False):
        set_offline(True)
    with quiet_hub(), command_line():
        return command(args)


def main(argv=None) -> int:
    """Entry point; returns the exit status (0, 2 for a user error, 130 on Ctrl-C)."""
    try:
        parser, commands = build_parser()
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else map(str, argv))  # which flags were typed (resume)
        if args.command is None:
            parser.print_help()
            return 2
        return run_command(commands[args.command], args)
    except EffdepthError as exc:
        print(f"effdepth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("effdepth: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `effdepth show RUN | head -1`: the reader left; exit quietly like other Unix tools.
        silence_stdout()
        return 0
    except Exception as exc:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("EFFDEPTH_DEBUG"):
            traceback.print_exc()
        else:
            print(
                f"effdepth: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                "(set EFFDEPTH_DEBUG=1 for the traceback, and please report it)",
                file=sys.stderr,
            )
        return 1
