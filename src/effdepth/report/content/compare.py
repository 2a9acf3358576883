"""What a report says about several results side by side."""

from __future__ import annotations

from effdepth.data.paper import table2_source
from effdepth.report.content.facts import plain
from effdepth.report.content.model import TERMS, Cell, Section, Table, number_cell, sortable, sub_reference, value_cell
from effdepth.report.content.passages import DEBIASED, null_ratio_cell, paper_row, per_layer_cell, ratio_cell
from effdepth.report.content.robustness import ordering_table
from effdepth.report.numbers import fmt
from effdepth.report.rows import ALWAYS, differing
from effdepth.report.wording import ATTRIBUTION, passage_wording
from effdepth.results.result import Result

#: What stays a column when the options that differ move under a table too wide for its lines.
KEPT_COLUMNS = ("folder", *ALWAYS, "carry")


def comparison_table(sources: list, width: int | None = None) -> Table:
    """One row per result (its first view under its primary similarity), in the order given, with a
    column for everything that tells the results apart (:func:`~effdepth.report.rows.differing`). Past
    ``width`` characters a line, the options that differ move to a legend under it, a line per result.

    >>> import effdepth, torch, pathlib
    >>> from effdepth.report.sources import Source
    >>> r, s = effdepth.from_states(torch.randn(3, 8, 4, 8)), effdepth.from_states(torch.randn(3, 8, 4, 8), seed=2)
    >>> t = comparison_table([Source(pathlib.Path(f"{x}/result.json"), v, "", x) for x, v in zip("ab", (r, s))])
    >>> t.header[:9]
    ['#', 'model', 'revision', 'L', 'N', 'corpus', 'folder', 'tokens/seq', '--seed']
    >>> t = comparison_table([Source(pathlib.Path(f"{x}/result.json"), v, "", x) for x, v in zip("ab", (r, s))], 160)
    >>> "--seed" in t.header, t.legend
    (False, ['#1: --seed 0', '#2: --seed 2'])
    """
    facts = differing(sources)
    table = _comparison_table(sources, facts)
    if width is None or _line_width(table) <= width:
        return table
    return _comparison_table(
        sources, [f for f in facts if f[0] in KEPT_COLUMNS], [f for f in facts if f[0] not in KEPT_COLUMNS]
    )


def _line_width(table: Table) -> int:
    """The characters of the table's widest line as a pipe table writes it."""
    columns = zip(table.header, *([f"{c.text} {c.ci}".strip() for c in row] for row in table.rows))
    return 1 + sum(3 + max(map(len, column)) for column in columns)


def _comparison_table(sources: list, facts: list, legend: list = ()) -> Table:
    """:func:`comparison_table` with ``facts`` as columns and the ``legend`` facts under it."""
    show_view = any(s.result.default.name != "default" for s in sources)
    # F_L, the measurement core's name; F_N only when old token-mode results (their N states) are among them.
    ref = "F_L" if all(s.result.passages for s in sources) else "F_N"
    rows = []
    for i, s in enumerate(sources, start=1):
        r, v = s.result, s.result.default
        model = r.provenance.get("model") or {}
        corpus = r.provenance.get("corpus") or {}
        a, refs = v.attribution or {}, v.references or {}
        row = [
            Cell(str(i), sort=i),
            Cell(str(model.get("id") or model.get("source") or s.label), href=f"#result-{i}"),
            Cell(str(model.get("revision") or "n/a")),
            Cell(plain(r.config.get("num_layers")), sort=sortable(r.config.get("num_layers"))),
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
    header = (
        ["#", "model", "revision", "L", "N", "corpus"]
        + [c for c, _ in facts]
        + (["view"] if show_view else [])
        + [
            "D_eff",
            ref,
            f"D_eff / {ref}",
            "gap %",
            "sub-ref.",
            "R_init",
            "R_size",
            "R_matched",
            "init. state",
            "size imbal.",
            "corr. upd.",
        ]
    )
    numeric = (
        [True, False, False, True, True, False]
        + [_numeric(values) for _, values in facts]
        + ([False] if show_view else [])
        + [True] * 4
        + [False]
        + [True] * 6
    )
    shown = ", ".join(c for c, _ in [*facts, *legend])
    lines = [
        f"#{i}: " + "; ".join(f"{c} {_fact(values[i - 1]).text}" for c, values in legend)
        for i in range(1, len(sources) + 1)
    ]
    return Table(
        header,
        rows,
        numeric,
        note=f"Sorted by D_eff / {ref}, lowest first (click a header to re-sort). Each row is "
        "the result's first view under its primary similarity. Columns between corpus and D_eff"
        + (", and the lines above," if legend else "")
        + f" are what tells the results apart ({shown}; options as typed; tokens per sequence always, since the "
        f"default view's D_eff moves with it). N = L (block outputs) or L + 1 (embedding included); {ref} = 2N/(N+1). "
        + (passage_wording(ATTRIBUTION) if ref == "F_L" else ATTRIBUTION),
        legend=lines if legend else [],
    )


def _fact(value) -> Cell:
    text = "n/a" if value is None else ("yes" if value is True else "no" if value is False else str(value))
    return Cell(text, sort=sortable(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None)


def _numeric(values: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in values if x is not None)


def passage_sections(entries: list) -> list:
    """The sections comparing the passage-mode results among ``entries`` (``(label, Result)``); none when
    no result is in passage mode.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=0, progress=False)
    >>> [s.anchor for s in passage_sections([("a", r), ("b", r), ("c", r)])]
    ['table2', 'ordering']
    >>> [s.anchor for s in passage_sections([("t", effdepth.from_states(torch.randn(3, 8, 4, 8)))])]
    ['table2']
    """
    table2 = table2_section(entries)
    if table2 is None:
        return []
    out = [table2]
    ordering = ordering_table([(label, r) for label, r in entries if r.passages])
    if ordering is not None:
        out.append(Section("model ordering under other lags, tapers and aggregations", ordering, anchor="ordering"))
    return out


def table2_section(entries: list) -> Section | None:
    """The passage-mode results among ``entries`` (``(label, Result)``) in the layout of the paper's Table 2,
    the paper's row beside ours; ``None`` when none is in passage mode."""
    passages = [(label, r) for label, r in entries if r.passages]
    if not passages:
        return None
    header = [
        "model",
        "L",
        "N",
        "D_eff",
        "D_eff/L",
        "gap %",
        "debiased/F_L",
        "null/F_L",
        "R_matched",
        "R_corr",
        "token-norm/F_L",
        "top1pc/F_L",
        "paper D_eff",
        "paper D_eff/L",
        "paper gap %",
        "diff",
    ]
    rows = [_table2_row(label, result) for label, result in passages]
    note = (
        ("paper columns: the paper's Table 2 (" + table2_source() + ")")
        if any(paper_row(r) for _, r in passages)
        else "paper columns: '-' where the model is not one of the paper's sixteen (Table 2)"
    )
    table = Table(header, rows, [False] + [True] * (len(header) - 1), note=note)
    return Section("beside the paper's Table 2 (similarity cka across passages)", table, anchor="table2")


def _table2_row(label: str, result: Result) -> list:
    v = result.similarities.get("cka", {}).get("default") or result.default
    deb = result.similarities.get(DEBIASED, {}).get("default")
    views = result.similarities.get("cka", result.views)
    paper = paper_row(result)
    return [
        Cell(label),
        Cell(str(v.num_states), sort=v.num_states),
        Cell(f"{v.sequences:,}", sort=v.sequences),
        Cell(fmt(v.deff), sort=sortable(v.deff)),
        per_layer_cell(v),
        Cell(fmt(v.gap_pct, 1, signed=True), sort=sortable(v.gap_pct)),
        ratio_cell(deb),
        null_ratio_cell(v),
        number_cell(v, v.references.get("matched")),
        number_cell(v, v.references.get("corr")),
        ratio_cell(views.get("token-norm")),
        ratio_cell(views.get("top1pc")),
        value_cell(paper.deff if paper else None, 2),
        value_cell(paper.deff_per_layer if paper else None),
        value_cell(paper.gap_pct if paper else None, 1, signed=True),
        value_cell(v.deff - paper.deff if paper else None, 3, signed=True),
    ]
