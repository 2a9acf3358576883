"""Files that are never half-written, file fingerprints, and sizes in bytes written as people read them.

Every file effdepth writes goes to a temporary file in the destination's
folder and is renamed into place, so a reader or a crash sees the old file or
the new one, never a mixture.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
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
