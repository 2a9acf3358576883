"""Plain-text tables of a result, for the terminal and the README."""

from __future__ import annotations

import math

from ..result import Result, ViewResult


def _n(x, spec: str = ".3f") -> str:
    """A number, or ``n/a`` where the saved result has null (non-finite) or nothing."""
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    return format(float(x), spec)


def _interval(v: ViewResult, key: str, spec: str = ".3f") -> str:
    if not v.ci or not v.ci.get(key):
        return ""
    lo, hi = v.ci[key]
    return f"[{_n(lo, spec)}, {_n(hi, spec)}]"


def _sub(v: ViewResult) -> str:
    return {True: "yes", False: "no", None: "n/a"}[v.sub_reference]


def summary_table(result: Result) -> str:
    """One row per view: D_eff [interval], F_N, ratio, gap, sub-reference, attribution.

    >>> import effdepth, torch
    >>> print(summary_table(effdepth.from_states(torch.randn(3, 4, 8))).splitlines()[0].split()[:3])
    ['view', 'D_eff', '95%']
    """
    level = next((int(round(100 * v.ci["level"])) for v in result.views.values() if v.ci), 95)
    header = ["view", "D_eff", f"{level}% CI", "F_N", "ratio", "gap %", "sub-ref", "init.state", "size.imbal", "corr.upd"]
    rows = []
    for name, v in result.views.items():
        a = v.attribution
        rows.append(
            [
                name,
                _n(v.deff),
                _interval(v, "deff"),
                _n(v.reference),
                _n(v.ratio),
                _n(v.gap_pct, "+.1f"),
                _sub(v),
                _n(a.get("initial_state"), "+.3f"),
                _n(a.get("size_imbalance"), "+.3f"),
                _n(a.get("correlated_updates"), "+.3f"),
            ]
        )
    return _render(header, rows)


def references_table(result: Result) -> str:
    """The matched references of each view with their intervals."""
    header = ["view", "F_N", "R_init", "R_size", "R_matched", "D_eff"]
    rows = []
    for name, v in result.views.items():
        r = v.references
        rows.append(
            [
                name,
                _n(v.reference),
                f"{_n(r.get('init'))} {_interval(v, 'reference_init')}".strip(),
                f"{_n(r.get('size'))} {_interval(v, 'reference_size')}".strip(),
                f"{_n(r.get('matched'))} {_interval(v, 'reference_matched')}".strip(),
                _n(v.deff),
            ]
        )
    return _render(header, rows)


def headline(result: Result) -> str:
    """One paragraph that says what was measured, on what."""
    p = result.provenance
    model = p.get("model", {})
    corpus = p.get("corpus", {})
    c = result.config
    v = result.default
    what = f"{model.get('id', 'states')}"
    if model.get("revision") not in (None, "main"):
        what += f"@{model['revision']}"
    lines = [
        f"model {what} ({c.get('num_layers')} layers), "
        + (f"corpus {corpus.get('name')} ({v.sequences} x {c.get('seq_len')} tokens), " if corpus else "")
        + f"similarity {c.get('similarity')}, N = {v.num_states} states"
        + (" incl. embedding" if c.get("include_embedding") else ""),
    ]
    ci = _interval(v, "deff")
    lines.append(
        f"D_eff = {_n(v.deff)} {ci}  vs  F_N = {_n(v.reference)}: ratio {_n(v.ratio)}, gap {_n(v.gap_pct, '+.1f')}%"
        + ("  (sub-reference)" if v.sub_reference else "")
    )
    return "\n".join(lines)


def extras_table(result: Result) -> str:
    """Extra measurements (``result.extras``, e.g. the next-token loss), one line each; ``""`` when none.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 4, 8))
    >>> r.extras["loss"] = {"mean": 2.5, "perplexity": 12.18, "tokens": 90}
    >>> print(extras_table(r))
    extra             value
    ---------------  ------
    loss.mean         2.500
    loss.perplexity  12.180
    loss.tokens          90
    """
    rows = [[key, _extra_value(value)] for key, value in _flatten(result.extras or {})]
    return _render(["extra", "value"], rows) if rows else ""


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _extra_value(v) -> str:
    if v is None:
        return "n/a"  # non-finite values are saved as null
    if isinstance(v, float):
        return _n(v) if abs(v) < 1e6 else f"{v:.4g}"
    return str(v)


def _render(header: list, rows: list) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    fmt = lambda r: "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(r, widths)))
    return "\n".join([fmt(header), "  ".join("-" * w for w in widths)] + [fmt(r) for r in rows])


def summary_text(result: Result) -> str:
    """Everything the terminal shows for a result: headline, views, references, extras.

    >>> import effdepth, torch
    >>> "R_matched" in summary_text(effdepth.from_states(torch.randn(3, 4, 8)))
    True
    """
    parts = [headline(result), summary_table(result), references_table(result)]
    extras = extras_table(result)
    if extras:
        parts.append(extras)
    return "\n\n".join(parts)
