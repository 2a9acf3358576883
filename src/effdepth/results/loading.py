"""``effdepth.load``: any file effdepth saves, back as its object.

A measurement's ``result.json`` is a :class:`~effdepth.results.result.Result`; any other file is a
study's record, of a :class:`StudyKind` its study registers here when imported, which says how it is
read back and presented (so the layers below the studies hold no study's code). A folder means the
first of those it holds; anything else is a one-line error.

>>> import effdepth, torch, tempfile
>>> p = effdepth.from_states(torch.randn(4, 8, 10, 8)).save(tempfile.mkdtemp())
>>> type(load(p)).__name__, type(load(p.parent)).__name__
('Result', 'Result')
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from effdepth.errors import EffdepthError
from effdepth.results.files import read_json
from effdepth.results.result import SCHEMA as RESULT_SCHEMA
from effdepth.results.result import Result, refuse_newer, with_pooled


@dataclass(frozen=True)
class StudyKind:
    """A kind of saved study: its record (``<name>.json`` of ``schema``), read back by ``read(data, path)``
    as a ``type``; and what a report says of it: a ``title`` and ``subject`` (what it is of), its
    ``sections`` (report tables), its ``figure`` and its figure's ``caption``, and the ``headline`` that
    ``effdepth show`` prints above the sections. ``rank`` orders the kinds where a folder is searched and messages list them."""

    rank: int
    name: str
    schema: str
    type: type
    read: Callable
    title: str
    caption: str
    subject: Callable
    sections: Callable
    figure: Callable
    headline: Callable

    @property
    def file(self) -> str:
        return f"{self.name}.json"


#: Every study kind, by name, in the order a folder is searched (by rank, whatever the order of imports).
KINDS: dict = {}


def register(kind: StudyKind) -> StudyKind:
    """Make ``kind`` loadable and reportable (each study's module calls this when imported)."""
    KINDS[kind.name] = kind
    ranked = sorted(KINDS.values(), key=lambda k: k.rank)
    KINDS.clear()
    KINDS.update((k.name, k) for k in ranked)
    return kind


@dataclass
class SavedStudy:
    """A study's summary read back as the JSON it saved (``kind`` ``null`` or ``prune``), and where.

    >>> SavedStudy("prune", {"skips": [1]}).record["skips"]
    [1]
    """

    kind: str
    record: dict
    path: Path | None = None


def kind_of(obj) -> StudyKind | None:
    """The study kind of anything :func:`load` returns, ``None`` for a result.

    >>> kind_of(object()) is None
    True
    """
    if isinstance(obj, SavedStudy):
        return KINDS[obj.kind]
    return next((k for k in KINDS.values() if k.type is not SavedStudy and isinstance(obj, k.type)), None)


def files() -> tuple:
    """The files a folder is searched for, in this order."""
    return ("result.json", *(k.file for k in KINDS.values()))


def _accepted() -> str:
    *first, last = files()
    return f"a {', '.join(first)} or {last}, or the folder holding one"


def load(path, expect: type | None = None):
    """The object of a saved effdepth file (see the module): a Result or a study's record; ``expect``
    (e.g. ``Result``) refuses any other kind in one line.

    >>> import tempfile
    >>> from effdepth.studies.experiment import ExperimentResult
    >>> type(load(ExperimentResult({"layers": 2}, []).save(tempfile.mkdtemp()))).__name__
    'ExperimentResult'
    """
    if expect is Result:  # only a measurement will do: its own schema check says why anything else is not one
        return with_pooled(Result.from_dict(read_json(path, "result", "result.json")), path)
    expected = next((k.name for k in KINDS.values() if expect is not None and k.type is expect), "result")
    loaded = _load(path, expected)
    if expect is not None and not isinstance(loaded, expect):
        what = "the result.json of effdepth measure" if expected == "result" else f"its {expected}.json"
        raise EffdepthError(
            f"{path} holds a {type(loaded).__name__}, not a {expect.__name__}; give {what} (or its folder)"
        )
    return loaded


def _load(path, expected: str = "result"):
    path = _locate(Path(path), expected)
    kinds = {k.file: k for k in KINDS.values()}
    data = read_json(path, kinds[path.name].name if path.name in kinds else "result", path.name)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == RESULT_SCHEMA:
        return with_pooled(Result.from_dict(data), path)
    for kind in KINDS.values():
        if schema == kind.schema:
            return kind.read(data, path)
    for known in (RESULT_SCHEMA, *(k.schema for k in KINDS.values())):
        refuse_newer(schema, known, str(path))
    raise EffdepthError(
        f"{path} is not an effdepth file (schema {schema!r}); effdepth.load and effdepth show read {_accepted()}"
    )


def _locate(path: Path, expected: str) -> Path:
    if path.is_dir():
        for name in files():
            if (path / name).is_file():
                return path / name
        raise EffdepthError(f"no {expected} at {path}: it holds none of {', '.join(files())}; pass {_accepted()}")
    if not path.exists():
        raise EffdepthError(f"no {expected} at {path}; pass {_accepted()}")
    return path


def read_rows(path, text_columns=()) -> list:
    """The rows of a summary table (``summary.csv``, ``trajectory.csv``) with their types back:
    numbers, flags, and None for empty cells; ``text_columns`` stay text.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = p.write_text("revision,F_L,N,note\\n100,1.5,3,\\n")
    >>> read_rows(p, {"revision", "note"})
    [{'revision': '100', 'F_L': 1.5, 'N': 3, 'note': None}]
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise EffdepthError(f"cannot read {path} ({type(exc).__name__}); rerun the command that wrote it") from None
    return [{k: _cell(v, k in text_columns) for k, v in row.items()} for row in rows]


def _cell(text: str | None, is_text: bool):
    if text is None or text == "":
        return None
    if is_text:
        return text
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text
