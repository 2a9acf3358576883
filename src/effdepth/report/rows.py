"""What the tables of every format are made of, so an unavailable view says why everywhere."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

from effdepth.options import UNHASHED_OPTIONS, AnalysisOptions, LoadOptions
from effdepth.options.flags import option_flags
from effdepth.report.wording import CALIBRATED, carry_value

#: Options that never change a number (where it ran, how fast, with how much memory): they differ
#: between machines and tell nothing about what was measured. Timings, paths and dates are provenance,
#: never options, so never columns.
QUIET_OPTIONS = (*UNHASHED_OPTIONS, "max_memory")
#: Options the table shows in columns of their own (model, revision, corpus).
OWN_COLUMNS = ("model", "revision", "corpus")
#: Options a result records in its provenance, not its config: ``(provenance group, key)``.
IN_PROVENANCE = {"dtype": ("model", "dtype"), "tokenizer": ("corpus", "tokenizer")}
#: Where the config keeps an option under another name: every similarity (``similarity`` is the primary).
CONFIG_KEYS = {"similarity": "similarities"}
#: Tokens per sequence is always shown: the default view's D_eff moves with it (docs/method.md#why-cka).
ALWAYS = ("tokens/seq",)


def option_columns() -> dict:
    """``{option: (column, declaration)}`` for every measurement option but :data:`QUIET_OPTIONS` and
    :data:`OWN_COLUMNS`, in declaration order, each named as typed: its flag, or its name where it has none.

    >>> cols = option_columns()
    >>> cols["seq_len"][0], cols["passage_split"][0], cols["seed"][0], "max_memory" in cols
    ('tokens/seq', '--passage-split', '--seed', False)
    """
    out = {}
    for f in (*fields(LoadOptions), *fields(AnalysisOptions)):
        if f.name in QUIET_OPTIONS + OWN_COLUMNS or (f.name in out and not f.metadata["cli"]):
            continue
        flag = option_flags(f)[0] if f.metadata["cli"] else f.name
        out[f.name] = ("tokens/seq" if f.name == "seq_len" else flag, f)
    return out


def option_value(result, declared):
    """The value of the option ``declared`` that ``result`` records (``None`` where it records none); a
    ``--no-...`` flag's value says whether it was given."""
    if declared.name in IN_PROVENANCE:
        group, key = IN_PROVENANCE[declared.name]
        value = (result.provenance.get(group) or {}).get(key)
    else:
        value = result.config.get(CONFIG_KEYS.get(declared.name, declared.name), result.config.get(declared.name))
    if declared.metadata["kind"] == "no-flag" and isinstance(value, bool):
        return not value
    return ",".join(map(str, value)) if isinstance(value, list) else value


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
    """``(column, [value per source])`` for everything that tells the results apart: their folders, each
    measurement option they record (:func:`option_columns`), the passages' content and the carry; tokens per
    sequence always.

    >>> import effdepth, torch, pathlib
    >>> from effdepth.report.sources import Source
    >>> r, s = effdepth.from_states(torch.randn(3, 8, 8, 4)), effdepth.from_states(torch.randn(3, 8, 8, 4), seed=1)
    >>> [c for c, _ in differing([Source(pathlib.Path("a/result.json"), r, ""), Source(pathlib.Path("b/result.json"), s, "")])]
    ['folder', 'tokens/seq', '--seed']
    """
    facts = [("folder", _short_folders([s.path for s in sources]))]
    facts += [(column, [option_value(s.result, f) for s in sources]) for column, f in option_columns().values()]
    corpora = [s.result.provenance.get("corpus") or {} for s in sources]
    facts += [
        ("passages sha256", [(c.get("sha256") or "")[:12] or None for c in corpora]),
        ("carry", [carry_value(s.result.extras) for s in sources]),
    ]
    return [(c, values) for c, values in facts if c in ALWAYS or len({repr(v) for v in values}) > 1]


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
