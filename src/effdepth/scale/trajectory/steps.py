"""Each checkpoint of a trajectory against the one before: the paired difference of D_eff on the same
passages (:mod:`effdepth.studies.compare`, no cross-model CKA), and whether D_eff moved beyond its
interval (docs/method.md#comparing-two-results).
"""

from __future__ import annotations

from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.loading import load
from effdepth.results.result import Result

#: The columns a trajectory row gains: the D_eff difference to the checkpoint before, its paired interval,
#: and whether that interval excludes 0.
STEP_COLUMNS = ("dD_eff", "dD_eff_lo", "dD_eff_hi", "moved")


def with_step_differences(out, rows: list, log=None) -> list:
    """``rows`` (one per checkpoint, view and similarity, in training order) with :data:`STEP_COLUMNS` filled
    for each measured checkpoint after the first; a pair that cannot be compared is logged, never fatal."""
    from effdepth.studies.compare import Member, compare_results

    keys = list(dict.fromkeys(r["key"] for r in rows if r.get("status") == "ok" and r.get("key")))
    if len(keys) < 2:
        return rows
    try:
        members = [Member(load(Path(out) / key, expect=Result), key, Path(out) / key) for key in keys]
        comparison = compare_results(members, consecutive=True, cross=False, progress=False)
    except EffdepthError as exc:
        (log or (lambda line: None))(f"no paired differences between checkpoints: {exc}")
        return rows
    after = {keys[p.b]: p.differences for p in comparison.pairs}
    for row in rows:
        d = (after.get(row.get("key")) or {}).get(row.get("similarity"), {}).get(row.get("view"), {}).get("deff")
        if row.get("status") == "ok" and d:
            lo, hi = d["interval"] or (None, None)
            row.update(dD_eff=d["estimate"], dD_eff_lo=lo, dD_eff_hi=hi, moved=d["resolved"])
    return rows
