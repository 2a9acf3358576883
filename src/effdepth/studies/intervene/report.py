"""What a report and the terminal say of an intervention, and the carry figure it shares with the
carry experiment.

>>> import effdepth, torch
>>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
>>> intervention_table(ir).split()[:3]
['lam', 'D_eff', 'CI']
"""

from __future__ import annotations

import numpy as np

from effdepth.report.content.model import Cell, Section, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.report.plain import table_text
from effdepth.results.loading import StudyKind, register
from effdepth.studies.intervene.hooks import format_carry
from effdepth.studies.intervene.result import SCHEMA, InterventionResult

COLUMNS = (
    "lam",
    "D_eff",
    "CI",
    "F_L",
    "ratio",
    "R_init",
    "R_size",
    "R_matched",
    "D_eff - carry 1",
    "paired CI",
    "loss",
    "perplexity",
)
#: The references a carry panel draws, when its rows have them: (key, label, colour, line style, marker).
REFERENCES = (
    ("reference", "$F_L$", "orange", "--", "^"),
    ("reference_init", r"$R_\mathrm{init}$", "sky_blue", "-.", "v"),
    ("reference_size", r"$R_\mathrm{size}$", "bluish_green", ":", "D"),
    ("reference_matched", r"$R_\mathrm{matched}$", "vermillion", (0, (6, 2)), "s"),
)


def carry_panel(ax, rows: list, loss: str) -> tuple:
    """D_eff, the references and the loss (right axis, labelled ``loss``) against lam on ``ax``, ``rows``
    one dict per lam; returns the legend's handles and labels, both axes'."""
    from effdepth.report.style import OKABE_ITO

    rows = sorted(rows, key=lambda r: r["lam"])
    lam = [r["lam"] for r in rows]
    for key, label, colour, ls, marker in (ref for ref in REFERENCES if ref[0] in rows[0]):
        ax.plot(
            lam, _column(rows, key), color=OKABE_ITO[colour], linestyle=ls, marker=marker, markersize=4, label=label
        )
    centre = _column(rows, "deff")
    intervals = [r["deff_ci"] for r in rows]
    err = None
    if any(intervals):
        lo = [c - i[0] if i else 0.0 for c, i in zip(centre, intervals)]
        hi = [i[1] - c if i else 0.0 for c, i in zip(centre, intervals)]
        err = np.clip(np.vstack([lo, hi]), 0.0, None)
    label = r"$D_\mathrm{eff}$" + (" (interval)" if err is not None else "")
    ax.errorbar(
        lam, centre, yerr=err, color=OKABE_ITO["blue"], marker="o", markersize=5, linewidth=2, capsize=3, label=label
    )
    ax.set_xlabel(r"carry $\lambda$")
    ax.set_ylabel("effective depth (states)")
    twin = ax.twinx()
    twin.grid(False)
    twin.spines["right"].set_visible(True)  # the house style hides right spines; a twin axis keeps its own
    twin.plot(
        lam,
        _column(rows, "loss"),
        color=OKABE_ITO["reddish_purple"],
        linestyle=(0, (1, 1.5)),
        marker="x",
        markersize=5,
        label=f"{loss} (right)",
    )
    twin.set_ylabel(f"{loss} (nats)")
    (h1, l1), (h2, l2) = ax.get_legend_handles_labels(), twin.get_legend_handles_labels()
    return h1 + h2, l1 + l2


def _column(rows: list, key: str) -> np.ndarray:
    return np.array([np.nan if r.get(key) is None else float(r[key]) for r in rows])


def intervention_figure(ir: InterventionResult, view: str | None = None):
    """D_eff (with its interval), F_L and the matched references against lam; loss on a second axis.

    >>> import effdepth, torch
    >>> rs = {lam: effdepth.from_states(torch.randn(4, 8, 8, 16)) for lam in (1.0, 0.5)}
    >>> intervention_figure(InterventionResult((1.0, 0.5), (1, 2, 3), rs)).axes[0].get_xlabel()
    'carry $\\\\lambda$'
    """
    from effdepth.report.style import new_figure, style

    with style():
        fig = new_figure(5.6, 4.0)
        ax = fig.add_subplot()
        handles, labels = carry_panel(ax, ir.rows(view), "next-token loss")
        fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False)
        which = "all blocks" if ir.config.get("all_layers", True) else "blocks " + ",".join(map(str, ir.layers))
        ax.set_title(f"Residual carry \u2014 {subject(ir)}, {which}", fontsize=9)
    return fig


def intervention_content(ir: InterventionResult, view: str | None = None) -> Table:
    """D_eff with its interval, F_L, ratio, references and loss per carry value (the first view unless
    ``view`` is given)."""
    keys = (
        "deff",
        "deff_ci",
        "reference",
        "ratio",
        "reference_init",
        "reference_size",
        "reference_matched",
        "deff_vs_1",
        "deff_vs_1_ci",
    )
    rows = [
        [Cell(format_carry(r["lam"]))]
        + [Cell(fmt_interval(r[k]) if k.endswith("_ci") else fmt(r[k])) for k in keys]
        + [Cell(fmt(r["loss"], 4)), Cell(fmt(r["perplexity"], 2))]
        for r in ir.rows(view)
    ]
    return Table(list(COLUMNS), rows, [False] + [True] * (len(COLUMNS) - 1))


def intervention_table(ir: InterventionResult, view: str | None = None) -> str:
    """:func:`intervention_content` as terminal text."""
    return table_text(intervention_content(ir, view))


def intervention_sections(ir: InterventionResult) -> list:
    """One section per view: its table against the carry."""
    return [Section(f"view {name}", intervention_content(ir, name)) for name in ir.results[ir.carries[0]].views]


def intervention_headline(ir: InterventionResult) -> str:
    """One line about an intervention: model, the blocks carried, corpus size, similarity, view and N.

    >>> import effdepth, torch
    >>> ir = InterventionResult((1.0,), (1, 2), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
    >>> intervention_headline(ir).split(";")[1].split(")")[0]
    ' carry on blocks 1,2'
    """
    first = ir.results[ir.carries[0]]
    c, v = first.config, first.default
    which = "all" if ir.config.get("all_layers") else ",".join(map(str, ir.layers))
    sublayers = ", in every attention and MLP sublayer" if ir.config.get("carry_on") == "sublayers" else ""
    if first.passages:
        size = f"{v.sequences} passages of at most {c.get('seq_len')} tokens (mean {c.get('mean_passage_tokens')}), "
    else:
        size = f"{v.sequences} sequences x {c.get('seq_len')} tokens, "
    return (
        f"residual-carry intervention on {subject(ir)} ({c.get('num_layers')} layers; carry on blocks {which}"
        f"{sublayers}), {size}similarity {c.get('similarity')}, view {v.name}, N = {v.num_states}"
    )


def subject(ir: InterventionResult) -> str:
    return str(ir.results[ir.carries[0]].provenance.get("model", {}).get("id", "model"))


KIND = register(
    StudyKind(
        1,
        "intervention",
        SCHEMA,
        InterventionResult,
        lambda data, path: InterventionResult.from_dict(data),
        "residual-carry intervention",
        "D_eff (95% CI), F_L and the matched references against the carry lam of the first view; the held-out "
        "loss on the right axis.",
        subject,
        intervention_sections,
        intervention_figure,
        intervention_headline,
    )
)
