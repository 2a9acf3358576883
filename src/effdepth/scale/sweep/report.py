"""What the terminal and a report say of a sweep's (or a trajectory's) summary rows: one row per job and
similarity (:func:`suite_table`); its figure is :mod:`.figures`.
"""

from __future__ import annotations

from effdepth.report.content.model import Cell, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.report.plain import table_text
from effdepth.report.rows import lead_rows


def suite_table(rows: list[dict]) -> Table:
    """One row per job and similarity (its first view with a value): N, D_eff with its interval, F_L, the
    ratio, and in passage mode the updates' D_eff, whole and over L; else the status and error.

    >>> t = suite_table([{"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok",
    ...                   "N": 3, "D_eff": 1.2, "D_eff_lo": 1.1, "D_eff_hi": 1.3, "F_L": 1.5, "ratio": 0.8}])
    >>> t.header[-1], [f"{c.text} {c.ci}".strip() for c in t.rows[0]][5]
    ('status', '1.200 [1.100, 1.300]')
    """
    leads = lead_rows(rows, lambda r: (r["model"], r["revision"], r.get("similarity")))
    # The update diagnostic (passage mode): D_eff of the updates f_l, whole and over L, when measured.
    updates = any(r.get("updates_D_eff") is not None for r in leads)
    header = ["model", "revision", "similarity", "view", "N", "D_eff [95% CI]", "F_L", "ratio"]
    header += ["updates D_eff [95% CI]", "updates/L"] if updates else []

    def extra(r: dict) -> list:
        u, layers = r.get("updates_D_eff"), r.get("L")
        per_layer = [row_cell(r, "updates_D_eff"), Cell(fmt(u / layers if u is not None and layers else None))]
        return [Cell(fmt(r["ratio"]))] + (per_layer if updates else [])

    header.append("status")
    who = lambda r: [Cell(str(r["model"])), Cell(str(r["revision"])), Cell(str(r.get("similarity") or "-"))]  # noqa: E731
    body = [job_row(r, who(r), len(header), extra) for r in leads]
    return Table(header, body, [False] * 4 + [True] * (len(header) - 4))


def suite_summary_text(rows: list[dict]) -> str:
    """:func:`suite_table` as text.

    >>> print(suite_summary_text([{"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok",
    ...                            "N": 3, "D_eff": 1.2, "D_eff_lo": None, "F_L": 1.5, "ratio": 0.8}]))
    model  revision  similarity  view     N  D_eff [95% CI]    F_L  ratio  status
    -----  --------  ----------  -------  -  --------------  -----  -----  ------
    m      main      cka         default  3           1.200  1.500  0.800      ok

    Passage-mode rows add the update diagnostic: D_eff of the updates f_l, and over L.

    >>> row = {"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok", "N": 4, "L": 4,
    ...        "D_eff": 1.2, "D_eff_lo": None, "F_L": 1.6, "ratio": 0.75, "updates_D_eff": 2.0, "updates_D_eff_lo": 1.8,
    ...        "updates_D_eff_hi": 2.2}
    >>> suite_summary_text([row]).splitlines()[2].split()[-5:]
    ['2.000', '[1.800,', '2.200]', '0.500', 'ok']
    """
    return table_text(suite_table(rows))


def row_cell(row: dict, key: str, scale=None) -> Cell:
    """A value and its interval from a summary row, divided by ``scale`` when given (n/a without one)."""
    value = row.get(key)
    if value is None or (scale is not None and not scale):
        return Cell("n/a")
    div = float(scale) if scale is not None else 1.0
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    ci = fmt_interval([lo / div, hi / div]) if lo is not None and hi is not None else ""
    return Cell(fmt(value / div), ci)


def job_row(r: dict, who: list, width: int, extra) -> list:
    """A summary row's cells, ``width`` in all: ``who`` (what was measured), then its view, N, D_eff with its
    interval, F_L, ``extra(r)`` and its note or status; a job that failed: "-" and what failed."""
    if r.get("D_eff") is None:
        return who + [Cell("-")] * (width - len(who) - 1) + [Cell(f"{r['status']}: {r.get('error') or ''}".strip(": "))]
    measured = [
        Cell(str(r.get("view") or "-")),
        Cell(str(r.get("N") or "-")),
        row_cell(r, "D_eff"),
        Cell(fmt(r.get("F_L"))),
    ]
    return who + measured + extra(r) + [Cell(r.get("note") or r["status"])]
