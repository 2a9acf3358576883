"""Figures of ratios to a reference, one dot per row with its interval and a line at 1."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from effdepth.report.content.model import level as ci_level
from effdepth.report.figures_common import DEFF, F_L, F_N, context, figure_title, num, pair
from effdepth.report.numbers import fmt
from effdepth.report.sources import result_label
from effdepth.report.style import OKABE_ITO, new_figure, style
from effdepth.results.result import Result


def views_figure(result: Result) -> Figure:
    """D_eff / F_N of every view, with intervals; the line at 1 is F_N.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0), views="default,drop-pos0", bootstrap=20)
    >>> [t.get_text() for t in views_figure(r).axes[0].get_yticklabels()]
    ['default', 'drop-pos0']
    """
    views, ctx = list(result.views.values()), context(result)
    return ratio_dot_figure(
        list(result.views),
        [num(v.ratio) for v in views],
        [pair((v.ci or {}).get("ratio")) for v in views],
        xlabel=f"{DEFF} / {ctx['reference']}",
        title=figure_title("Controls", None, ctx),
        level=ci_level(views[0]),
    )


def sensitivity_figure(result: Result) -> Figure:
    """D_eff of the default view under every lag, taper and aggregation, over that form's own reference.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0), bootstrap=0)
    >>> len(sensitivity_figure(r).axes[0].get_yticklabels())
    9
    """
    from effdepth.report.content.robustness import label, variant_numbers

    v = result.default
    numbers, with_intervals = variant_numbers(v)
    labels, ratios, intervals = [], [], []
    for key, n in numbers.items():
        labels.append(label(key, v.num_states))
        ratios.append(n["deff"] / n["reference"])
        band = (v.ci or {}).get(f"sensitivity.{key}.deff") if with_intervals else None
        intervals.append([band[0] / n["reference"], band[1] / n["reference"]] if band else None)
    return ratio_dot_figure(
        labels,
        ratios,
        intervals,
        xlabel=f"{DEFF} / the same form on equal updates",
        title=figure_title("Lags, tapers, aggregations", v, context(result)),
        level=ci_level(v),
    )


def comparison_figure(results: list, labels: list | None = None) -> Figure:
    """D_eff / F_N (N = L, or L + 1 with the embedding) of several results, each its first view, with intervals.

    >>> import effdepth, torch
    >>> rs = [effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0)) for _ in range(2)]
    >>> len(comparison_figure(rs, ["a", "b"]).axes[0].get_yticklabels())
    2
    """
    labels = labels or [result_label(r) for r in results]
    views = [r.default for r in results]
    sims = [r.primary_similarity for r in results]
    title = "Effective depth relative to the structural reference"
    if len(set(sims)) == 1:
        title += f"\nsimilarity {sims[0]}"
    else:  # each row says its own
        labels = [f"{label} ({sim})" for label, sim in zip(labels, sims)]
    ref = F_L if all(r.passages for r in results) else F_N
    return ratio_dot_figure(
        labels,
        [num(v.ratio) for v in views],
        [pair((v.ci or {}).get("ratio")) for v in views],
        xlabel=f"{DEFF} / {ref}",
        title=title,
        level=ci_level(next((v for v in views if v.ci), views[0])),
    )


def ratio_dot_figure(labels, ratios, intervals, *, xlabel: str, title: str, level: int = 95) -> Figure:
    """A dot per row with its interval and a reference line at 1 (shared by views and comparisons).

    >>> ratio_dot_figure(["a"], [0.8], [[0.7, 0.9]], xlabel="ratio", title="t").axes[0].get_xlabel()
    'ratio'
    """
    with style():
        fig = new_figure(5.6, 1.3 + 0.38 * len(labels))
        ax = fig.add_subplot()
        dot_rows(ax, labels, ratios, intervals, level=level)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        fig.legend(loc="outside lower center", ncol=3, frameon=False)
    return fig


def dot_rows(ax, labels, values, intervals, *, reference: float = 1.0, filled=None, level: int = 95) -> None:
    """A dot per row with its interval on ``ax``, and a line at ``reference``; a dot is filled where
    ``filled(interval)`` (default: the interval lies below the reference).

    >>> from effdepth.report.style import new_figure
    >>> ax = new_figure(3, 3).add_subplot(); dot_rows(ax, ["a", "b"], [-0.1, 0.0], [[-0.2, -0.05], None], reference=0.0)
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['a', 'b']
    """
    filled = filled or (lambda ci: ci is not None and ci[1] < reference)
    rows = len(labels)
    ax.grid(axis="y", visible=False)
    y = np.arange(rows)[::-1]
    label = "reference (ratio 1)" if reference == 1.0 else f"{fmt(reference)} (no difference)"
    ax.axvline(reference, color=OKABE_ITO["orange"], linestyle="--", linewidth=1.4, label=label)
    shown_interval = False
    for yi, r, ci in zip(y, values, intervals):
        if ci is not None:
            ax.plot(
                ci,
                [yi, yi],
                color=OKABE_ITO["blue"],
                linewidth=2,
                solid_capstyle="butt",
                label=None if shown_interval else f"{level}% bootstrap interval",
            )
            shown_interval = True
        ax.plot(
            [r],
            [yi],
            marker="o",
            markersize=6,
            color=OKABE_ITO["blue"],
            markerfacecolor=OKABE_ITO["blue"] if filled(ci) else "white",
            markeredgewidth=1.4,
            linestyle="none",
        )
        if math.isfinite(r):
            ax.annotate(
                fmt(r), (r, yi), xytext=(0, 5), textcoords="offset points", ha="center", va="bottom", fontsize=7.5
            )
    if shown_interval and reference == 1.0:  # filled vs open only means something with intervals
        ax.plot([], [], marker="o", color=OKABE_ITO["blue"], linestyle="none", label="interval below 1 (filled)")
    ax.set_yticks(y, labels)
    ax.set_ylim(-0.7, rows - 0.3)
    finite = [x for x in values if math.isfinite(x)] + [x for ci in intervals if ci for x in ci]
    lo, hi = min(finite + [reference]), max(finite + [reference])
    pad = 0.08 * (hi - lo or 1.0)
    ax.set_xlim(lo - pad, hi + 2.5 * pad)
