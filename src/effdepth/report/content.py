"""What a report says, independent of its format.

The HTML and Markdown writers render the same :class:`Table` objects, rows
and figures built here, so both formats always carry the same numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..result import SCHEMA, Result, ViewResult
from .numbers import fmt, fmt_interval
from .sources import Source

#: Lists longer than this are folded (HTML) or shortened (Markdown) in the provenance.
LONG_LIST = 12

TERMS = (("initial_state", "initial state"), ("size_imbalance", "size imbalance"), ("correlated_updates", "correlated updates"))

FIGURES = {
    "similarity": ("Layer similarity", "Similarity sim_ij between the analysed layers (1 = parallel, 0 = orthogonal). "
                   "A wide bright band means states stay alike over many layers, i.e. a low D_eff."),
    "profile": ("Decay profile", "Mean similarity P(k) at layer distance k, with the profiles of F_N and the matched "
                "references overlaid; D_eff aggregates P(k) into one number."),
    "attribution": ("Gap attribution", "Waterfall from the structural reference F_N to the measured D_eff: the three "
                    "terms add up exactly to F_N - D_eff; whiskers are bootstrap intervals."),
    "views": ("Controls", "D_eff / F_N of every view (control); the dashed line at 1 is F_N. Filled dots: the whole "
              "interval lies below 1."),
    "layers": ("Per-layer updates", "Update energy and the energy of the state it is added to (log scale), the cosine "
               "between each update and the state it is added to, and ShortGPT's block influence."),
    "comparison": ("Comparison", "D_eff / F_N of each result's first view, with bootstrap intervals; the dashed line "
                   "at 1 is the structural reference."),
}


@dataclass
class Cell:
    """One table cell: its text, an optional interval shown smaller, a sort key and a link."""

    text: str
    ci: str = ""
    sort: float | None = None
    href: str = ""


@dataclass
class Table:
    """A table with a header, rows of :class:`Cell` and a note under it."""

    header: list
    rows: list
    numeric: list = field(default_factory=list)  # per column: right-align and sort numerically
    note: str = ""


@dataclass
class Folded:
    """A long value: a short preview, and the full text for formats that can fold it."""

    preview: str
    full: str
    count: int


@dataclass
class RenderedFigure:
    stem: str
    title: str
    caption: str
    png: bytes


# --------------------------------------------------------------------------- formatting


def interval(v: ViewResult, key: str, digits: int = 3) -> str:
    """``[lo, hi]`` of ``v.ci[key]``, or ``""`` without a bootstrap."""
    return fmt_interval((v.ci or {}).get(key), digits)


def level(v: ViewResult) -> int:
    return int(round(100 * ((v.ci or {}).get("level") or 0.95)))


def sub_reference(v: ViewResult) -> str:
    return {True: "yes", False: "no", None: "n/a"}[v.sub_reference]


def _sortable(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _number(v: ViewResult, x, key: str | None = None, signed: bool = False, digits: int = 3) -> Cell:
    return Cell(fmt(x, digits, signed), interval(v, key, digits) if key else "", _sortable(x))


# --------------------------------------------------------------------------- one result


def title(source: Source) -> str:
    return f"Effective depth of {source.label}"


def headline(result: Result) -> str:
    """The main finding in one sentence."""
    v = result.default
    ci = interval(v, "deff")
    text = (f"D_eff = {fmt(v.deff)}{' ' + ci if ci else ''} against F_N = {fmt(v.reference)} "
            f"(N = {v.num_states} states): ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)} %")
    if v.sub_reference is True:
        text += f"; the whole {level(v)}% interval lies below F_N (sub-reference)"
    elif v.sub_reference is False:
        text += f"; the {level(v)}% interval reaches F_N or above"
    if len(result.views) > 1 or v.name != "default":
        text += f" [view {v.name}]"
    return text + "."


def summary_rows(source: Source) -> list:
    """``(label, value)`` pairs: what was measured, on what, and the main numbers."""
    r = source.result
    p, c, v = r.provenance, r.config, r.default
    model, corpus = p.get("model") or {}, p.get("corpus") or {}
    states = "S_0..S_L (embedding included)" if c.get("include_embedding") else "S_1..S_L (block outputs)"
    rows = [
        ("model", f"{model.get('id') or 'n/a'} ({model.get('source') or 'n/a'})"),
        ("revision / commit", f"{model.get('revision') or 'n/a'} / {model.get('commit') or 'n/a'}"),
        ("architecture", " / ".join(str(x) for x in (model.get("model_type"), model.get("class")) if x) or "n/a"),
        ("layers L", _plain(c.get("num_layers"))),
        ("states analysed N", f"{v.num_states}: {states}"),
        ("similarity", _plain(c.get("similarity"))),
    ]
    if corpus:
        rows.append(("corpus", f"{corpus.get('name')} (sha256 {str(corpus.get('sha256'))[:16]}…)"))
    rows += [
        ("sequences x tokens", f"{v.sequences} x {c.get('seq_len', 'n/a')} ({v.tokens} tokens analysed)"),
        ("bootstrap", f"{v.ci['resamples']} resamples over sequences, {level(v)}% percentile intervals" if v.ci else "none"),
        ("D_eff", f"{fmt(v.deff)} {interval(v, 'deff')}".strip()),
        ("F_N", fmt(v.reference)),
        ("D_eff / F_N", f"{fmt(v.ratio)} {interval(v, 'ratio')}".strip()),
        ("gap %", f"{fmt(v.gap_pct, 1, signed=True)} {interval(v, 'gap_pct', 1)}".strip()),
        ("sub-reference", sub_reference(v)),
    ]
    if model.get("dtype") or model.get("device"):
        rows.append(("dtype / device", f"{model.get('dtype', 'n/a')} / {model.get('device', 'n/a')}"))
    return rows


def views_table(result: Result) -> Table:
    """One row per view: D_eff, F_N, ratio, gap, sub-reference, the attribution terms."""
    lv = level(result.default)
    rows = []
    for name, v in result.views.items():
        a = v.attribution or {}
        rows.append([
            Cell(name),
            _number(v, v.deff, "deff"),
            _number(v, v.reference),
            _number(v, v.ratio, "ratio"),
            _number(v, v.gap_pct, "gap_pct", signed=True, digits=1),
            Cell(sub_reference(v)),
            *(_number(v, a.get(k), k, signed=True) for k, _ in TERMS),
        ])
    return Table(
        ["view", "D_eff", "F_N", "D_eff / F_N", "gap %", "sub-ref.", *(label for _, label in TERMS)],
        rows,
        [False, True, True, True, True, False, True, True, True],
        note=f"Brackets: {lv}% bootstrap intervals over sequences. gap % = 100 (1 - D_eff/F_N), positive = below the "
        "reference. sub-ref.: the whole D_eff interval lies below F_N. The three terms add up to F_N - D_eff.",
    )


def references_table(result: Result) -> Table:
    """The matched references of each view (METHOD 4.2), with intervals."""
    rows = []
    for name, v in result.views.items():
        r = v.references or {}
        rows.append([
            Cell(name),
            _number(v, v.reference),
            _number(v, r.get("init"), "reference_init"),
            _number(v, r.get("size"), "reference_size"),
            _number(v, r.get("matched"), "reference_matched"),
            _number(v, v.deff, "deff"),
        ])
    return Table(
        ["view", "F_N", "R_init", "R_size", "R_matched", "D_eff"],
        rows,
        [False, True, True, True, True, True],
        note="F_N: orthogonal equal updates, no initial state. R_init matches the initial state, R_size the update "
        "sizes, R_matched both; D_eff equals R_matched when all updates are mutually orthogonal and orthogonal to S_0.",
    )


def extras_rows(result: Result) -> list:
    """Extra measurements (e.g. ``loss``), flattened to ``(key, value)``."""
    return [(k, _value(x)) for k, x in _flatten(result.extras or {})]


def provenance_groups(source: Source) -> list:
    """``(group, [(key, value)])`` covering every key of the config and provenance.

    Values are strings, or :class:`Folded` for long lists.
    """
    r = source.result
    p = dict(r.provenance or {})
    groups = [("result file", [("path", str(source.path)), ("sha256", source.sha256), ("schema", SCHEMA)])]
    order = ["model", "corpus", "code", "libraries", "machine"]
    for key in order + [k for k in p if k not in order and isinstance(p[k], dict)]:
        if isinstance(p.get(key), dict):
            groups.append((key, [(k, _value(x)) for k, x in _flatten(p[key])]))
    groups.append(("configuration", [(k, _value(x)) for k, x in _flatten(r.config or {})]))
    # Top-level scalars (created, elapsed_s, ...) join a "run" group, the one provenance may already have.
    run = [(k, _value(x)) for k, x in p.items() if not isinstance(x, dict)]
    named = dict(groups)
    if run and "run" in named:
        named["run"].extend(run)
    elif run:
        groups.append(("run", run))
    return groups


def render_figures(result: Result) -> list:
    """The standard figures of ``result`` as PNG bytes, with titles and captions."""
    from .figures import standard_figures
    from .style import figure_png

    out = []
    for stem, fig in standard_figures(result):
        name, caption = FIGURES[stem]
        out.append(RenderedFigure(stem, name, caption, figure_png(fig)))
    return out


# --------------------------------------------------------------------------- several results


def comparison_table(sources: list) -> Table:
    """One row per result (its first view), in the order given."""
    show_view = any(s.result.default.name != "default" for s in sources)
    rows = []
    for i, s in enumerate(sources, start=1):
        r, v = s.result, s.result.default
        model = (r.provenance.get("model") or {})
        corpus = (r.provenance.get("corpus") or {})
        a, refs = v.attribution or {}, v.references or {}
        row = [
            Cell(str(i), sort=i),
            Cell(str(model.get("id") or model.get("source") or s.label), href=f"#result-{i}"),
            Cell(str(model.get("revision") or "n/a")),
            Cell(_plain(r.config.get("num_layers")), sort=_sortable(r.config.get("num_layers"))),
            Cell(str(v.num_states), sort=v.num_states),
            Cell(str(corpus.get("name", "n/a"))),
        ]
        if show_view:
            row.append(Cell(v.name))
        row += [
            _number(v, v.deff, "deff"),
            _number(v, v.reference),
            _number(v, v.ratio, "ratio"),
            _number(v, v.gap_pct, "gap_pct", signed=True, digits=1),
            Cell(sub_reference(v)),
            _number(v, refs.get("init")),
            _number(v, refs.get("size")),
            _number(v, refs.get("matched")),
            *(_number(v, a.get(k), signed=True) for k, _ in TERMS),
        ]
        rows.append(row)
    header = ["#", "model", "revision", "L", "N", "corpus"] + (["view"] if show_view else []) + [
        "D_eff", "F_N", "D_eff / F_N", "gap %", "sub-ref.", "R_init", "R_size", "R_matched", "init. state", "size imbal.", "corr. upd."]
    numeric = [True, False, False, True, True, False] + ([False] if show_view else []) + [True] * 4 + [False] + [True] * 6
    return Table(header, rows, numeric, note="Sorted by D_eff / F_N, lowest first (click a header to re-sort). Each row is "
                 "the result's first view. N = L (block outputs) or L + 1 (embedding included); F_N = 2N/(N+1). "
                 "init. state, size imbal., corr. upd.: the attribution terms, adding up to F_N - D_eff.")


def comparison_png(sources: list) -> bytes:
    from .figures import comparison_figure
    from .style import figure_png

    return figure_png(comparison_figure([s.result for s in sources], [s.label for s in sources]))


# --------------------------------------------------------------------------- helpers


def _flatten(d: dict, prefix: str = ""):
    for k, x in d.items():
        key = f"{prefix}{k}"
        if isinstance(x, dict) and x:
            yield from _flatten(x, key + ".")
        else:
            yield key, x


def _value(x):
    if isinstance(x, list) and len(x) > LONG_LIST:
        full = json.dumps(x)
        preview = json.dumps(x[:6])[:-1] + ", …]"
        return Folded(preview, full, len(x))
    return _plain(x)


def _plain(x) -> str:
    return x if isinstance(x, str) else json.dumps(x, default=str)
