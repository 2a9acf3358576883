"""The figures a report shows, with their titles and captions."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.report.wording import ATTRIBUTION, passage_wording
from effdepth.results.result import Result

FIGURES = {
    "similarity": (
        "Layer similarity",
        "Similarity sim_ij between the analysed layers (1 = parallel, 0 = orthogonal). "
        "A wide bright band means states stay alike over many layers, i.e. a low D_eff.",
    ),
    "profile": (
        "Decay profile",
        "Mean similarity P(k) at layer distance k, with the profiles of F_N, the matched "
        "references and, when measured, the calibrated references (surrogate streams through the same "
        "similarity) overlaid; D_eff aggregates P(k) into one number.",
    ),
    "attribution": (
        "Gap attribution",
        "Waterfall from the structural reference F_N to the measured D_eff; each bar is "
        "labelled with its term, and the terms add up exactly to F_N - D_eff. "
        + ATTRIBUTION
        + " Whiskers are bootstrap intervals.",
    ),
    "views": (
        "Controls",
        "D_eff / F_N of every view (control); the dashed line at 1 is F_N. Filled dots: the whole "
        "interval lies below 1.",
    ),
    "layers": (
        "Per-layer updates",
        "Update energy and the energy of the state it is added to (log scale), the cosine "
        "between each update and the state it is added to, and ShortGPT's block influence.",
    ),
    "sensitivity": (
        "Lags, tapers, aggregations",
        "D_eff of the default view under the paper's maximum lags, tapers "
        "and aggregations, each over the same form on orthogonal equal updates (the dashed line at 1); "
        "filled dots: the whole interval lies below it.",
    ),
    "confounds": (
        "Confounds: position 0 and passage length",
        "D_eff / F_L under the paper's pooling (default), "
        "without position 0 (drop-pos0) and with each passage's token count regressed out (length), under "
        "each estimator; a control far from default means the first position or the passage length moves "
        "the number. The dashed line at 1 is F_L.",
    ),
    "sample_size": (
        "Sample size",
        "D_eff / F_L on nested random subsamples of the passages (N/8, N/4, N/2; mean and "
        "standard deviation over the draws) and on all N (with its bootstrap interval), per estimator. A "
        "curve still moving at N means more passages would move D_eff further.",
    ),
    "comparison": (
        "Comparison",
        "D_eff / F_N of each result's first view, with bootstrap intervals; the dashed line "
        "at 1 is the structural reference.",
    ),
}


@dataclass
class RenderedFigure:
    """A figure as a report embeds it: its file stem, title, caption and PNG bytes."""

    stem: str
    title: str
    caption: str
    png: bytes


def figure_text(stem: str, passages: bool = False) -> tuple:
    """``(title, caption)`` of a figure; ``passages``: of passage-mode results, whose reference is F_L.

    >>> figure_text("views", passages=True)[1].startswith("D_eff / F_L of every view")
    True
    """
    name, caption = FIGURES[stem]
    return name, passage_wording(caption) if passages else caption


def render_figures(result: Result) -> list:
    """The standard figures of ``result`` as :class:`RenderedFigure`, with titles and captions."""
    from effdepth.report.figures import standard_figures
    from effdepth.report.style import figure_png

    out = []
    for stem, fig in standard_figures(result):
        name, caption = figure_text(stem, result.passages)
        out.append(RenderedFigure(stem, name, caption, figure_png(fig)))
    return out


def comparison_png(sources: list) -> bytes:
    """The comparison figure of several results (:class:`~..sources.Source`) as PNG bytes."""
    from effdepth.report.figures_ratios import comparison_figure
    from effdepth.report.style import figure_png

    return figure_png(comparison_figure([s.result for s in sources], [s.label for s in sources]))
