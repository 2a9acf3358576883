"""What a report says, independent of its format.

The HTML and Markdown writers render the same :class:`Table` objects, rows
and figures built here, so both formats always carry the same numbers.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from ..result import SCHEMA, Result, ViewResult
from ..verdicts import CLAIMS, Comparison, check_claims, claim_tests, verdict_grid
from .numbers import fmt, fmt_interval
from .rows import differing, has_calibrated, view_entries
from .sources import Source
from .wording import ATTRIBUTION, CALIBRATED, PAPER_ABSTRACT, PAPER_NOTE, carry_text, context, passage_wording, similarity_name

#: Lists longer than this are folded (HTML) or shortened (Markdown) in the provenance.
LONG_LIST = 12

TERMS = (("initial_state", "initial state"), ("size_imbalance", "size imbalance"), ("correlated_updates", "correlated updates"))

FIGURES = {
    "similarity": ("Layer similarity", "Similarity sim_ij between the analysed layers (1 = parallel, 0 = orthogonal). "
                   "A wide bright band means states stay alike over many layers, i.e. a low D_eff."),
    "profile": ("Decay profile", "Mean similarity P(k) at layer distance k, with the profiles of F_N, the matched "
                "references and, when measured, the calibrated references (surrogate streams through the same "
                "similarity) overlaid; D_eff aggregates P(k) into one number."),
    "attribution": ("Gap attribution", "Waterfall from the structural reference F_N to the measured D_eff; each bar is "
                    "labelled with its term, and the terms add up exactly to F_N - D_eff. " + ATTRIBUTION
                    + " Whiskers are bootstrap intervals."),
    "views": ("Controls", "D_eff / F_N of every view (control); the dashed line at 1 is F_N. Filled dots: the whole "
              "interval lies below 1."),
    "layers": ("Per-layer updates", "Update energy and the energy of the state it is added to (log scale), the cosine "
               "between each update and the state it is added to, and ShortGPT's block influence."),
    "sensitivity": ("Lags, tapers, aggregations", "D_eff of the default view under the paper's maximum lags, tapers "
                    "and aggregations, each over the same form on orthogonal equal updates (the dashed line at 1); "
                    "filled dots: the whole interval lies below it."),
    "comparison": ("Comparison", "D_eff / F_N of each result's first view, with bootstrap intervals; the dashed line "
                   "at 1 is the structural reference."),
}


@dataclass
class Cell:
    """One table cell: its text, an optional interval shown smaller, a sort key, a link, and for a
    cell without a value (``unavailable``) the reason."""

    text: str
    ci: str = ""
    sort: float | None = None
    href: str = ""
    reason: str = ""


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


def sortable(x) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def number_cell(v: ViewResult, x, key: str | None = None, signed: bool = False, digits: int = 3) -> Cell:
    return Cell(fmt(x, digits, signed), interval(v, key, digits) if key else "", sortable(x))


# --------------------------------------------------------------------------- one result


def title(source: Source) -> str:
    """The page title of one result (its label says the carry of an intervened model).

    >>> import effdepth, torch, pathlib
    >>> title(Source(pathlib.Path("r.json"), effdepth.from_states(torch.randn(3, 2, 4, 8)), "", "states"))
    'Effective depth of states'
    """
    return f"Effective depth of {source.label}"


def headline(result: Result) -> str:
    """The main finding in one sentence, with the similarity, the tokens per sequence and any carry.

    >>> import effdepth, torch
    >>> "similarity cka" in headline(effdepth.from_states(torch.randn(3, 2, 4, 8)))
    True
    """
    v = result.default
    ci = interval(v, "deff")
    tokens = result.config.get("seq_len")
    text = (f"D_eff = {fmt(v.deff)}{' ' + ci if ci else ''} against F_N = {fmt(v.reference)} "
            f"(N = {v.num_states} states; {context(result)}"
            + (f"; {tokens} tokens per sequence" if tokens else "")
            + f"): ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)} %")
    if v.sub_reference is True:
        text += f"; the whole {level(v)}% interval lies below F_N (sub-reference)"
    elif v.sub_reference is False:
        text += f"; the {level(v)}% interval reaches F_N or above"
    if len(result.views) > 1 or v.name != "default":
        text += f" [view {v.name}]"
    return text + "."


def model_rows(result: Result) -> list:
    """``(label, value)`` pairs of the model measured: id and source, revision, architecture, layers."""
    model = result.provenance.get("model") or {}
    return [
        ("model", f"{model.get('id') or 'n/a'} ({model.get('source') or 'n/a'})"),
        ("revision / commit", f"{model.get('revision') or 'n/a'} / {model.get('commit') or 'n/a'}"),
        ("architecture", " / ".join(str(x) for x in (model.get("model_type"), model.get("class")) if x) or "n/a"),
        ("layers L", _plain(result.config.get("num_layers"))),
    ]


def summary_rows(source: Source) -> list:
    """``(label, value)`` pairs: what was measured, on what, and the main numbers."""
    r = source.result
    p, c, v = r.provenance, r.config, r.default
    model, corpus = p.get("model") or {}, p.get("corpus") or {}
    states = "S_0..S_L (embedding included)" if c.get("include_embedding") else "S_1..S_L (block outputs)"
    rows = model_rows(r) + [
        ("states analysed N", f"{v.num_states}: {states}"),
        ("similarity", similarity_name(r.primary_similarity) + _also(r)),
    ]
    carry = carry_text(r.extras)
    if carry:
        rows.append(("intervention", f"{carry}: an intervened model, not the plain one"))
    if corpus:
        rows.append(("corpus", f"{corpus.get('name')} (sha256 {str(corpus.get('sha256'))[:16]}…)"))
    rows += [
        ("sequences x tokens per sequence", f"{v.sequences} x {c.get('seq_len', 'n/a')} ({v.tokens} tokens analysed)"),
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


def _also(result: Result) -> str:
    others = [x for x in result.similarities if x != result.primary_similarity]
    return f"; also {', '.join(others)} (see Definition sensitivity)" if others else ""


def _unavailable_row(name: str, reason: str, width: int) -> list:
    # The reason stands where the number would: a view without a value is never shown as one.
    return [Cell(name), Cell("unavailable", reason=reason)] + [Cell("") for _ in range(width - 2)]


def views_table(result: Result, similarity: str | None = None) -> Table:
    """One row per view under ``similarity`` (default: the primary): D_eff, F_N, ratio, gap,
    sub-reference, the attribution terms; ``unavailable`` (with the reason) where there is no value.

    >>> import effdepth, torch
    >>> t = views_table(effdepth.from_states(torch.randn(3, 2, 8, 4), views="default,pos0-only"))
    >>> [(row[0].text, row[1].text) for row in t.rows][1]
    ('pos0-only', 'unavailable')
    """
    lv = level(result.default)
    header = ["view", "D_eff", "F_N", "D_eff / F_N", "gap %", "sub-ref.", *(label for _, label in TERMS)]
    rows = []
    for name, v, reason in view_entries(result, similarity):
        if v is None:
            rows.append(_unavailable_row(name, reason, len(header)))
            continue
        a = v.attribution or {}
        rows.append([
            Cell(name),
            number_cell(v, v.deff, "deff"),
            number_cell(v, v.reference),
            number_cell(v, v.ratio, "ratio"),
            number_cell(v, v.gap_pct, "gap_pct", signed=True, digits=1),
            Cell(sub_reference(v)),
            *(number_cell(v, a.get(k), k, signed=True) for k, _ in TERMS),
        ])
    return Table(
        header, rows, [False, True, True, True, True, False, True, True, True],
        note=f"{context(result, similarity).capitalize()}. Brackets: {lv}% bootstrap intervals over sequences. gap % = "
        "100 (1 - D_eff/F_N), positive = below the reference. sub-ref.: the whole D_eff interval lies below F_N. "
        + ATTRIBUTION,
    )


def references_table(result: Result, similarity: str | None = None) -> Table:
    """The references of each view, with intervals: F_N, R_init, R_size, R_matched and, when measured,
    R_structural_cal and R_matched_cal (docs/method.md#calibrated-references).

    >>> import effdepth, torch
    >>> references_table(effdepth.from_states(torch.randn(3, 2, 4, 8), surrogate_seqs=None)).header[-3:]
    ['R_structural_cal', 'R_matched_cal', 'D_eff']
    """
    calibrated = has_calibrated(result, similarity)
    header = ["view", "F_N", "R_init", "R_size", "R_matched"] + (list(CALIBRATED.values()) if calibrated else []) + ["D_eff"]
    rows = []
    for name, v, reason in view_entries(result, similarity):
        if v is None:
            rows.append(_unavailable_row(name, reason, len(header)))
            continue
        r = v.references or {}
        row = [Cell(name), number_cell(v, v.reference)]
        row += [number_cell(v, r.get(k), f"reference_{k}") for k in ("init", "size", "matched")]
        if calibrated:
            row += [number_cell(v, r.get(k), f"reference_{k}") for k in CALIBRATED]
        rows.append(row + [number_cell(v, v.deff, "deff")])
    note = (f"{context(result, similarity).capitalize()}. F_N: orthogonal equal updates, no initial state. R_init matches the "
            "initial state, R_size the update sizes, R_matched both; D_eff equals R_matched when all updates are mutually "
            "orthogonal and orthogonal to S_0.")
    if calibrated:
        note += (" R_structural_cal and R_matched_cal: the D_eff of Gaussian surrogate streams (equal update energies and no "
                 "initial state; the measured energies and S_0) through the same views, similarity and estimator.")
    return Table(header, rows, [False] + [True] * (len(header) - 1), note=note)


def sensitivity_table(result: Result) -> Table | None:
    """Definition sensitivity: D_eff / F_N (and D_eff) per view and similarity, with intervals; None
    with one similarity. A view without a value under a similarity reads ``unavailable``, with the reason.

    >>> import effdepth, torch
    >>> t = sensitivity_table(effdepth.from_states(torch.randn(4, 3, 8, 16), similarity="cka,token"))
    >>> t.header
    ['view', 'cka D_eff / F_N', 'token D_eff / F_N', 'cka D_eff', 'token D_eff']
    """
    sims = list(result.similarities)
    if len(sims) < 2:
        return None
    # One column pair per similarity; every similarity lists the views in the same order.
    columns = [view_entries(result, sim) for sim in sims]
    rows = []
    for entries in zip(*columns):
        ratios = [Cell("unavailable", reason=reason) if v is None else number_cell(v, v.ratio, "ratio") for _, v, reason in entries]
        deffs = [Cell("unavailable") if v is None else number_cell(v, v.deff, "deff") for _, v, _ in entries]
        rows.append([Cell(entries[0][0])] + ratios + deffs)
    header = ["view"] + [f"{s} D_eff / F_N" for s in sims] + [f"{s} D_eff" for s in sims]
    carry = carry_text(result.extras)
    return Table(header, rows, [False] + [True] * (2 * len(sims)),
                 note="The same forward passes under each similarity (primary first): "
                 + "; ".join(similarity_name(s) for s in sims) + ". Brackets: bootstrap intervals."
                 + (f" {carry.capitalize()}." if carry else ""))


def claims_table(result: Result) -> Table:
    """Does it reproduce the paper? One row per claim of the abstract, one column per similarity
    (holds / fails / not measured), the abstract's own statement last (docs/method.md#claims).

    >>> import effdepth, torch
    >>> t = claims_table(effdepth.from_states(torch.randn(4, 3, 8, 16), bootstrap=20))
    >>> t.header, len(t.rows)
    (['#', 'claim', 'cka', "paper's abstract"], 5)
    """
    sims = list(result.similarities)
    grid = verdict_grid(check_claims(result))
    rows = []
    for i, (name, claim, _) in enumerate(CLAIMS, start=1):
        rows.append([Cell(str(i), sort=i), Cell(claim)] + [Cell(grid[name][s].status) for s in sims] + [Cell(PAPER_ABSTRACT[name])])
    tests = " ".join(f"({i}) {test}." for i, (_, test) in enumerate(claim_tests(result), start=1))
    carry = carry_text(result.extras)
    return Table(["#", "claim"] + sims + ["paper's abstract"], rows, [True, False] + [False] * len(sims) + [False],
                 note=f"{tests} A claim holds when the whole interval lies on the stated side; without an interval it is "
                 "not measured. " + (f"Measured with {carry}. " if carry else "") + PAPER_NOTE)


def claims_evidence(result: Result) -> list:
    """The numbers behind every verdict of :func:`claims_table`, one line each.

    >>> import effdepth, torch
    >>> same = torch.randn(1, 3, 8, 16).repeat(4, 1, 1, 1)       # every layer alike: D_eff = 1 < F_N
    >>> claims_evidence(effdepth.from_states(same, similarity="frobenius", bootstrap=20))[0].split(": ")[:3]
    ['(1) frobenius', 'holds', 'default']
    """
    number = {name: i for i, (name, _, _) in enumerate(CLAIMS, start=1)}
    sims = list(result.similarities)
    # Claim by claim, as the table reads; similarities in the table's order within each.
    verdicts = sorted(check_claims(result), key=lambda v: (number[v.claim], sims.index(v.similarity)))
    return [f"({number[v.claim]}) {v.similarity}: {verdict_evidence(v)}" for v in verdicts]


def verdict_evidence(v) -> str:
    """A verdict's comparisons, terms and reason in words.

    >>> from effdepth.verdicts import Verdict
    >>> verdict_evidence(Verdict("not-bos", "cka", "not measured", reason="no drop-pos0 view"))
    'not measured: no drop-pos0 view'
    """
    parts = [comparison_text(c) for c in v.comparisons]
    if v.terms:
        parts.append("terms " + ", ".join(f"{label} {fmt(v.terms.get(k), signed=True)}" for k, label in TERMS))
    if v.reason:
        parts.append(v.reason)
    return f"{v.status}: " + "; ".join(parts)


def comparison_text(c: Comparison) -> str:
    """``"view: left value [interval] below right limit [interval]"``.

    >>> comparison_text(Comparison("default", "D_eff", 1.2, [1.1, 1.3], "below", "F_N", 1.5, None, True))
    'default: D_eff 1.200 [1.100, 1.300] below F_N 1.500: yes'
    """
    def side(value, lo_hi):
        return f"{fmt(value, signed=c.left.startswith('correlated'))} {fmt_interval(lo_hi)}".strip()

    verdict = {True: "yes", False: "no", None: "undecided"}[c.holds]
    limit = "" if c.right == "0" else f" {side(c.limit, c.limit_interval)}"  # a constant needs no second spelling
    return f"{c.view}: {c.left} {side(c.value, c.interval)} {c.relation} {c.right}{limit}: {verdict}"


def extras_rows(result: Result) -> list:
    """Extra measurements (e.g. ``loss``), flattened to ``(key, value)``; numbers as every table writes them.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 2, 4, 8))
    >>> r.extras["loss"] = {"mean": 2.5, "perplexity": 12.18, "tokens": 90}
    >>> extras_rows(r)
    [('loss.mean', '2.500'), ('loss.perplexity', '12.180'), ('loss.tokens', '90')]
    """
    return [(k, _extra_value(x)) for k, x in _flatten(result.extras or {})]


def extras_table(result: Result) -> Table | None:
    """:func:`extras_rows` as a table; None without extra measurements."""
    rows = extras_rows(result)
    if not rows:
        return None
    return Table(["extra", "value"], [[Cell(k), Cell(v) if isinstance(v, str) else Cell(v.preview)] for k, v in rows], [False, True])


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
        name, caption = figure_text(stem, result.passages)
        out.append(RenderedFigure(stem, name, caption, figure_png(fig)))
    return out


def figure_text(stem: str, passages: bool = False) -> tuple:
    """``(title, caption)`` of a figure; ``passages``: of passage-mode results, whose reference is F_L.

    >>> figure_text("views", passages=True)[1].startswith("D_eff / F_L of every view")
    True
    """
    name, caption = FIGURES[stem]
    return name, passage_wording(caption) if passages else caption


# --------------------------------------------------------------------------- several results


def comparison_table(sources: list) -> Table:
    """One row per result (its first view under its primary similarity), in the order given, with a
    column for everything that tells the results apart (folder, tokens per sequence - always -,
    sequences, BOS, seed, dtype, similarity, views, carry).

    >>> import effdepth, torch, pathlib
    >>> r = effdepth.from_states(torch.randn(3, 2, 4, 8))
    >>> t = comparison_table([Source(pathlib.Path(f"{x}/result.json"), r, "", x) for x in "ab"])
    >>> t.header[:8]
    ['#', 'model', 'revision', 'L', 'N', 'corpus', 'folder', 'tokens/seq']
    """
    show_view = any(s.result.default.name != "default" for s in sources)
    facts = differing(sources)
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
            Cell(_plain(r.config.get("num_layers")), sort=sortable(r.config.get("num_layers"))),
            Cell(str(v.num_states), sort=v.num_states),
            Cell(str(corpus.get("name", "n/a"))),
        ]
        row += [_fact(values[i - 1]) for _, values in facts]
        if show_view:
            row.append(Cell(v.name))
        row += [
            number_cell(v, v.deff, "deff"),
            number_cell(v, v.reference),
            number_cell(v, v.ratio, "ratio"),
            number_cell(v, v.gap_pct, "gap_pct", signed=True, digits=1),
            Cell(sub_reference(v)),
            number_cell(v, refs.get("init")),
            number_cell(v, refs.get("size")),
            number_cell(v, refs.get("matched")),
            *(number_cell(v, a.get(k), signed=True) for k, _ in TERMS),
        ]
        rows.append(row)
    header = ["#", "model", "revision", "L", "N", "corpus"] + [c for c, _ in facts] + (["view"] if show_view else []) + [
        "D_eff", "F_N", "D_eff / F_N", "gap %", "sub-ref.", "R_init", "R_size", "R_matched", "init. state", "size imbal.", "corr. upd."]
    numeric = ([True, False, False, True, True, False] + [_numeric(values) for _, values in facts]
               + ([False] if show_view else []) + [True] * 4 + [False] + [True] * 6)
    shown = ", ".join(c for c, _ in facts)
    return Table(header, rows, numeric, note="Sorted by D_eff / F_N, lowest first (click a header to re-sort). Each row is "
                 "the result's first view under its primary similarity. Columns between corpus and D_eff are what tells the "
                 f"results apart ({shown}; tokens per sequence always, since the default view's D_eff moves with it). "
                 "N = L (block outputs) or L + 1 (embedding included); F_N = 2N/(N+1). " + ATTRIBUTION)


def _fact(value) -> Cell:
    text = "n/a" if value is None else ("yes" if value is True else "no" if value is False else str(value))
    return Cell(text, sort=sortable(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)


def _numeric(values: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values if x is not None)


def comparison_png(sources: list) -> bytes:
    from .figures_ratios import comparison_figure
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


def _extra_value(x):
    if x is None:
        return "n/a"  # non-finite values are saved as null
    if isinstance(x, float):
        return fmt(x) if abs(x) < 1e6 else f"{x:.4g}"
    return _value(x)


def _value(x):
    if isinstance(x, list) and len(x) > LONG_LIST:
        full = json.dumps(x)
        preview = json.dumps(x[:6])[:-1] + ", …]"
        return Folded(preview, full, len(x))
    return _plain(x)


def _plain(x) -> str:
    return x if isinstance(x, str) else json.dumps(x, default=str)
