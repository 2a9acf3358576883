"""Plain-text tables of passage-mode results: the paper's estimator beside the debiased one, the
finite-sample null, the references, and the paper's Table 2 row (docs/method.md#passage-mode).

- one result (``effdepth measure``, ``effdepth show``): :func:`passage_summary_text`;
- several (``effdepth claims DIR``, the demo): :func:`comparison_table`, one row per model in the
  layout of the paper's Table 2, with its row beside ours.
"""

from __future__ import annotations

from ..data.paper import table2_row, table2_source
from ..result import Result
from .numbers import fmt, fmt_interval
from .tables import extras_table, render_table
from .wording import ATTRIBUTION, similarity_name

KERNELS = ("cka", "cka-debiased")
#: The references of a CKA estimator, with the paper's names.
REFERENCE_COLUMNS = (("init", "R_init"), ("size", "R_size=F_norm"), ("matched", "R_matched=F_h0+norm"),
                     ("corr", "R_corr=F_h0+corr"), ("structural_cal", "structural_cal"), ("matched_cal", "matched_cal"))


def _ci(v, key: str) -> str:
    return fmt_interval((v.ci or {}).get(key))


def _model_name(result: Result) -> str:
    model = result.provenance.get("model", {})
    name = str(model.get("id") or "states")
    return name + (f"@{model['revision']}" if model.get("revision") not in (None, "main") else "")


def passage_headline(result: Result) -> str:
    """What was measured, and the main number with the estimator's own null beside it."""
    c, v = result.config, result.default
    corpus = result.provenance.get("corpus", {})
    states = "transformers' hidden_states (last one after the final norm)" if c.get("states") == "hidden" else \
        "block outputs before the final norm"
    protocol = f", protocol {c['protocol']}" if c.get("protocol") else ""
    lines = [
        f"model {_model_name(result)} ({c.get('num_layers')} layers; {states}), corpus {corpus.get('name', '?')}: "
        f"{v.sequences:,} passages of at most {c.get('seq_len')} tokens (mean {c.get('mean_passage_tokens', '?')}){protocol}",
        f"similarity across passages: {similarity_name(result.primary_similarity, passages=True)}"
        + "".join(f"; also {similarity_name(s, passages=True)}" for s in result.similarities if s != result.primary_similarity),
        f"D_eff = {fmt(v.deff)} {_ci(v, 'deff')}  vs  F_L = {fmt(v.reference)}: D_eff/L {fmt(v.deff / v.num_states)}, "
        f"ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)}%  [view {v.name}, {result.primary_similarity}, "
        f"N = {v.num_states} states]",
    ]
    lines += null_lines(result)
    return "\n".join(lines)


def null_lines(result: Result) -> list:
    """How far each estimator alone sits from F_L at this N, d and L (the structural_cal null)."""
    out = []
    for sim, views in result.similarities.items():
        v = views.get("default") or next(iter(views.values()))
        null = v.references.get("structural_cal")
        if null is not None:
            out.append(f"estimator null ({sim}, isotropic equal updates at this N, d, L): {fmt(null)} = "
                       f"{fmt(null / v.reference)} F_L {_ci(v, 'reference_structural_cal')}")
    return out


def views_table(result: Result) -> str:
    """One row per view: D_eff [CI], D_eff/L and gap under the primary estimator, then D_eff / F_L and the
    estimator's null / F_L for each CKA estimator (and cosine's D_eff / F_L)."""
    sims = list(result.similarities)
    header = ["view", "D_eff", "95% CI", "D_eff/L", "gap %"]
    for sim in sims:
        header += [f"{sim} /F_L", f"{sim} null/F_L"] if sim in KERNELS else [f"{sim} /F_L"]
    rows = []
    for name, v in result.views.items():
        row = [name, fmt(v.deff), _ci(v, "deff"), fmt(v.deff / v.num_states), fmt(v.gap_pct, 1, signed=True)]
        for sim in sims:
            w = result.similarities[sim].get(name)
            row.append("-" if w is None else f"{fmt(w.ratio)} {fmt_interval([x / w.reference for x in w.ci['deff']]) if w.ci else ''}".strip())
            if sim in KERNELS:
                null = None if w is None else w.references.get("structural_cal")
                row.append("-" if null is None else fmt(null / w.reference))
        rows.append(row)
    return render_table(header, rows)


def references_table(result: Result, similarity: str) -> str:
    """F_L, the matched references with the paper's names, the finite-sample references, D_eff."""
    views = result.similarities[similarity]
    header = ["view", "F_L"] + [label for _, label in REFERENCE_COLUMNS] + ["D_eff"]
    rows = [[name, fmt(v.reference)] + [fmt(v.references.get(key)) for key, _ in REFERENCE_COLUMNS] + [fmt(v.deff)]
            for name, v in views.items()]
    return render_table(header, rows)


def attribution_table(result: Result, similarity: str) -> str:
    """The three terms of F_L - D_eff per view, with intervals, and D_eff of the updates per layer."""
    views = result.similarities[similarity]
    header = ["view", "initial state", "size imbalance", "correlated updates", "updates D_eff/L"]
    rows = []
    for name, v in views.items():
        a = v.attribution
        rows.append([name] + [f"{fmt(a.get(k), signed=True)} {_ci(v, k)}".strip()
                              for k in ("initial_state", "size_imbalance", "correlated_updates")]
                    + [fmt(v.update_deff / len(v.update_sizes)) if v.update_deff is not None and v.update_sizes else "-"])
    return render_table(header, rows)


def table2_lines(result: Result) -> list:
    """The paper's Table 2 row beside ours, when the model is one of its sixteen."""
    model = result.provenance.get("model", {})
    row = table2_row(model.get("id"), model.get("paper"))
    if row is None:
        return []
    v = result.views.get("default")
    if v is None:
        return []
    ours = [["paper (Table 2)", str(row.layers), fmt(row.deff, 2), fmt(row.deff_per_layer), fmt(row.gap_pct, 1, signed=True)],
            [f"effdepth ({result.primary_similarity})", str(v.num_states), fmt(v.deff), fmt(v.deff / v.num_states),
             fmt(v.gap_pct, 1, signed=True)]]
    deb = result.similarities.get("cka-debiased", {}).get("default")
    if deb is not None:
        ours.append(["effdepth (cka-debiased)", str(deb.num_states), fmt(deb.deff), fmt(deb.deff / deb.num_states),
                     fmt(deb.gap_pct, 1, signed=True)])
    table = render_table(["", "L", "D_eff", "D_eff/L", "gap %"], ours)
    return [f"beside the paper's Table 2 ({row.model}; difference {fmt(v.deff - row.deff, 3, signed=True)} in D_eff):",
            table, f"source: {table2_source()}"]


def passage_summary_text(result: Result) -> str:
    """Everything the terminal shows for a passage-mode result."""
    parts = [passage_headline(result), f"views (D_eff / F_L [95% CI]; null = structural_cal / F_L):\n{views_table(result)}"]
    for sim in (s for s in result.similarities if s in KERNELS):
        parts.append(f"references, similarity {sim}:\n{references_table(result, sim)}")
    primary = result.primary_similarity if result.primary_similarity in KERNELS else None
    if primary:
        parts.append(f"attribution, similarity {primary}:\n{attribution_table(result, primary)}\n{ATTRIBUTION.replace('F_N', 'F_L')}")
    table2 = table2_lines(result)
    if table2:
        parts.append("\n".join(table2))
    extras = extras_table(result)
    if extras:
        parts.append(extras)
    return "\n\n".join(parts)


def comparison_table(entries: list) -> str:
    """Several passage-mode results in the layout of the paper's Table 2, the paper's row beside ours.

    ``entries`` are ``(label, Result)``. Columns: L; D_eff, D_eff/L and gap under cka; the debiased
    D_eff / F_L; the biased estimator's null / F_L; R_matched and R_corr; token-norm and top1pc
    D_eff / F_L; the paper's D_eff and gap, and the difference.
    """
    header = ["model", "L", "N", "D_eff", "D_eff/L", "gap %", "debiased/F_L", "null/F_L", "R_matched", "R_corr",
              "token-norm/F_L", "top1pc/F_L", "paper D_eff", "paper gap %", "diff"]
    rows = []
    for label, result in entries:
        v = result.similarities.get("cka", {}).get("default") or result.default
        deb = result.similarities.get("cka-debiased", {}).get("default")
        views = result.similarities.get("cka", result.views)
        model = result.provenance.get("model", {})
        paper = table2_row(model.get("id"), model.get("paper"))
        null = v.references.get("structural_cal")
        rows.append([
            label, str(v.num_states), f"{v.sequences:,}", fmt(v.deff), fmt(v.deff / v.num_states), fmt(v.gap_pct, 1, signed=True),
            fmt(deb.ratio) if deb is not None else "-", fmt(null / v.reference) if null is not None else "-",
            fmt(v.references.get("matched")), fmt(v.references.get("corr")),
            fmt(views["token-norm"].ratio) if "token-norm" in views else "-",
            fmt(views["top1pc"].ratio) if "top1pc" in views else "-",
            fmt(paper.deff, 2) if paper else "-", fmt(paper.gap_pct, 1, signed=True) if paper else "-",
            fmt(v.deff - paper.deff, 3, signed=True) if paper else "-",
        ])
    note = ("paper columns: the paper's Table 2 (" + table2_source() + ")") if any(
        table2_row(r.provenance.get("model", {}).get("id"), r.provenance.get("model", {}).get("paper")) for _, r in entries) \
        else "paper columns: '-' where the model is not one of the paper's sixteen (Table 2)"
    return render_table(header, rows) + "\n" + note
