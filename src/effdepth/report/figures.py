"""Figures of a result, for papers and reports: PNG (150 dpi) and PDF.

Every series also differs in line style or marker, so the figures survive
colour-blindness and greyscale printing.

>>> import effdepth, torch, tempfile
>>> r = effdepth.from_states(torch.randn(7, 8, 8, 16).cumsum(0), bootstrap=20)
>>> [p.name for p in write_figures(r, tempfile.mkdtemp())][:2]
['similarity.png', 'similarity.pdf']
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from effdepth.report.content.model import interval
from effdepth.report.content.model import level as ci_level
from effdepth.report.figures_common import (
    DEFF,
    F_N,
    R_INIT,
    R_MATCHED,
    REFERENCE_STYLES,
    array,
    caption,
    chosen_view,
    figure_title,
    layer_ticks,
    matrix,
    num,
    pair,
)
from effdepth.report.figures_confounds import confounds_figure, sample_size_figure
from effdepth.report.figures_layers import layers_figure
from effdepth.report.figures_ratios import sensitivity_figure, views_figure
from effdepth.report.numbers import fmt
from effdepth.report.style import OKABE_ITO, new_figure, save_figure, style
from effdepth.report.wording import similarity_labels
from effdepth.results.result import Result, ViewResult

#: The figure files :func:`write_figures` may write; a rewrite removes those the new result does not produce.
STANDARD_STEMS = ("similarity", "profile", "attribution", "views", "layers", "sensitivity", "confounds", "sample_size")
FORMATS = ("png", "pdf")

ATTRIBUTION_TERMS = (
    ("initial_state", "initial\nstate"),
    ("size_imbalance", "size\nimbalance"),
    ("correlated_updates", "correlated\nupdates"),
)


def similarity_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Heatmap of the layer-by-layer similarity sim_ij of one view.

    >>> import effdepth, torch
    >>> fig = similarity_figure(effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0)))
    >>> fig.axes[0].get_xlabel()
    'layer j'
    """
    v, ctx = chosen_view(result, view)
    sim = matrix(v.similarity)
    first = ctx["first_layer"] if "first_layer" in ctx else _first_layer(v)
    n = sim.shape[0]
    with style():
        fig = new_figure(5.0, 4.2)
        ax = fig.add_subplot()
        im = layer_heatmap(ax, sim, first, first, xlabel="layer j", ylabel="layer i")
        bar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        bar.set_label(_similarity_label(ctx))
        ax.set_title(figure_title("Layer similarity", v, ctx))
        caption(
            fig,
            f"{DEFF} = {' '.join(filter(None, (fmt(v.deff), interval(v, 'deff'))))},   {ctx['reference']} = {fmt(v.reference)},   N = {n} states",
        )
    return fig


def layer_heatmap(ax, values, first_row: int, first_col: int, *, xlabel: str, ylabel: str):
    """A similarity matrix of layers on ``ax`` (rows from state ``first_row``, columns from ``first_col``):
    within one result, or of two results' states against each other; cells annotated when few. Returns the image.

    >>> from effdepth.report.style import new_figure
    >>> ax = new_figure(3, 3).add_subplot()
    >>> layer_heatmap(ax, [[1.0, 0.5, 0.2]], 0, 0, xlabel="B", ylabel="A").get_extent()
    [-0.5, 2.5, 0.5, -0.5]
    """
    values = matrix(values)
    rows, cols = values.shape
    extent = (first_col - 0.5, first_col + cols - 0.5, first_row + rows - 0.5, first_row - 0.5)
    image = ax.imshow(values, cmap="cividis", vmin=0.0, vmax=1.0, extent=extent, interpolation="nearest")
    ax.grid(False)
    ax.set_xticks(layer_ticks(first_col, first_col + cols - 1))
    ax.set_yticks(layer_ticks(first_row, first_row + rows - 1))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if rows <= 10 and cols <= 10:
        _annotate_cells(ax, values, first_row, first_col)
    return image


def profile_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Decay profile P(k) with its bootstrap band and the reference profiles.

    >>> import effdepth, torch
    >>> fig = profile_figure(effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0), bootstrap=20))
    >>> fig.axes[0].get_ylabel()
    'mean similarity $P(k)$'
    """
    v, ctx = chosen_view(result, view)
    profile = array(v.profile)
    k = np.arange(len(profile))
    every = max(1, len(k) // 12)
    with style():
        fig = new_figure(5.6, 4.6)
        ax = fig.add_subplot()
        values, profiles = {"fl": v.reference, **v.references}, v.reference_profiles or {}
        marks = {"markersize": 4, "markevery": every}
        for key, (label, colour, ls, marker) in REFERENCE_STYLES.items():
            if key in profiles:
                label = f"{label.replace(F_N, ctx['reference'])} ({fmt(values.get(key))})"
                ax.plot(
                    k,
                    array(profiles[key]),
                    color=colour,
                    linestyle=ls,
                    marker=marker,
                    linewidth=1.4,
                    label=label,
                    **marks,
                )
        band = (v.ci or {}).get("profile")
        if band:
            label = f"{ci_level(v)}% bootstrap band"
            ax.fill_between(
                k, array(band[0]), array(band[1]), color=OKABE_ITO["blue"], alpha=0.25, linewidth=0, label=label
            )
        label = f"measured $P(k)$: {DEFF} = {fmt(v.deff)}"
        ax.plot(k, profile, color=OKABE_ITO["blue"], marker="o", linewidth=2.0, label=label, **marks)
        ax.set_xlabel("layer distance $k$")
        ax.set_ylabel("mean similarity $P(k)$")
        ax.set_ylim(-0.02, 1.04)
        ax.set_xlim(0, max(1, len(k) - 1))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True, steps=[1, 2, 5, 10]))
        fig.legend(
            loc="outside lower center", ncol=2, frameon=False, title="effective depth in brackets", title_fontsize=7.5
        )
        ax.set_title(figure_title("Decay profile", v, ctx))
    return fig


def attribution_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Waterfall from F_N to D_eff through the three gap terms (docs/method.md#attribution).

    >>> import effdepth, torch
    >>> fig = attribution_figure(effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0)))
    >>> [t.get_text().split()[0] for t in fig.axes[0].get_xticklabels()][1:4]
    ['initial', 'size', 'correlated']
    """
    v, ctx = chosen_view(result, view)
    ci = v.ci or {}
    level = ci_level(v)
    with style():
        fig = new_figure(5.6, 3.8)
        ax = fig.add_subplot()
        ax.grid(axis="x", visible=False)
        start = num(v.reference)
        _bar(ax, 0, start, "orange", "//")
        running, top = start, start
        for i, (key, _) in enumerate(ATTRIBUTION_TERMS, start=1):
            term = num(v.attribution.get(key))
            after = running - term
            colour, hatch = ("vermillion", "\\\\") if term >= 0 else ("bluish_green", "..")
            _bar(ax, i, after - running, colour, hatch, bottom=running)
            if pair(ci.get(key)):
                lo, hi = pair(ci[key])
                whisker = [[max(0.0, hi - term)], [max(0.0, term - lo)]]
                ax.errorbar(i, after, yerr=whisker, color="#444444", capsize=3, linewidth=1)
            ax.plot([i - 1 - 0.3, i + 0.3], [running, running], color="#666666", linewidth=0.8, linestyle=":")
            _bar_label(ax, i, max(running, after), fmt(term, signed=True))
            running, top = after, max(top, running, after)
        end = num(v.deff)
        _bar(ax, 4, end, "blue", None)
        ax.plot([3 - 0.3, 4 + 0.3], [running, running], color="#666666", linewidth=0.8, linestyle=":")
        deff_ci = pair(ci.get("deff"))
        if deff_ci:
            lo, hi = deff_ci
            whisker = [[max(0.0, end - lo)], [max(0.0, hi - end)]]
            ax.errorbar(
                4, end, yerr=whisker, color="black", capsize=4, linewidth=1.2, label=f"{level}% bootstrap interval"
            )
            ax.legend(loc="lower left", frameon=True, framealpha=0.9)
        _bar_label(ax, 0, start, fmt(start))
        _bar_label(ax, 4, max(end, deff_ci[1]) if deff_ci else end, fmt(end))
        reached = {"initial_state": R_INIT, "size_imbalance": R_MATCHED, "correlated_updates": DEFF}
        ref = ctx["reference"]
        names = [ref] + [f"{label}\n\u2192 {reached[key]}" for key, label in ATTRIBUTION_TERMS] + [DEFF]
        ax.set_xticks(range(5), names)
        heights = [x for x in (top, end, *(deff_ci or ())) if math.isfinite(x)]
        ax.set_ylim(0, 1.15 * max(heights + [1.0]))
        ax.set_ylabel("effective depth (states)")
        ax.set_title(figure_title(f"Gap attribution {ref} \u2192 {DEFF}", v, ctx))
        caption(
            fig,
            f"labels: the terms of {ref} \u2212 {DEFF}; positive (hatched red) pushes {DEFF} below {ref}, "
            "negative (dotted green) above",
        )
    return fig


def write_figures(result: Result, folder, view: str | None = None) -> list[Path]:
    """Write the standard figures of ``result`` (``view``'s, default the first) into ``folder``, PNG and PDF
    each, and remove the standard figures there that this result does not produce.

    >>> import effdepth, torch, tempfile
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0))
    >>> sorted({p.stem for p in write_figures(r, tempfile.mkdtemp())})
    ['attribution', 'confounds', 'layers', 'profile', 'sample_size', 'sensitivity', 'similarity']
    """
    folder = Path(folder)
    paths = [path for stem, fig in standard_figures(result, view) for path in save_figure(fig, folder / stem)]
    remove_stale_figures(folder, keep={p.stem for p in paths})
    return paths


def remove_stale_figures(folder, keep=()) -> list[Path]:
    """Delete the standard figure files in ``folder`` whose stem is not in ``keep`` (left from an
    earlier result, they would describe views it no longer has); returns the files removed.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp()); _ = (d / "views.png").write_bytes(b""); _ = (d / "notes.png").write_bytes(b"")
    >>> [p.name for p in remove_stale_figures(d, keep={"profile"})], sorted(p.name for p in d.iterdir())
    (['views.png'], ['notes.png'])
    """
    removed = []
    for stem in STANDARD_STEMS:
        if stem in keep:
            continue
        for ext in FORMATS:
            path = Path(folder) / f"{stem}.{ext}"
            if path.is_file():
                path.unlink()
                removed.append(path)
    return removed


def standard_figures(result: Result, view: str | None = None):
    """Yield ``(stem, Figure)`` for every standard figure, one at a time (to keep memory flat)."""
    yield "similarity", similarity_figure(result, view)
    yield "profile", profile_figure(result, view)
    yield "attribution", attribution_figure(result, view)
    if len(result.views) > 1:
        yield "views", views_figure(result)
    chosen = chosen_view(result, view)[0]
    if chosen.update_energy or chosen.update_sizes:  # see NO_COSINE_SUMMARIES
        yield "layers", layers_figure(result, view)
    if result.passages and result.default.sensitivity:
        yield "sensitivity", sensitivity_figure(result)
    for stem, draw in (("confounds", confounds_figure), ("sample_size", sample_size_figure)):
        fig = draw(result)
        if fig is not None:
            yield stem, fig


def _similarity_label(ctx: dict) -> str:
    name = ctx["similarity"]
    labels = similarity_labels(name, bool(ctx.get("passages")))
    return f"similarity: {labels[1]} ({name})" if labels else f"similarity: {name}"


def _first_layer(v: ViewResult) -> int:
    # update_* have one entry per block (L); N is L, or L+1 with S_0 included.
    if v.update_energy:
        layers = len(v.update_energy)
    else:  # no update summary (see NO_COSINE_SUMMARIES): the kernel totals span S_0..S_L
        kernel = (v.statistics or {}).get("hsic") or (v.statistics or {}).get("hsic_full")
        layers = len(kernel) - 1 if kernel else v.num_states
    return 1 - (int(v.num_states) - layers)


def _annotate_cells(ax, values: np.ndarray, first_row: int, first_col: int) -> None:
    rows, cols = values.shape
    size = 7 if max(rows, cols) <= 6 else 6
    for i in range(rows):
        for j in range(cols):
            x = values[i, j]
            if math.isfinite(x):
                colour = "black" if x > 0.55 else "white"
                ax.text(first_col + j, first_row + i, f"{x:.2f}", ha="center", va="center", fontsize=size, color=colour)


def _bar(ax, x, height, colour: str, hatch, bottom: float = 0.0) -> None:
    ax.bar(x, height, bottom=bottom, width=0.6, color=OKABE_ITO[colour], hatch=hatch, edgecolor="black", linewidth=0.6)


def _bar_label(ax, x, y, text) -> None:
    if math.isfinite(y):
        ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7.5)
