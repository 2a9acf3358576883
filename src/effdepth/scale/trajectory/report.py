"""What a report and the terminal say of a trajectory: one row per checkpoint with the update diagnostic,
and its figure (:mod:`.figures`).

>>> from effdepth.scale.trajectory.result import SavedTrajectory
>>> print(trajectory_content([], {"step2": "step1"}).note.splitlines()[-1])
step2: same weights as step1 (flagged, not measured again)
"""

from __future__ import annotations

from effdepth.report.content.model import Cell, Section, Table
from effdepth.report.numbers import fmt, format_params
from effdepth.report.rows import lead_rows
from effdepth.results.loading import StudyKind, register
from effdepth.scale.sweep.report import job_row, row_cell
from effdepth.scale.trajectory.result import SCHEMA, SavedTrajectory, trajectory_from_dict


def trajectory_content(rows: list, duplicates: dict | None = None, preset: dict | None = None) -> Table:
    """One row per checkpoint and similarity (its first view with a value): tokens seen, D_eff, F_L,
    D_eff/F_L, and D_eff/L of the states and (passage mode) of the updates, with intervals.

    >>> rows = [{"revision": "step1", "tokens_seen": 2_097_152, "similarity": "cka", "view": "default", "status": "ok",
    ...          "L": 4, "N": 4, "D_eff": 1.2, "D_eff_lo": 1.1, "D_eff_hi": 1.3, "F_L": 1.6, "ratio": 0.75,
    ...          "updates_D_eff": 2.0, "updates_D_eff_lo": 1.8, "updates_D_eff_hi": 2.2}]
    >>> t = trajectory_content(rows)
    >>> [f"{c.text} {c.ci}".strip() for c in t.rows[0]][:2], [f"{c.text} {c.ci}".strip() for c in t.rows[0]][7:9]
    (['step1', '2.1M'], ['0.300 [0.275, 0.325]', '0.500 [0.450, 0.550]'])
    """
    header = [
        "checkpoint",
        "tokens seen",
        "similarity",
        "view",
        "N",
        "D_eff",
        "F_L",
        "D_eff/L",
        "updates D_eff/L",
        "D_eff/F_L",
        "D_eff - previous",
        "status",
    ]
    body = [
        job_row(r, _checkpoint(r), len(header), _per_layer)
        for r in lead_rows(rows, lambda r: (r["revision"], r.get("similarity")))
    ]
    notes = []
    if preset:
        notes.append(f"preset {preset['name']}: {preset['model']}, {preset['revisions']}; {preset['source']}")
    notes.append(
        "D_eff/L and updates D_eff/L: D_eff of the states and of the updates f_l = h_l - h_l-1 over the number "
        "of layers L, with 95% intervals (the update diagnostic; passage mode, CKA estimators; n/a otherwise)"
    )
    notes.append(
        "D_eff - previous: the paired difference to the checkpoint before on the same passages, with its 95% "
        "interval; * where D_eff moved beyond it (the interval excludes 0)"
    )
    notes += [
        f"{dup}: same weights as {original} (flagged, not measured again)"
        for dup, original in (duplicates or {}).items()
    ]
    return Table(header, body, [False, True, False, False] + [True] * 7 + [False], note="\n".join(notes))


def _checkpoint(r: dict) -> list:
    seen = r.get("tokens_seen")
    step = format_params(seen) if seen is not None else f"step {r['step']}" if r.get("step") is not None else "-"
    return [Cell(str(r["revision"])), Cell(step), Cell(str(r.get("similarity") or "-"))]


def _per_layer(r: dict) -> list:
    layers = r.get("L")
    step = row_cell(r, "dD_eff") if r.get("dD_eff") is not None else Cell("-")
    if r.get("moved"):
        step.text += " *"
    return [row_cell(r, "D_eff", layers), row_cell(r, "updates_D_eff", layers), Cell(fmt(r.get("ratio"))), step]


def headline(saved: SavedTrajectory) -> str:
    """What ``effdepth show`` prints above a saved trajectory's table.

    >>> headline(SavedTrajectory("m", [{"revision": "step1"}, {"revision": "step1"}]))
    'trajectory of m: 1 checkpoints'
    """
    return f"trajectory of {saved.model}: {len({r['revision'] for r in saved.rows})} checkpoints"


def subject(saved: SavedTrajectory) -> str:
    return f"{saved.model} (preset {saved.preset['name']})" if saved.preset else saved.model


def trajectory_figure(rows: list, title: str = ""):
    """:func:`.figures.trajectory_figure` (imported when drawn: plotting stays out of ``import effdepth``)."""
    from effdepth.scale.trajectory.figures import trajectory_figure

    return trajectory_figure(rows, title=title)


KIND = register(
    StudyKind(
        3,
        "trajectory",
        SCHEMA,
        SavedTrajectory,
        trajectory_from_dict,
        "trajectory",
        "D_eff (95% CI), F_L and the matched references against training tokens; below, when measured "
        "(passage mode), the update diagnostic: D_eff/L of the updates f_l beside the states', with "
        "intervals. Grey crosses: checkpoints with the weights of an earlier one.",
        subject,
        lambda saved: [Section("", trajectory_content(saved.rows, saved.duplicates, saved.preset))],
        lambda saved: trajectory_figure(saved.rows, title=subject(saved)),
        headline,
    )
)
