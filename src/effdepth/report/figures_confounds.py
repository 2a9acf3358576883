"""Figures of the first-token x length confound and the sample size of a passage-mode result
(docs/method.md#the-first-token-x-length-confound, #sample-size).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from effdepth.numerics.views import CONTROLS
from effdepth.report.content.confounds import confounds
from effdepth.report.content.model import level as ci_level
from effdepth.report.figures_common import DEFF, F_L, context, figure_title, num, pair
from effdepth.report.figures_ratios import ratio_dot_figure
from effdepth.report.style import OKABE_ITO, new_figure, style
from effdepth.results.result import Result

#: Each estimator's colour and marker in the sample-size figure.
ESTIMATOR_STYLES = (
    (OKABE_ITO["blue"], "o", "-"),
    (OKABE_ITO["vermillion"], "s", "--"),
    (OKABE_ITO["bluish_green"], "D", ":"),
)


def confounds_figure(result: Result) -> Figure | None:
    """D_eff / F_L of default and each control under every similarity, with intervals (None without a confounds table).

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=20, progress=False)
    >>> [t.get_text() for t in confounds_figure(r).axes[0].get_yticklabels()][:3]
    ['default (cka)', 'drop-pos0 (cka)', 'length (cka)']
    """
    table = confounds(result)
    if table is None:
        return None
    labels, ratios, intervals = [], [], []
    for sim in (s for s in result.similarities if s in table):
        for name in ("default", *CONTROLS):
            entry = table[sim].get(name)
            if entry is not None:
                labels.append(f"{name} ({sim})")
                ratios.append(num(entry["ratio"]))
                intervals.append(pair(entry.get("ratio_ci")))
    return ratio_dot_figure(
        labels,
        ratios,
        intervals,
        xlabel=f"{DEFF} / {F_L}",
        title=figure_title("Confounds: position 0 and passage length", None, context(result), similarity=False),
        level=ci_level(result.default),
    )


def sample_size_figure(result: Result) -> Figure | None:
    """D_eff / F_L against the number of passages, one line per CKA estimator (None without a curve).

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (64, 12)), bootstrap=20, progress=False)
    >>> sample_size_figure(r).axes[0].get_xlabel()
    'passages (log scale)'
    """
    curve = (result.extras or {}).get("sample_size") if result.passages else None
    sims = [s for s in result.similarities if curve and s in curve and len(curve[s]["points"]) > 1]
    if not sims:
        return None
    reference = result.default.reference
    with style():
        fig = new_figure(5.6, 3.6)
        ax = fig.add_subplot()
        ax.axhline(1.0, color=OKABE_ITO["orange"], linestyle="--", linewidth=1.4, label=f"{F_L} (ratio 1)")
        for (colour, marker, line), sim in zip(ESTIMATOR_STYLES, sims):
            points = [p for p in curve[sim]["points"] if p["deff"] is not None]
            x = np.array([p["passages"] for p in points])
            y = np.array([p["deff"] for p in points]) / reference
            spread = np.array([_error_bar(p) for p in points]).T / reference
            ax.errorbar(x, y, yerr=spread, color=colour, marker=marker, linestyle=line, capsize=3, label=sim)
        ax.set_xscale("log", base=2)
        ticks = sorted({p["passages"] for p in curve[sims[0]]["points"]})
        ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("passages (log scale)")
        ax.set_ylabel(f"{DEFF} / {F_L}")
        ax.set_title(figure_title("Sample size", None, context(result), similarity=False))
        fig.legend(loc="outside lower center", ncol=len(sims) + 1, frameon=False)
        ax.text(
            0.01,
            0.02,
            f"bars: sd over {curve['draws']} nested draws; at N the {ci_level(result.default)}% interval",
            transform=ax.transAxes,
            fontsize=7,
            va="bottom",
        )
    return fig


def _error_bar(point: dict) -> list:
    """A curve point's bar below and above: its sd both ways, else its interval around D_eff, else none."""
    if point.get("sd") is not None:
        return [point["sd"] or 0.0] * 2
    if point.get("interval"):
        return [point["deff"] - point["interval"][0], point["interval"][1] - point["deff"]]
    return [0.0, 0.0]
