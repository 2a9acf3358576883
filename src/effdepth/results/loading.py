"""``effdepth.load``: any file effdepth saves, back as its object.

- ``result.json`` (``effdepth measure``, a sweep's jobs, ``carry-<lam>/``): a :class:`~effdepth.results.result.Result`;
- ``intervention.json`` (``effdepth intervene``): an :class:`~effdepth.results.carry.InterventionResult`;
- ``experiment.json`` (``effdepth experiment carry``): an :class:`~effdepth.results.carry.ExperimentResult`;
- ``trajectory.json`` with its ``trajectory.csv`` (``effdepth trajectory``): a :class:`SavedTrajectory`;
- ``null.json`` (``effdepth null``) and ``prune.json`` (``effdepth prune-check``): a :class:`SavedStudy`.

A folder means the first of those it holds. Anything else is a one-line error that says what
can be loaded.

>>> import effdepth, torch, tempfile
>>> p = effdepth.from_states(torch.randn(4, 8, 10, 8)).save(tempfile.mkdtemp())
>>> type(load(p)).__name__, type(load(p.parent)).__name__
('Result', 'Result')
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.carry import EXPERIMENT_SCHEMA, INTERVENTION_SCHEMA, ExperimentResult, InterventionResult
from effdepth.results.files import read_json
from effdepth.results.result import SCHEMA as RESULT_SCHEMA
from effdepth.results.result import Result, refuse_newer, with_pooled

TRAJECTORY_SCHEMA = "effdepth.trajectory/1"
NULL_SCHEMA = "effdepth.null/1"
PRUNE_SCHEMA = "effdepth.prune/1"
#: The studies whose summary file is read back as a :class:`SavedStudy`, by schema.
STUDIES = {NULL_SCHEMA: "null", PRUNE_SCHEMA: "prune"}

#: The files a folder is searched for, in this order.
FILES = ("result.json", "intervention.json", "experiment.json", "trajectory.json", "null.json", "prune.json")
ACCEPTED = (
    "a result.json, intervention.json, experiment.json, trajectory.json, null.json or prune.json, or the folder "
    "holding one"
)

#: Columns of a trajectory table that stay text (every other column is a number, a flag or empty).
TEXT_COLUMNS = {
    "model",
    "family",
    "revision",
    "track",
    "duplicate_of",
    "weights",
    "weights_source",
    "view",
    "similarity",
    "status",
    "error",
    "key",
    "note",
}


@dataclass
class SavedStudy:
    """A study's summary read back (``kind`` ``null`` or ``prune``): the record it saved, and where.

    >>> SavedStudy("prune", {"skips": [1]}).record["skips"]
    [1]
    """

    kind: str
    record: dict
    path: Path | None = None


@dataclass
class SavedTrajectory:
    """A trajectory read back from its folder: the table rows (one per checkpoint, view and
    similarity, as in ``trajectory.csv``) and what ``trajectory.json`` records.

    >>> SavedTrajectory("EleutherAI/pythia-70m", []).duplicates
    {}
    """

    model: str
    rows: list
    checkpoints: list = field(default_factory=list)
    duplicates: dict = field(default_factory=dict)
    skipped: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    path: Path | None = None
    preset: dict | None = None  # the trajectory preset (name, model, revisions, source) it was run from


def load(path, expect: type | None = None):
    """The object of a saved effdepth file (see the module): a Result, an InterventionResult, an
    ExperimentResult, a SavedTrajectory or a SavedStudy; ``expect`` (e.g. ``Result``) refuses any other
    kind in one line.

    >>> import tempfile
    >>> from effdepth.results.carry import ExperimentResult
    >>> type(load(ExperimentResult({"layers": 2}, []).save(tempfile.mkdtemp()))).__name__
    'ExperimentResult'
    """
    if expect is Result:  # only a measurement will do: its own schema check says why anything else is not one
        return with_pooled(Result.from_dict(read_json(path, "result", "result.json")), path)
    loaded = _load(path)
    if expect is not None and not isinstance(loaded, expect):
        raise EffdepthError(
            f"{path} holds a {type(loaded).__name__}, not a {expect.__name__}; give the result.json of "
            "effdepth measure (or its folder)"
        )
    return loaded


def _load(path):
    path = _locate(Path(path))
    data = read_json(path, _kind(path), path.name)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == RESULT_SCHEMA:
        return with_pooled(Result.from_dict(data), path)
    if schema == INTERVENTION_SCHEMA:
        return InterventionResult.from_dict(data)
    if schema == EXPERIMENT_SCHEMA:
        return ExperimentResult.from_dict(data)
    if schema in STUDIES:
        return SavedStudy(STUDIES[schema], data, path)
    if schema == TRAJECTORY_SCHEMA:
        return trajectory_from_dict(data, path)
    for known in (RESULT_SCHEMA, INTERVENTION_SCHEMA, EXPERIMENT_SCHEMA, TRAJECTORY_SCHEMA, *STUDIES):
        refuse_newer(schema, known, str(path))
    raise EffdepthError(
        f"{path} is not an effdepth file (schema {schema!r}); effdepth.load and effdepth show read {ACCEPTED}"
    )


def load_trajectory(path) -> SavedTrajectory:
    """A trajectory's folder (or its ``trajectory.json``), with the rows of ``trajectory.csv``.

    >>> import tempfile, json, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "trajectory.json").write_text(json.dumps({"schema": TRAJECTORY_SCHEMA, "model": "m", "checkpoints": [],
    ...                                                      "duplicates": {}}))
    >>> _ = (d / "trajectory.csv").write_text("model,revision,step,final,similarity,D_eff\\nm,step1,1,False,cka,1.25\\n")
    >>> load_trajectory(d).rows
    [{'model': 'm', 'revision': 'step1', 'step': 1, 'final': False, 'similarity': 'cka', 'D_eff': 1.25}]
    """
    path = Path(path)
    if path.is_dir():
        path = path / "trajectory.json"
    return trajectory_from_dict(read_json(path, "trajectory", "trajectory.json"), path)


def trajectory_from_dict(data: dict, path: Path) -> SavedTrajectory:
    """A :class:`SavedTrajectory` from ``trajectory.json``'s data and the ``trajectory.csv`` beside it.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "trajectory.csv").write_text("model,revision\\nm,main\\n")
    >>> trajectory_from_dict({"model": "m", "duplicates": {"b": "a"}}, d / "trajectory.json").duplicates
    {'b': 'a'}
    """
    table = Path(path).with_name("trajectory.csv")
    if not table.is_file():
        raise EffdepthError(
            f"{path} has no trajectory.csv beside it; rerun effdepth trajectory with the same --out to write it"
        )
    rows, checkpoints = read_rows(table), list(data.get("checkpoints") or [])
    if len(rows) < len(checkpoints):  # one row per checkpoint measured or flagged
        raise EffdepthError(
            f"{table} has {len(rows)} rows for the {len(checkpoints)} checkpoints of {path.name}: it is damaged; "
            "rerun effdepth trajectory with the same --out to write it again (finished checkpoints are not measured again)"
        )
    return SavedTrajectory(
        str(data.get("model")),
        rows,
        checkpoints,
        dict(data.get("duplicates") or {}),
        list(data.get("skipped") or []),
        list(data.get("notes") or []),
        Path(path),
        data.get("preset"),
    )


def read_rows(path) -> list:
    """The rows of a summary table (``summary.csv``, ``trajectory.csv``) with their types back:
    numbers, flags, and None for empty cells.

    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
    >>> _ = p.write_text("revision,F_N,N,note\\n100,1.5,3,\\n")
    >>> read_rows(p)
    [{'revision': '100', 'F_N': 1.5, 'N': 3, 'note': None}]
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise EffdepthError(f"cannot read {path} ({type(exc).__name__}); rerun the command that wrote it") from None
    return [{k: _cell(k, v) for k, v in row.items()} for row in rows]


def _cell(column: str, text: str | None):
    if text is None or text == "":
        return None
    if column in TEXT_COLUMNS:
        return text
    if text in ("True", "False"):
        return text == "True"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _locate(path: Path) -> Path:
    if path.is_dir():
        for name in FILES:
            if (path / name).is_file():
                return path / name
        raise EffdepthError(f"no result at {path}: it holds none of {', '.join(FILES)}; pass {ACCEPTED}")
    if not path.exists():
        raise EffdepthError(f"no result at {path}; pass {ACCEPTED}")
    return path


def _kind(path: Path) -> str:
    """What the file's name says it should be, for the error of an unreadable one."""
    stem = path.stem if path.suffix == ".json" else ""
    return stem if stem in ("intervention", "experiment", "trajectory", "null", "prune") else "result"
