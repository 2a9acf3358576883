"""What the tables of every format are made of, so an unavailable view says why everywhere."""

from __future__ import annotations

import os
from pathlib import Path

from effdepth.report.wording import CALIBRATED, carry_value

#: ``(column, how to read it from a Source)`` of a comparison; shown when the results differ in it.
#: Tokens per sequence is always shown: the default view's D_eff moves with it (docs/method.md#why-cka).
COMPARISON_FACTS = (
    ("folder", lambda s: None),  # filled in by :func:`differing`, relative to the results' common folder
    ("tokens/seq", lambda s: s.result.config.get("seq_len")),
    ("sequences", lambda s: s.result.config.get("num_seqs", s.result.default.sequences)),
    ("BOS", lambda s: s.result.config.get("add_bos")),
    ("seed", lambda s: s.result.config.get("seed")),
    ("dtype", lambda s: (s.result.provenance.get("model") or {}).get("dtype")),
    ("similarity", lambda s: s.result.primary_similarity),
    ("views", lambda s: ",".join(s.result.config.get("views") or list(s.result.views))),
    ("carry", lambda s: carry_value(s.result.extras)),
)
ALWAYS = ("tokens/seq",)


def view_order(result) -> list:
    """Every view name of ``result`` (measured under some similarity, or unavailable), in the order asked for.

    >>> import effdepth, torch
    >>> view_order(effdepth.from_states(torch.randn(3, 8, 8, 4), views="default,drop-pos0", similarity="cka,cosine"))
    ['default', 'drop-pos0']
    """
    groups = list(result.similarities.values()) + list((result.unavailable or {}).values())
    present = [n for views in groups for n in views]
    return [n for n in dict.fromkeys(list(result.config.get("views") or []) + present) if n in present]


def view_entries(result, similarity: str | None = None) -> list:
    """``(view name, ViewResult or None, reason or None)`` for every view under ``similarity`` (default: the primary).

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 8, 8, 4), views="default,drop-pos0")
    >>> [(n, v is None, reason[:9]) for n, v, reason in view_entries(r) if v is None]
    []
    """
    similarity = similarity or result.primary_similarity
    views = result.similarities.get(similarity, {})
    reasons = (result.unavailable or {}).get(similarity, {})
    out = []
    for name in view_order(result):
        if name in views:
            out.append((name, views[name], None))
        else:
            out.append((name, None, reasons.get(name) or f"not measured under {similarity}"))
    return out


def has_calibrated(result, similarity: str | None = None) -> bool:
    """Whether any view (under ``similarity``) has the calibrated references (docs/method.md#calibrated-references).

    >>> import effdepth, torch
    >>> has_calibrated(effdepth.from_states(torch.randn(3, 8, 8, 4)))
    True
    """
    views = result.similarities.get(similarity or result.primary_similarity, {})
    return any(CALIBRATED.keys() & (v.references or {}).keys() for v in views.values())


def differing(sources: list) -> list:
    """``(column, [value per source])`` for what tells the results apart (tokens per sequence always).

    >>> import effdepth, torch, pathlib
    >>> from effdepth.report.sources import Source
    >>> r = effdepth.from_states(torch.randn(3, 8, 8, 4))
    >>> [c for c, _ in differing([Source(pathlib.Path("a/result.json"), r, ""), Source(pathlib.Path("b/result.json"), r, "")])]
    ['folder', 'tokens/seq']
    """
    out = []
    folders = _short_folders([s.path for s in sources])
    for column, read in COMPARISON_FACTS:
        values = folders if column == "folder" else [read(s) for s in sources]
        if column in ALWAYS or len({repr(v) for v in values}) > 1:
            out.append((column, values))
    return out


def _short_folders(paths: list) -> list:
    """Each result's folder relative to the folder they all share (its own name when that is all)."""
    parents = [Path(p).resolve().parent for p in paths]
    try:
        common = Path(os.path.commonpath([str(p) for p in parents]))
    except ValueError:  # different drives
        return [str(p) for p in parents]
    out = []
    for p in parents:
        rel = p.relative_to(common).as_posix()
        out.append(rel if rel != "." else p.name or str(p))
    return out


def lead_rows(rows: list, key) -> list:
    """One row per ``key(row)``: its first measured row (status ok or duplicate, with a D_eff), else its first row.

    >>> rows = [{"k": 1, "status": "unavailable", "D_eff": None}, {"k": 1, "status": "ok", "D_eff": 1.0}]
    >>> lead_rows(rows, lambda r: r["k"])[0]["status"]
    'ok'
    """
    first, measured = {}, {}
    for r in rows:
        k = key(r)
        first.setdefault(k, r)
        if k not in measured and r.get("status") in ("ok", "duplicate") and r.get("D_eff") is not None:
            measured[k] = r
    return [measured.get(k, r) for k, r in first.items()]
