"""The record of a trajectory: ``trajectory.json`` (checkpoints, duplicates, skipped names, the preset) and
the rows of ``trajectory.csv`` beside it, read back as a :class:`SavedTrajectory`.

>>> import tempfile, json, pathlib, effdepth
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "trajectory.json").write_text(json.dumps({"schema": SCHEMA, "model": "m", "checkpoints": [], "duplicates": {}}))
>>> _ = (d / "trajectory.csv").write_text("model,revision,step,final,similarity,D_eff\\nm,step1,1,False,cka,1.25\\n")
>>> effdepth.load(d).rows
[{'model': 'm', 'revision': 'step1', 'step': 1, 'final': False, 'similarity': 'cka', 'D_eff': 1.25}]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.loading import read_rows

SCHEMA = "effdepth.trajectory/1"
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


def trajectory_from_dict(data: dict, path: Path) -> SavedTrajectory:
    """A :class:`SavedTrajectory` from ``trajectory.json``'s data and the ``trajectory.csv`` beside it; an
    older table's ``F_N`` column is read as ``F_L``, the one name of the structural reference.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "trajectory.csv").write_text("model,revision,F_N\\nm,main,1.5\\n")
    >>> saved = trajectory_from_dict({"model": "m", "duplicates": {"b": "a"}}, d / "trajectory.json")
    >>> saved.duplicates, saved.rows[0]["F_L"]
    ({'b': 'a'}, 1.5)
    """
    table = Path(path).with_name("trajectory.csv")
    if not table.is_file():
        raise EffdepthError(
            f"{path} has no trajectory.csv beside it; rerun effdepth trajectory with the same --out to write it"
        )
    rows = [{("F_L" if k == "F_N" else k): v for k, v in row.items()} for row in read_rows(table, TEXT_COLUMNS)]
    checkpoints = list(data.get("checkpoints") or [])
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
