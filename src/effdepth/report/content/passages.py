"""What a report says about a passage-mode result (docs/method.md#passage-mode)."""

from __future__ import annotations

import numpy as np

from effdepth.data.paper import table2_row, table2_source
from effdepth.numerics.similarities import default_similarity, names_where, specs
from effdepth.report.content.confounds import confound_warnings, confounds_section, lengths_text, sample_size_section
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
    sortable,
    sub_reference,
    value_cell,
)
from effdepth.report.content.robustness import sensitivity_table
from effdepth.report.numbers import fmt
from effdepth.report.wording import ATTRIBUTION, carry_text, passage_wording, similarity_name
from effdepth.results.result import Result, ViewResult

#: The similarities that are CKA estimators (they have references and a finite-sample null).
KERNELS = names_where(lambda s: s.kernel)
#: The debiased estimator, always measured beside the paper's similarity.
DEBIASED = next(s.name for s in specs() if s.companion_of == default_similarity())
#: The references of a CKA estimator, with the paper's names.
REFERENCE_COLUMNS = (
    ("init", "R_init"),
    ("size", "R_size=F_norm"),
    ("matched", "R_matched=F_h0+norm"),
    ("corr", "R_corr=F_h0+corr"),
    ("structural_cal", "structural_cal"),
    ("matched_cal", "matched_cal"),
)


def passage_content(result: Result) -> ResultContent:
    """The headline, summary and sections of a passage-mode result.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=0, progress=False)
    >>> c = passage_content(r)
    >>> c.headline[2].startswith("D_eff = "), [s.title for s in c.sections][:3]
    (True, ['views', 'confounds: first position and passage length', 'sample size'])
    """
    return ResultContent(headline_lines(result), summary_rows(result), sections(result))


def headline_lines(result: Result) -> list:
    """What was measured, the main number against F_L, and where each estimator alone sits (its null)."""
    c, v = result.config, result.default
    corpus = result.provenance.get("corpus", {})
    states = (
        "transformers' hidden_states (last one after the final norm)"
        if c.get("states") == "hidden"
        else "block outputs before the final norm"
    )
    protocol = f", protocol {c['protocol']}" if c.get("protocol") else ""
    return (
        [
            f"model {model_name(result)} ({c.get('num_layers')} layers; {states}), corpus {corpus.get('name', '?')}: "
            f"{v.sequences:,} passages of at most {c.get('seq_len')} tokens (mean {c.get('mean_passage_tokens', '?')}){protocol}",
            f"similarity across passages: {similarity_name(result.primary_similarity)}"
            + "".join(f"; also {similarity_name(s)}" for s in result.similarities if s != result.primary_similarity),
            f"D_eff = {fmt(v.deff)} {interval(v, 'deff')}  vs  F_L = {fmt(v.reference)}: D_eff/L {fmt(v.deff / v.num_states)}, "
            f"ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)}%  [view {v.name}, {result.primary_similarity}, "
            f"N = {v.num_states} states]",
        ]
        + sample_lines(result)
        + null_lines(result)
        + confound_warnings(result)
        + carry_lines(result)
    )


def sample_lines(result: Result) -> list:
    """What a sample is, when it is not a passage's mean: the token reduction's tokens."""
    reduction = result.config.get("reduction")
    if not reduction:
        return []
    k = reduction.get("tokens_per_passage")
    count = (reduction.get("per_variant") or {}).get("default")
    each = f"{k} tokens drawn from each passage" if k else "every token of each passage"
    return [f"samples: {each} (--pooling none){f', {count:,} in all' if count else ''}, resampled by whole passages"]


def carry_lines(result: Result) -> list:
    """The carry of an intervened model (its numbers are not the plain model's)."""
    carry = carry_text(result.extras)
    return [f"intervened model: {carry} (not the plain model; docs/method.md#carry-in-model)"] if carry else []


def null_lines(result: Result) -> list:
    """How far each estimator alone sits from F_L at this N, d and L (the structural_cal null), one line each."""
    out = []
    for sim, v in default_views(result):
        null = v.references.get("structural_cal")
        if null is not None:
            out.append(
                f"estimator null ({sim}, isotropic equal updates at this N, d, L): {fmt(null)} = "
                f"{fmt(null / v.reference)} F_L {interval(v, 'reference_structural_cal')}".rstrip()
            )
    return out


def summary_rows(result: Result) -> list:
    """``(label, value)`` pairs: the model, the passages, the bootstrap and the main numbers, in F_L."""
    c, v, corpus = result.config, result.default, result.provenance.get("corpus") or {}
    boot = (c.get("passage_analysis") or {}).get("bootstrap") or {}  # how the analysis drew its resamples
    rows = model_rows(result) + [
        (
            "states analysed N",
            f"{v.num_states}: S_1..S_L, {c.get('states_meaning') or c.get('states') or 'block outputs'}",
        ),
        ("similarity", "; ".join(similarity_name(s) for s in result.similarities)),
        ("corpus", f"{corpus.get('name', 'n/a')} (sha256 {str(corpus.get('sha256'))[:16]}…)"),
        (
            "passages",
            f"{v.sequences:,} of at most {c.get('seq_len', 'n/a')} tokens (mean {c.get('mean_passage_tokens', 'n/a')}), "
            f"split by {c.get('passage_split', 'n/a')}" + (f", protocol {c['protocol']}" if c.get("protocol") else ""),
        ),
        ("passage lengths", lengths_text(result) or "not recorded"),
        ("samples", samples_text(result)),
        (
            "bootstrap",
            f"{v.ci['resamples']} resamples of {_units(boot)}, {level(v)}% percentile intervals" if v.ci else "none",
        ),
        ("D_eff", f"{fmt(v.deff)} {interval(v, 'deff')}".strip()),
        ("F_L", fmt(v.reference)),
        ("D_eff / F_L", f"{fmt(v.ratio)} {interval(v, 'ratio')}".strip()),
        ("D_eff / L", fmt(v.deff / v.num_states)),
        ("gap %", f"{fmt(v.gap_pct, 1, signed=True)} {interval(v, 'gap_pct', 1)}".strip()),
        ("sub-reference", sub_reference(v)),
    ]
    return rows + device_rows(result)


def samples_text(result: Result) -> str:
    """What one sample is: a passage's mean (the paper's), or under the token reduction its tokens.

    >>> from effdepth.results.result import Result
    >>> samples_text(Result(views={}, config={"reduction": {"samples": "tokens", "per_variant": {"default": 96}}}))
    'the tokens of each passage (default 96), units of whole passages'
    """
    reduction = result.config.get("reduction")
    if not reduction:
        return "one per passage: the mean of its tokens (the paper's)"
    counts = ", ".join(f"{v} {n:,}" for v, n in reduction.get("per_variant", {}).items())
    return f"the tokens of each passage ({counts}), units of whole passages"


def _units(boot: dict) -> str:
    """What the bootstrap drew: passages, or blocks of consecutive passages."""
    units, sizes = boot.get("units", "n/a"), boot.get("samples_per_unit") or []
    if not sizes or max(sizes) == 1:
        return f"{units} passages"
    size = str(sizes[0]) if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"
    return f"{units} blocks of {size} consecutive passages"


def sections(result: Result) -> list:
    """The tables of one result, in the order every format shows them."""
    out = [Section("views", views_table(result))]
    out += [s for s in (confounds_section(result), sample_size_section(result)) if s is not None]
    out.append(Section("references", references_table(result)))
    primary = result.primary_similarity
    if primary in KERNELS:
        out.append(Section(f"attribution, similarity {primary}", attribution_table(result, primary)))
        out.append(Section(f"update diagnostic, similarity {primary}", updates_table(result, primary)))
    optional = [
        ("update norm ratio per layer, view default", update_layers_table(result)),
        (f"maximum lag, taper and aggregation, similarity {primary}", sensitivity_table(result)),
    ]
    out += [Section(title, table) for title, table in optional if table is not None]
    table2 = table2_section(result)
    return out + ([table2] if table2 is not None else [])


def views_table(result: Result) -> Table:
    """One row per view: D_eff [CI], D_eff/L and gap under the primary estimator, then D_eff / F_L [CI]
    and the estimator's null / F_L for each CKA estimator (and D_eff / F_L of any other similarity)."""
    sims = list(result.similarities)
    header = ["view", "D_eff", "D_eff/L", "gap %"]
    for sim in sims:
        header += [f"{sim} /F_L", f"{sim} null/F_L"] if sim in KERNELS else [f"{sim} /F_L"]
    rows = []
    for name, v in result.views.items():
        row = [
            Cell(name),
            number_cell(v, v.deff, "deff"),
            per_layer_cell(v),
            number_cell(v, v.gap_pct, signed=True, digits=1),
        ]
        for sim in sims:
            w = result.similarities[sim].get(name)
            row.append(Cell("-") if w is None else number_cell(w, w.ratio, "ratio"))
            if sim in KERNELS:
                row.append(null_ratio_cell(w))
        rows.append(row)
    return Table(
        header,
        rows,
        [False] + [True] * (len(header) - 1),
        note=f"D_eff, D_eff/L and gap under {result.primary_similarity}; /F_L: D_eff / F_L [{level(result.default)}% "
        "bootstrap interval] under each similarity; null/F_L: the estimator's finite-sample null (structural_cal, "
        "isotropic equal updates at this N, d, L) over F_L.",
    )


def references_table(result: Result) -> Table:
    """F_L, the matched references with the paper's names, the finite-sample references and D_eff, per
    CKA estimator and view."""
    header = ["similarity", "view", "F_L"] + [label for _, label in REFERENCE_COLUMNS] + ["D_eff"]
    rows = []
    for sim in (s for s in result.similarities if s in KERNELS):
        for name, v in result.similarities[sim].items():
            rows.append(
                [Cell(sim), Cell(name), number_cell(v, v.reference)]
                + [number_cell(v, v.references.get(key)) for key, _ in REFERENCE_COLUMNS]
                + [number_cell(v, v.deff)]
            )
    return Table(
        header,
        rows,
        [False, False] + [True] * (len(header) - 2),
        note="F_L = 2L/(L+1): orthogonal equal updates, no initial state. R_init matches the initial state, "
        "R_size the update sizes, R_matched both; R_corr adds the measured correlation of the updates. "
        "structural_cal and matched_cal: the estimator itself on surrogate streams of this N, d and L (isotropic "
        "equal updates; the measured initial state and updates, passages permuted per layer): how far the "
        "estimator alone sits from F_L and R_matched. structural_cal is the estimator's null.",
    )


def attribution_table(result: Result, similarity: str) -> Table:
    """The three terms of F_L - D_eff per view, with intervals."""
    header = ["view"] + [label for _, label in TERMS]
    rows = [
        [Cell(name)] + [number_cell(v, (v.attribution or {}).get(k), k, signed=True) for k, _ in TERMS]
        for name, v in result.similarities[similarity].items()
    ]
    return Table(header, rows, [False, True, True, True], note=passage_wording(ATTRIBUTION))


def updates_table(result: Result, similarity: str) -> Table:
    """Per view: D_eff of the updates f_1..f_L (same estimator) and over L beside the states', and the
    update-to-state norm ratio at the first layer, its median over layers and at the last layer."""
    header = [
        "view",
        "updates D_eff",
        "updates D_eff/L",
        "states D_eff/L",
        "|f_1|/|h_0|",
        "median |f_l|/|h_l-1|",
        "|f_L|/|h_L-1|",
    ]
    rows = []
    for name, v in result.similarities[similarity].items():
        count = len(v.update_sizes) or None
        ratio = v.update_norm_ratio
        band = (v.ci or {}).get("update_norm_ratio")
        rows.append(
            [
                Cell(name),
                number_cell(v, v.update_deff, "update_deff"),
                number_cell(
                    v, v.update_deff / count if count and v.update_deff is not None else None, "update_deff_per_layer"
                ),
                per_layer_cell(v),
            ]
            + (
                [
                    _layer_cell(ratio, band, 0),
                    Cell(fmt(float(np.nanmedian(np.asarray(ratio, dtype=float))))),
                    _layer_cell(ratio, band, -1),
                ]
                if ratio
                else [Cell("-")] * 3
            )
        )
    return Table(
        header,
        rows,
        [False] + [True] * 6,
        note="D_eff of the updates f_l = h_l - h_{l-1} under the same estimator, and over L (the paper's S16: "
        "the same low band as the states). |f_l|/|h_l-1|: mean norm of the pooled update over mean norm of "
        "the pooled state it is added to, across passages (per layer in the next table).",
    )


def update_layers_table(result: Result) -> Table | None:
    """One row per layer of the default view: the pooled norm ratio and the token-level one, with intervals."""
    v = result.views.get("default")
    if v is None or not v.update_norm_ratio:
        return None
    ci = v.ci or {}
    tokens = (v.related or {}).get("relative_contribution") or []
    rows = [
        [
            Cell(str(l + 1)),
            _layer_cell(v.update_norm_ratio, ci.get("update_norm_ratio"), l),
            _layer_cell(tokens, ci.get("relative_contribution"), l) if len(tokens) > l else Cell("-"),
        ]
        for l in range(len(v.update_norm_ratio))
    ]
    return Table(
        ["layer", "|f_l|/|h_l-1| (passages)", "|u_l|/|s_l-1| (tokens)"],
        rows,
        [True, True, True],
        note="passages: mean over passages of the pooled update's norm over the pooled state's; tokens: the "
        "same over every token (Csordas et al.'s relative contribution). Brackets: bootstrap intervals.",
    )


def _layer_cell(values, band, index: int) -> Cell:
    x = values[index]
    text = ""
    if band and len(band) == 2 and len(band[0]) == len(values):
        text = f"[{fmt(band[0][index])}, {fmt(band[1][index])}]"
    return Cell(fmt(x), text, sortable(x))


def table2_section(result: Result) -> Section | None:
    """The paper's Table 2 row beside ours, with the difference in D_eff, when the model is one of its sixteen."""
    paper = paper_row(result)
    v = result.views.get("default")
    if paper is None or v is None:
        return None
    theirs = [str(paper.layers), fmt(paper.deff, 2), fmt(paper.deff_per_layer), fmt(paper.gap_pct, 1, signed=True)]
    rows = [[Cell(text) for text in ["paper (Table 2)", *theirs, ""]]]
    for sim, w in default_views(result):
        if sim == result.primary_similarity or sim == DEBIASED:
            rows.append(
                [
                    Cell(f"effdepth ({sim})"),
                    Cell(str(w.num_states)),
                    Cell(fmt(w.deff)),
                    per_layer_cell(w),
                    Cell(fmt(w.gap_pct, 1, signed=True)),
                    Cell(fmt(w.deff - paper.deff, 3, signed=True)),
                ]
            )
    table = Table(
        ["", "L", "D_eff", "D_eff/L", "gap %", "diff"],
        rows,
        [False] + [True] * 5,
        note=f"diff: our D_eff minus the paper's. source: {table2_source()}",
    )
    return Section(
        f"beside the paper's Table 2 ({paper.model}; difference {fmt(v.deff - paper.deff, 3, signed=True)} in D_eff)",
        table,
    )


def default_views(result: Result):
    """``(similarity, its default view)`` (its first view when it has no default), primary first."""
    for sim, views in result.similarities.items():
        v = views.get("default") or next(iter(views.values()), None)
        if v is not None:
            yield sim, v


def paper_row(result: Result):
    """The paper's Table 2 row of the model measured, or None when it is not one of the sixteen."""
    model = result.provenance.get("model", {})
    return table2_row(model.get("id"), model.get("paper"))


def per_layer_cell(v: ViewResult) -> Cell:
    """D_eff / L: D_eff over the number of states (the L block outputs)."""
    x = v.deff / v.num_states
    return Cell(fmt(x), sort=sortable(x))


def ratio_cell(v: ViewResult | None) -> Cell:
    """D_eff / F_L of ``v``, ``-`` without the view."""
    return Cell("-") if v is None else Cell(fmt(v.ratio), sort=sortable(v.ratio))


def null_ratio_cell(v: ViewResult | None) -> Cell:
    """The estimator's finite-sample null (structural_cal) over F_L, ``-`` without it."""
    null = None if v is None else v.references.get("structural_cal")
    return Cell("-") if null is None else value_cell(null / v.reference)
