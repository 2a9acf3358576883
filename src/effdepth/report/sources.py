"""Finding and loading the saved results a report is made of."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import NamedTuple

from effdepth.errors import EffdepthError
from effdepth.report.wording import carry_value
from effdepth.results.loading import load
from effdepth.results.result import Result


class Source(NamedTuple):
    """One loaded result and the file it came from."""

    path: Path
    result: Result
    sha256: str
    label: str = ""


def find_result_files(paths) -> list[Path]:
    """Every ``result.json`` named by ``paths``: files as given, folders searched recursively but for hidden
    ones (``.git``); a file named twice is kept once, in first-seen order.

    >>> import effdepth, torch, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = effdepth.from_states(torch.randn(3, 8, 4, 8)).save(d / "a")
    >>> [p.relative_to(d).as_posix() for p in find_result_files([d])]
    ['a/result.json']
    """
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            hits = sorted(p for p in path.rglob("result.json") if not _hidden(p.relative_to(path)))
            if not hits:
                raise EffdepthError(
                    f"no result.json under {path}; pass the --out folder of an effdepth run or a result.json"
                )
            found += hits
        elif path.exists():
            found.append(path)
        else:
            raise EffdepthError(f"no such file or folder: {path}")
    unique: dict = {}
    for p in found:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def load_sources(paths) -> list[Source]:
    """Load every result named by ``paths``, with unique labels; a file that is not a result is an error.

    >>> import effdepth, torch, tempfile
    >>> p = effdepth.from_states(torch.randn(3, 8, 4, 8)).save(tempfile.mkdtemp())
    >>> [s.label for s in load_sources([p])]
    ['states']
    """
    files = find_result_files(paths)
    if not files:
        raise EffdepthError("no results given; pass result.json files or folders holding them")
    loaded = [_load_one(p) for p in files]
    labels = unique_labels([result_label(s.result) for s in loaded])
    return [s._replace(label=label) for s, label in zip(loaded, labels)]


def sort_by_ratio(sources: list[Source]) -> list[Source]:
    """Most sub-reference first (lowest D_eff / F_N of the first view); missing ratios last.

    >>> import effdepth, torch
    >>> s = [Source(Path("x"), effdepth.from_states(torch.randn(3, 8, 4, 8)), "")]
    >>> len(sort_by_ratio(s))
    1
    """

    def key(s: Source):
        r = s.result.default.ratio
        return (r is None or not math.isfinite(r), r if r is not None else 0.0, s.label)

    return sorted(sources, key=key)


def result_label(result: Result) -> str:
    """A short name for a result: the model id, with ``@revision`` unless main, and ``carry LAM`` when intervened.

    >>> import effdepth, torch
    >>> result_label(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    'states'
    """
    model = result.provenance.get("model") or {}
    name = str(model.get("id") or model.get("source") or "result")
    rev = model.get("revision")
    label = f"{name}@{rev}" if rev not in (None, "", "main") else name
    carry = carry_value(result.extras)
    return label if carry == "-" else f"{label} carry {carry}"  # an intervened model is not the model


def unique_labels(labels: list[str]) -> list[str]:
    """Number repeated labels so every row of a comparison can be told apart.

    >>> unique_labels(["a", "b", "a"])
    ['a (1)', 'b', 'a (2)']
    """
    seen: dict = {}
    out = []
    for x in labels:
        seen[x] = seen.get(x, 0) + 1
        out.append(x if labels.count(x) == 1 else f"{x} ({seen[x]})")
    return out


def _load_one(path: Path) -> Source:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EffdepthError(f"cannot read {path}: {exc.strerror}") from None
    try:
        result = load(path, expect=Result)
        _ = result.default  # an empty views dict is not a result either
        return Source(path, result, hashlib.sha256(data).hexdigest())
    except EffdepthError as exc:
        raise EffdepthError(str(exc) if str(path) in str(exc) else f"{path}: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError, StopIteration) as exc:
        raise EffdepthError(
            f"{path} is not a complete effdepth result ({type(exc).__name__}: {exc}); was it written by effdepth?"
        ) from None


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") for part in relative.parts[:-1])


#: What a sweep's job leaves in its folder when it could not be measured.
ERROR_FILE = "error.json"


def read_error(path: Path) -> tuple:
    """``(model or None, error)`` from a job's ``error.json``; an unreadable one says so.

    >>> read_error(Path("no/such/error.json"))
    (None, 'unreadable error.json')
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data.get("model"), str(data.get("error") or "unknown error")
    except (OSError, ValueError, AttributeError):
        return None, "unreadable error.json"


def failed_models(paths) -> list:
    """``(model, error)`` for every job of a sweep folder among ``paths`` that left ``error.json``.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "m").mkdir()
    >>> _ = (d / "m" / "error.json").write_text('{"model": "m", "error": "no such model"}')
    >>> failed_models([d])
    [('m', 'no such model')]
    """
    out = []
    for raw in paths:
        folder = Path(raw)
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob(ERROR_FILE)):
            if (path.parent / "result.json").is_file():
                continue  # a retry succeeded: the result is what counts
            model, error = read_error(path)
            out.append((str(model or path.parent), error))
    return out
