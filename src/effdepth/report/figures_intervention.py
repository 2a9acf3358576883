"""The figure of an intervention: D_eff, F_N and the matched references against the carry lam, with the loss.

Takes an :class:`~effdepth.results.carry.InterventionResult` (read through its
attributes and ``rows()``); :func:`effdepth.studies.intervene.save_intervention` saves
it as ``DIR/intervention.{png,pdf}``.
"""

from __future__ import annotations

import numpy as np

from effdepth.report.style import OKABE_ITO, new_figure, style


def intervention_figure(ir, view: str | None = None):
    """D_eff (with its interval), F_N and the matched references against lam; loss on a second axis.

    >>> import effdepth, torch
    >>> from effdepth.results.carry import InterventionResult
    >>> rs = {lam: effdepth.from_states(torch.randn(4, 8, 8, 16)) for lam in (1.0, 0.5)}
    >>> intervention_figure(InterventionResult((1.0, 0.5), (1, 2, 3), rs)).axes[0].get_xlabel()
    'carry $\\\\lambda$'
    """
    rows = sorted(ir.rows(view), key=lambda r: r["lam"])
    lam = np.array([r["lam"] for r in rows])
    col = {k: np.array([_nan(r[k]) for r in rows]) for k in rows[0] if k not in ("view", "deff_ci", "ratio_ci")}
    with style():
        fig = new_figure(5.6, 4.0)
        ax = fig.add_subplot()
        ax.plot(
            lam,
            col["reference"],
            color=OKABE_ITO["orange"],
            linestyle="--",
            marker="^",
            markersize=4,
            label="$F_N = 2N/(N+1)$",
        )
        for key, label, colour, ls, marker in (
            ("reference_init", r"$R_\mathrm{init}$", OKABE_ITO["sky_blue"], "-.", "v"),
            ("reference_size", r"$R_\mathrm{size}$", OKABE_ITO["bluish_green"], ":", "D"),
            ("reference_matched", r"$R_\mathrm{matched}$", OKABE_ITO["vermillion"], (0, (6, 2)), "s"),
        ):
            ax.plot(lam, col[key], color=colour, linestyle=ls, marker=marker, markersize=4, label=label)
        err = _errorbars(col["deff"], [r["deff_ci"] for r in rows])
        ax.errorbar(
            lam,
            col["deff"],
            yerr=err,
            color=OKABE_ITO["blue"],
            marker="o",
            markersize=5,
            linewidth=2,
            capsize=3,
            label=r"$D_\mathrm{eff}$" + (" (bootstrap interval)" if err is not None else ""),
        )
        ax.set_xlabel(r"carry $\lambda$")
        ax.set_ylabel("effective depth (states)")
        loss_ax = ax.twinx()
        loss_ax.grid(False)
        loss_ax.spines["right"].set_visible(True)  # the house style hides right spines; a twin axis keeps its own
        loss_ax.plot(
            lam,
            col["loss"],
            color=OKABE_ITO["reddish_purple"],
            linestyle=(0, (1, 1.5)),
            marker="x",
            markersize=5,
            label="next-token loss (right)",
        )
        loss_ax.set_ylabel("next-token loss (nats)")
        handles = ax.get_legend_handles_labels()
        more = loss_ax.get_legend_handles_labels()
        fig.legend(handles[0] + more[0], handles[1] + more[1], loc="outside lower center", ncol=3, frameon=False)
        ax.set_title(_figure_title(ir), fontsize=9)
    return fig


def _figure_title(ir) -> str:
    first = ir.results[ir.carries[0]]
    model = str(first.provenance.get("model", {}).get("id", "model"))
    which = "all blocks" if ir.config.get("all_layers", True) else "blocks " + ",".join(map(str, ir.layers))
    return f"Residual carry \u2014 {model}, {which}"


def _errorbars(centre: np.ndarray, intervals: list):
    if not any(intervals):
        return None
    lo = np.array([c - i[0] if i else 0.0 for c, i in zip(centre, intervals)])
    hi = np.array([i[1] - c if i else 0.0 for c, i in zip(centre, intervals)])
    return np.clip(np.vstack([lo, hi]), 0.0, None)


def _nan(x) -> float:
    return float("nan") if x is None else float(x)
