"""What a report says about an old token-mode result (statistics summed over tokens, written before the token
reduction; docs/method.md#token-reduction). It reads the saved fields only.
"""

from __future__ import annotations

from effdepth.report.content.facts import device_rows, model_name, model_rows
from effdepth.report.content.model import (
    TERMS,
    Cell,
    ResultContent,
    Section,
    Table,
    interval,
    level,
    number_cell,
    sub_reference,
    unavailable_row,
)
from effdepth.report.content.passages import carry_lines
from effdepth.report.numbers import fmt
from effdepth.report.rows import has_calibrated, view_entries
from effdepth.report.wording import ATTRIBUTION, CALIBRATED, carry_text, context, similarity_name
from effdepth.results.result import Result


def token_content(result: Result) -> ResultContent:
    """The headline, summary and sections of an old token-mode result."""
    return ResultContent(headline_lines(result), summary_rows(result), sections(result))


def headline_lines(result: Result) -> list:
    """What was measured, on what, with which similarity (and carry); then the main number in one
    sentence (:func:`headline`); then the carry of an intervened model."""
    c, v = result.config, result.default
    corpus = result.provenance.get("corpus", {})
    others = [s for s in result.similarities if s != result.primary_similarity]
    return [
        f"model {model_name(result)} ({c.get('num_layers')} layers), "
        + (f"corpus {corpus.get('name')} ({v.sequences} x {c.get('seq_len')} tokens), " if corpus else "")
        + f"similarity {similarity_name(result.primary_similarity, passages=False)}"
        + (f", also {' and '.join(others)}" if others else "")
        + f", N = {v.num_states} states"
        + (" incl. embedding" if c.get("include_embedding") else ""),
        headline(result),
    ] + carry_lines(result)


def headline(result: Result) -> str:
    """The main finding in one sentence, with the similarity, the tokens per sequence and any carry."""
    v = result.default
    ci = interval(v, "deff")
    tokens = result.config.get("seq_len")
    text = (
        f"D_eff = {fmt(v.deff)}{' ' + ci if ci else ''} against F_N = {fmt(v.reference)} "
        f"(N = {v.num_states} states; {context(result)}"
        + (f"; {tokens} tokens per sequence" if tokens else "")
        + f"): ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)} %"
    )
    if v.sub_reference is True:
        text += f"; the whole {level(v)}% interval lies below F_N (sub-reference)"
    elif v.sub_reference is False:
        text += f"; the {level(v)}% interval reaches F_N or above"
    if len(result.views) > 1 or v.name != "default":
        text += f" [view {v.name}]"
    return text + "."


def summary_rows(result: Result) -> list:
    """``(label, value)`` pairs: what was measured, on what, and the main numbers."""
    c, v = result.config, result.default
    corpus = result.provenance.get("corpus") or {}
    states = "S_0..S_L (embedding included)" if c.get("include_embedding") else "S_1..S_L (block outputs)"
    others = [x for x in result.similarities if x != result.primary_similarity]
    also = f"; also {', '.join(others)} (see Definition sensitivity)" if others else ""
    rows = model_rows(result) + [
        ("states analysed N", f"{v.num_states}: {states}"),
        ("similarity", similarity_name(result.primary_similarity, passages=False) + also),
    ]
    carry = carry_text(result.extras)
    if carry:
        rows.append(("intervention", f"{carry}: an intervened model, not the plain one"))
    if corpus:
        rows.append(("corpus", f"{corpus.get('name')} (sha256 {str(corpus.get('sha256'))[:16]}…)"))
    rows += [
        ("sequences x tokens per sequence", f"{v.sequences} x {c.get('seq_len', 'n/a')} ({v.tokens} tokens analysed)"),
        (
            "bootstrap",
            f"{v.ci['resamples']} resamples over sequences, {level(v)}% percentile intervals" if v.ci else "none",
        ),
        ("D_eff", f"{fmt(v.deff)} {interval(v, 'deff')}".strip()),
        ("F_N", fmt(v.reference)),
        ("D_eff / F_N", f"{fmt(v.ratio)} {interval(v, 'ratio')}".strip()),
        ("gap %", f"{fmt(v.gap_pct, 1, signed=True)} {interval(v, 'gap_pct', 1)}".strip()),
        ("sub-reference", sub_reference(v)),
    ]
    return rows + device_rows(result)


def sections(result: Result) -> list:
    """The views and references under the primary similarity, then (several similarities) the
    definition sensitivity."""
    where = context(result)
    out = [Section("views", views_table(result), where), Section("references", references_table(result), where)]
    sensitivity = sensitivity_table(result)
    if sensitivity is not None:
        what = "D_eff / F_N and D_eff per view and similarity"
        out.append(Section("definition sensitivity", sensitivity, what, anchor="sensitivity"))
    return out


def view_rows(result: Result, similarity: str | None, width: int, row) -> list:
    """One row per view under ``similarity``: ``row(name, view_result)``, or, for a view without a
    value, the unavailable row of ``width`` cells with its reason."""
    return [
        unavailable_row(name, reason, width) if v is None else row(name, v)
        for name, v, reason in view_entries(result, similarity)
    ]


def views_table(result: Result, similarity: str | None = None) -> Table:
    """One row per view under ``similarity`` (default: the primary); ``unavailable`` (with the reason)
    where there is no value."""
    lv = level(result.default)
    header = ["view", "D_eff", "F_N", "D_eff / F_N", "gap %", "sub-ref.", *(label for _, label in TERMS)]

    def row(name: str, v) -> list:
        a = v.attribution or {}
        return [
            Cell(name),
            number_cell(v, v.deff, "deff"),
            number_cell(v, v.reference),
            number_cell(v, v.ratio, "ratio"),
            number_cell(v, v.gap_pct, "gap_pct", signed=True, digits=1),
            Cell(sub_reference(v)),
            *(number_cell(v, a.get(k), k, signed=True) for k, _ in TERMS),
        ]

    return Table(
        header,
        view_rows(result, similarity, len(header), row),
        [False, True, True, True, True, False, True, True, True],
        note=f"{context(result, similarity).capitalize()}. Brackets: {lv}% bootstrap intervals over sequences. gap % = "
        "100 (1 - D_eff/F_N), positive = below the reference. sub-ref.: the whole D_eff interval lies below F_N. "
        + ATTRIBUTION,
    )


def references_table(result: Result, similarity: str | None = None) -> Table:
    """The references of each view, with intervals (docs/method.md#calibrated-references)."""
    calibrated = has_calibrated(result, similarity)
    header = (
        ["view", "F_N", "R_init", "R_size", "R_matched"] + (list(CALIBRATED.values()) if calibrated else []) + ["D_eff"]
    )
    kinds = ("init", "size", "matched") + (tuple(CALIBRATED) if calibrated else ())

    def row(name: str, v) -> list:
        r = v.references or {}
        return [
            Cell(name),
            number_cell(v, v.reference),
            *(number_cell(v, r.get(k), f"reference_{k}") for k in kinds),
            number_cell(v, v.deff, "deff"),
        ]

    rows = view_rows(result, similarity, len(header), row)
    note = (
        f"{context(result, similarity).capitalize()}. F_N: orthogonal equal updates, no initial state. R_init matches the "
        "initial state, R_size the update sizes, R_matched both; D_eff equals R_matched when all updates are mutually "
        "orthogonal and orthogonal to S_0."
    )
    if calibrated:
        note += (
            " R_structural_cal and R_matched_cal: the D_eff of Gaussian surrogate streams (equal update energies and no "
            "initial state; the measured energies and S_0) through the same views, similarity and estimator."
        )
    return Table(header, rows, [False] + [True] * (len(header) - 1), note=note)


def sensitivity_table(result: Result) -> Table | None:
    """Definition sensitivity: D_eff / F_N (and D_eff) per view and similarity, with intervals; None
    with one similarity."""
    sims = list(result.similarities)
    if len(sims) < 2:
        return None
    # One column pair per similarity; every similarity lists the views in the same order.
    columns = [view_entries(result, sim) for sim in sims]
    rows = []
    for entries in zip(*columns):
        ratios = [
            Cell("unavailable", reason=reason) if v is None else number_cell(v, v.ratio, "ratio")
            for _, v, reason in entries
        ]
        deffs = [Cell("unavailable") if v is None else number_cell(v, v.deff, "deff") for _, v, _ in entries]
        rows.append([Cell(entries[0][0])] + ratios + deffs)
    header = ["view"] + [f"{s} D_eff / F_N" for s in sims] + [f"{s} D_eff" for s in sims]
    carry = carry_text(result.extras)
    return Table(
        header,
        rows,
        [False] + [True] * (2 * len(sims)),
        note="The same forward passes under each similarity (primary first): "
        + "; ".join(similarity_name(s, passages=False) for s in sims)
        + ". Brackets: bootstrap intervals."
        + (f" {carry.capitalize()}." if carry else ""),
    )
