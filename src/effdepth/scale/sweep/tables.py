"""A sweep's results -> its tables, figure and report: one row per job, view and similarity.

``DIR/summary.{csv,parquet}`` (``F_L`` is the structural reference, 2N/(N+1) of the row's N states; a
failed or missing job has one row saying so), ``DIR/suite.{png,pdf}`` and ``DIR/report.html``.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.report.sources import read_error
from effdepth.results.result import Result
from effdepth.scale.sweep.jobs import ERROR, RESULT, Job, job_folder, saved_result

# (column, ViewResult value, ci key)
_METRICS = (
    ("D_eff", lambda v: v.deff, "deff"),
    ("ratio", lambda v: v.ratio, "ratio"),
    ("gap_pct", lambda v: v.gap_pct, "gap_pct"),
    ("R_init", lambda v: v.references.get("init"), "reference_init"),
    ("R_size", lambda v: v.references.get("size"), "reference_size"),
    ("R_matched", lambda v: v.references.get("matched"), "reference_matched"),
    ("R_structural_cal", lambda v: v.references.get("structural_cal"), "reference_structural_cal"),
    ("R_matched_cal", lambda v: v.references.get("matched_cal"), "reference_matched_cal"),
    ("initial_state", lambda v: v.attribution.get("initial_state"), "initial_state"),
    ("size_imbalance", lambda v: v.attribution.get("size_imbalance"), "size_imbalance"),
    ("correlated_updates", lambda v: v.attribution.get("correlated_updates"), "correlated_updates"),
    # The update diagnostic (passage mode, CKA estimators): D_eff of the updates f_1..f_L themselves.
    ("updates_D_eff", lambda v: v.update_deff, "update_deff"),
)
#: One row per (job, view, similarity), each metric with its interval's bounds. F_L = 2N/(N+1) is the structural
#: reference of the row's N states (N = L, or L + 1 with the embedding), named as the paper names it.
COLUMNS = (
    ("model", "family", "params", "revision", "step", "tokens_seen", "view", "similarity", "L", "N")
    + tuple(f"D_eff{b}" for b in ("", "_lo", "_hi"))
    + ("F_L",)
    + tuple(f"{column}{b}" for column, _, _ in _METRICS[1:] for b in ("", "_lo", "_hi"))
    + ("sequences", "tokens_measured", "status", "error", "key")
)


def summary_rows(out, jobs: list) -> list[dict]:
    """One row per (job, view) from what is on disk: results, errors, or ``missing``."""
    rows = []
    for job in jobs:
        folder = job_folder(out, job)
        result = saved_result(folder)
        if result is not None:
            rows += result_rows(job, result)
        elif (folder / ERROR).is_file():
            rows.append(_row(job, status="error", error=read_error(folder / ERROR)[1]))
        else:
            rows.append(_row(job, status="missing"))
    return rows


def result_rows(job: Job, result: Result) -> list[dict]:
    """A row per view and similarity of ``result`` (the primary similarity first), with the job's columns.

    A view without a value under a similarity (cka's ``pos0-only``) gets a row with status
    ``unavailable``, the reason in ``error`` and no numbers.
    """
    from effdepth.report.rows import view_order

    rows = []
    layers = result.config.get("num_layers")
    for sim, views in result.similarities.items():
        reasons = (result.unavailable or {}).get(sim, {})
        for name in view_order(result):
            v = views.get(name)
            if v is None:
                if name in reasons:
                    rows.append(
                        _row(job, status="unavailable", view=name, similarity=sim, L=layers, error=reasons[name])
                    )
                continue
            row = _row(
                job,
                status="ok",
                view=name,
                similarity=sim,
                L=layers,
                N=v.num_states,
                F_L=v.reference,
                sequences=v.sequences,
                tokens_measured=v.tokens,
            )
            for column, value, ci_key in _METRICS:
                row[column] = _float(value(v))
                bounds = (v.ci or {}).get(ci_key) or [None, None]
                row[f"{column}_lo"], row[f"{column}_hi"] = _float(bounds[0]), _float(bounds[1])
            rows.append(row)
    return rows


def _row(job: Job, **values) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(
        model=job.name or job.model.id,
        family=job.model.family,
        params=job.model.params,
        revision=job.tag or job.revision or "main",
        key=job.key,
    )
    row.update(job.extra)
    row.update(values)
    return row


def _float(x):
    return None if x is None or not math.isfinite(float(x)) else float(x)


def write_table(out, stem: str, rows: list[dict], columns=None, log=None) -> list[Path]:
    """``stem.csv`` always, ``stem.parquet`` when pyarrow is installed; both atomic."""
    from effdepth.results.files import write_atomic

    columns = list(columns or (rows[0].keys() if rows else COLUMNS))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r.get(k)) for k in columns} for r in rows)
    files = [write_atomic(Path(out) / f"{stem}.csv", text.getvalue().encode("utf-8"))]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        if log:
            log(f"{stem}.parquet skipped: pip install 'effdepth[parquet]' for Parquet tables")
        return files
    table = pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows], schema=_schema(pa, columns, rows))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    files.append(write_atomic(Path(out) / f"{stem}.parquet", buf.getvalue()))
    return files


def _schema(pa, columns, rows):
    """Types from the values, so an all-empty column is a typed column of nulls."""
    fields = []
    for c in columns:
        values = [r.get(c) for r in rows if r.get(c) is not None]
        if values and all(isinstance(v, bool) for v in values):
            t = pa.bool_()
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            t = pa.int64()
        elif values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            t = pa.float64()
        elif not values and c not in ("model", "family", "revision", "view", "similarity", "status", "error", "key"):
            t = pa.float64()
        else:
            t = pa.string()
        fields.append(pa.field(c, t))
    return pa.schema(fields)


def write_outputs(out, rows, jobs, *, figures: bool = True, report: bool = True, log=None) -> list[Path]:
    """``summary.{csv,parquet}``, ``suite.{png,pdf}`` and ``report.html`` of a sweep."""
    log = log or (lambda line: None)
    out = Path(out)
    files = write_table(out, "summary", rows, COLUMNS, log=log)
    ok = [r for r in rows if r["status"] == "ok"]
    if figures and ok:
        from effdepth.report.style import save_figure
        from effdepth.scale.sweep.figures import suite_figure

        files += save_figure(suite_figure(rows), out / "suite")
    if report and ok:
        files += _write_report(out, jobs, rows, log)
    return files


def _write_report(out: Path, jobs: list, rows: list, log) -> list[Path]:
    from effdepth.report.build import write_report

    paths = [job_folder(out, j) / RESULT for j in jobs if (job_folder(out, j) / RESULT).is_file()]
    # once per model: an error has a row per similarity
    failed = list(dict.fromkeys((r["model"], r["error"]) for r in rows if r["status"] == "error"))
    try:
        return write_report(paths, out / "report.html", failed=failed)
    except EffdepthError as exc:  # the numbers are safe on disk; a report problem must not fail the run
        log(f"report.html skipped: {exc}")
        return []
