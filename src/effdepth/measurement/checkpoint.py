"""Interrupt and resume: a measurement's samples in ``DIR/checkpoint/pooled/`` (:mod:`effdepth.results.store`)
and ``DIR/checkpoint/state.json`` (what they belong to, how many passages), replaced atomically after the
store is flushed, so a killed process leaves the previous checkpoint or the new one, never a mixture.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import threading
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.files import write_json_atomic

CHECKPOINT = "checkpoint"


class MeasurementInterrupted(EffdepthError):
    """Raised after SIGINT/SIGTERM once the partial statistics are safe; exit status 130 or 143.

    >>> MeasurementInterrupted("stopped", signal.SIGTERM).exit_code
    143
    """

    exit_code = 130

    def __init__(self, message: str, signum: int = signal.SIGINT):
        super().__init__(message)
        self.exit_code = 128 + int(signum)


class CheckpointMismatch(EffdepthError):
    """Saved partial statistics cannot be continued: damaged, or from another run."""


def checkpoint_dir(out) -> Path:
    return Path(out) / CHECKPOINT


def save_checkpoint(folder: Path, meta: dict) -> None:
    write_json_atomic(Path(folder) / "state.json", meta)


def load_checkpoint(folder: Path) -> dict:
    """What a checkpoint recorded; a one-line error when it is absent or damaged."""
    meta_path = Path(folder) / "state.json"
    if not meta_path.is_file():
        raise EffdepthError(
            f"nothing to resume in {Path(folder).parent}: no {CHECKPOINT}/state.json; run without --resume to start"
        )
    try:
        return json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointMismatch(
            f"the checkpoint in {folder} is damaged ({exc}); delete it and run without --resume"
        ) from None


def saved_run(folder: Path) -> dict | None:
    """What a checkpoint recorded about its run, without reading its arrays; ``None`` when it records nothing.

    >>> import tempfile
    >>> saved_run(Path(tempfile.mkdtemp())) is None
    True
    """
    meta_path = Path(folder) / "state.json"
    if not meta_path.is_file():
        return None
    try:
        return json.loads(meta_path.read_text()).get("run")
    except (OSError, ValueError, AttributeError):
        return None


def remove_checkpoint(folder: Path) -> None:
    folder = Path(folder)
    if folder.is_dir():
        for f in folder.iterdir():
            if not f.is_dir():  # passage mode's pooled vectors stay until their result moves them
                f.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


class InterruptFlag:
    """Set by the first SIGINT/SIGTERM (checked between batches); a second stops at once.

    >>> flag = InterruptFlag()
    >>> try:
    ...     flag.interrupt_now()
    ... except KeyboardInterrupt:
    ...     print(bool(flag), "stopped at once")
    False stopped at once
    """

    def __init__(self):
        self.signal: int | None = None

    def __bool__(self) -> bool:
        return self.signal is not None

    def interrupt_now(self) -> None:
        """Stop at once."""
        raise KeyboardInterrupt


@contextlib.contextmanager
def graceful_interrupts():
    """Turn SIGINT/SIGTERM into a flag checked between batches (main thread only)."""
    flag = InterruptFlag()
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return

    def handler(signum, frame):
        if flag:
            # A stuck or huge forward pass must not make the user wait: stop now.
            flag.interrupt_now()
            return
        flag.signal = signum
        print(
            f"effdepth: {signal.Signals(signum).name} received: stopping after this batch "
            "(send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
