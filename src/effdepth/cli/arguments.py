"""What the commands share beyond their flags."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

from effdepth.options import RunOptions
from effdepth.options.groups import ensure_writable


def run_options_from_args(args, **values) -> RunOptions:
    """:class:`~effdepth.options.RunOptions` from ``--no-progress`` and ``--checkpoint-every``.

    >>> import argparse
    >>> run_options_from_args(argparse.Namespace(progress=False, checkpoint_every_s=5.0)).checkpoint_every_s
    5.0
    """
    flags = {name: getattr(args, name) for name in ("progress", "checkpoint_every_s") if hasattr(args, name)}
    return RunOptions(**flags, **values)  # a flag the command does not have keeps its declared default


def typed(args, flags) -> bool:
    """Whether one of ``flags`` was typed on the command line (``--flag V`` or ``--flag=V``), not left at its default.

    >>> import argparse
    >>> typed(argparse.Namespace(argv=["--seed=3"]), ["--seed"]), typed(argparse.Namespace(argv=[]), ["--seed"])
    (True, False)
    """
    return any(a == flag or a.startswith(flag + "=") for a in getattr(args, "argv", None) or [] for flag in flags)


@contextlib.contextmanager
def output_folder(folder: Path):
    """:func:`~effdepth.options.groups.ensure_writable`, and when the block fails, remove the folders it
    created that are still empty: a run that fails before writing anything leaves no empty output folder behind.

    >>> import tempfile
    >>> from effdepth.errors import EffdepthError
    >>> out = Path(tempfile.mkdtemp()) / "runs" / "x"
    >>> try:
    ...     with output_folder(out):
    ...         raise EffdepthError("the model did not load")
    ... except EffdepthError:
    ...     pass
    >>> out.exists(), out.parent.exists()
    (False, False)
    """
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    ensure_writable(folder)
    try:
        yield folder
    except BaseException:
        for made in created:
            try:
                made.rmdir()  # only an empty folder: anything written (a checkpoint, a result) stays
            except OSError:
                break
        raise


def log_line(line: str) -> None:
    """Progress lines of sweeps and trajectories, flushed at once; a reader that leaves
    (``effdepth sweep ... | head -1``) stops the lines, not the run.
    """
    try:
        print(line, flush=True)
    except BrokenPipeError:
        silence_stdout()


def silence_stdout() -> None:
    """Point stdout at /dev/null so that no later write (nor Python's exit-time flush) fails on a
    closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
