"""Interrupt and resume: partial statistics on disk, written atomically.

A measurement keeps per-sequence statistics (small, additive), so stopping
loses nothing that was accumulated: ``DIR/checkpoint/`` holds them
(``state.npz``, loaded with ``allow_pickle=False``) and ``state.json`` (what
they belong to). The JSON is written last and names the arrays file's sha256,
so a process killed while writing leaves either the previous checkpoint or
the new one, never a mixture.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.files import file_sha256, write_json_atomic

CHECKPOINT = "checkpoint"


class MeasurementInterrupted(EffdepthError):
    """Raised after SIGINT/SIGTERM once the partial statistics are safe.

    The exit status is the shell's for the signal: 130 (SIGINT) or 143 (SIGTERM).

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


def save_checkpoint(folder: Path, arrays: dict, meta: dict) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".state.", suffix=".npz", dir=folder)
    os.close(fd)
    try:
        np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()})
        digest = file_sha256(Path(tmp))
        name = f"state-{digest[:16]}.npz"
        os.replace(tmp, folder / name)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_json_atomic(folder / "state.json", {**meta, "arrays": name, "arrays_sha256": digest})
    for old in folder.glob("state-*.npz"):  # earlier arrays, no longer referenced
        if old.name != name:
            old.unlink(missing_ok=True)


def load_checkpoint(folder: Path) -> tuple:
    """``(arrays, meta)`` of a checkpoint, verified; a clear error when absent or damaged."""
    folder = Path(folder)
    meta_path = folder / "state.json"
    if not meta_path.is_file():
        raise EffdepthError(
            f"nothing to resume in {folder.parent}: no {CHECKPOINT}/state.json; run without --resume to start"
        )
    try:
        meta = json.loads(meta_path.read_text())
        arrays_path = folder / meta["arrays"]
        if file_sha256(arrays_path) != meta["arrays_sha256"]:
            raise ValueError("checksum mismatch")
        with np.load(arrays_path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointMismatch(
            f"the checkpoint in {folder} is damaged ({exc}); delete it and run without --resume"
        ) from None
    return arrays, meta


def saved_run(folder: Path) -> dict | None:
    """What a checkpoint recorded about its run (options and command, see :func:`save_checkpoint`'s ``meta["run"]``),
    without reading its arrays; ``None`` when there is no checkpoint or it records nothing.

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
    """Set by the first SIGINT/SIGTERM; a second signal of either kind stops at once
    (:meth:`interrupt_now`), except inside :meth:`deferred`, which it waits for.

    >>> flag = InterruptFlag()
    >>> try:
    ...     with flag.deferred():
    ...         flag.interrupt_now()
    ...         print("the batch's statistics added whole")
    ... except KeyboardInterrupt:
    ...     print("stopped after them")
    the batch's statistics added whole
    stopped after them
    """

    def __init__(self):
        self.signal: int | None = None
        self._deferring = False
        self._stop_pending = False

    def __bool__(self) -> bool:
        return self.signal is not None

    def interrupt_now(self) -> None:
        """Stop at once: raise KeyboardInterrupt, or at the end of the :meth:`deferred` block."""
        if self._deferring:
            self._stop_pending = True
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def deferred(self):
        """A block that a second signal does not cut short (adding a batch's statistics)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._stop_pending:
            self._stop_pending = False
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
            # A stuck or huge forward pass must not make the user wait: stop now (after the
            # statistics of a batch being added, so what is saved is every finished batch).
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
