"""Files that are never half-written (a temporary file renamed into place), one writer per output folder
(:func:`one_writer`), and file fingerprints.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import socket
import tempfile
import time
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError


def write_atomic(path, data: bytes | None = None, *, writer=None) -> Path:
    """Write ``data`` (or call ``writer(binary_file)``) to ``path`` atomically.

    >>> import tempfile
    >>> p = write_atomic(Path(tempfile.mkdtemp()) / "a.txt", b"hello")
    >>> p.read_bytes()
    b'hello'
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise EffdepthError(f"cannot write to {path.parent}: {exc.strerror}; choose another output folder") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            if writer is not None:
                writer(fh)
            else:
                fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; outputs are meant to be shared
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise EffdepthError(f"cannot write {path}: {exc.strerror}; choose another output folder") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path, data) -> Path:
    """Standard JSON (no NaN), written atomically; numpy numbers and arrays and paths are converted.

    >>> import tempfile, numpy as np
    >>> p = write_json_atomic(Path(tempfile.mkdtemp()) / "a.json", {"n": np.int64(3), "x": np.arange(2.0), "p": Path("a")})
    >>> json.loads(p.read_text())
    {'n': 3, 'x': [0.0, 1.0], 'p': 'a'}
    """
    text = json.dumps(data, indent=1, allow_nan=False, default=_json_default)
    return write_atomic(path, text.encode("utf-8"))


def finite(obj):
    """JSON has no inf/nan: ``obj`` with them as None (lists and tuples as lists), so a file stays standard.

    >>> finite({"x": [1.0, float("nan")], "y": (float("inf"),)})
    {'x': [1.0, None], 'y': [None]}
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    return obj


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def read_json(path, what: str, default_name: str):
    """JSON from ``path`` (or ``path/default_name`` for a folder), with one-line
    errors that name ``what`` was expected (e.g. "result")."""
    path = Path(path)
    if path.is_dir():
        path = path / default_name
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise EffdepthError(f"no {what} at {path}; pass a {default_name} or the --out folder of a run") from None
    except IsADirectoryError:
        raise EffdepthError(f"{path} is a folder, not a {what} file") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EffdepthError(
            f"{path} is not a readable {what} file ({type(exc).__name__}); was it written by effdepth?"
        ) from None


#: The file in an output folder that says which run writes it (held with an OS lock while the run lasts).
WRITER = ".effdepth-writer"


@contextlib.contextmanager
def one_writer(folder):
    """Hold ``folder`` as its one writer for the block; a second run refuses at once, in one line that
    names the first (its pid and host). The hold is the operating system's lock on ``folder/.effdepth-writer``,
    so a run that dies holds nothing: its file, naming a process that is gone, is taken over.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> with one_writer(folder), one_writer(folder):
    ...     pass  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: ... is being written by another effdepth run (pid ...); wait for it to finish, or write this run to another folder (--out)
    >>> with one_writer(folder):
    ...     (folder / WRITER).is_file()
    True
    >>> (folder / WRITER).exists()
    False
    """
    import fcntl

    path = Path(folder) / WRITER
    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~_umask())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _writer(fd)
            os.close(fd)
            raise EffdepthError(
                f"{path.parent} is being written by another effdepth run (pid {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')}); wait for it to finish, or write this run to another folder (--out)"
            ) from None
        with contextlib.suppress(FileNotFoundError):
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break  # else the file was a finished run's, removed as we opened it: open the new one
        os.close(fd)
    os.ftruncate(fd, 0)
    os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode())
    try:
        yield path.parent
    finally:
        path.unlink(missing_ok=True)
        os.close(fd)


def _writer(fd: int) -> dict:
    """What the holder of the lock on ``fd`` wrote about itself (it writes just after taking the lock)."""
    for _ in range(20):
        with contextlib.suppress(ValueError):
            return json.loads(os.pread(fd, 4096, 0))
        time.sleep(0.05)
    return {}


def file_sha256(path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
