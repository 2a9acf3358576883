"""Figures of a result, for papers and reports: PNG (150 dpi) and PDF.

Figures use the house style of :mod:`effdepth.report.style` (bare Agg
canvases, no pyplot, the Okabe-Ito palette); every series also differs in
line style or marker, so the figures survive colour-blindness and greyscale
printing.

Each figure has one small function that takes a :class:`~effdepth.Result`
(or one :class:`~effdepth.ViewResult`) and returns a Figure;
:func:`write_figures` writes the standard set next to ``result.json``.
The figures of other kinds of results live beside this module:
:mod:`.figures_suite`, :mod:`.figures_trajectory`,
:mod:`.figures_intervention` and :mod:`.figures_experiment`.

>>> import effdepth, torch, tempfile
>>> r = effdepth.from_states(torch.randn(7, 3, 8, 16).cumsum(0), bootstrap=20)
>>> [p.name for p in write_figures(r, tempfile.mkdtemp())][:2]
['similarity.png', 'similarity.pdf']
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from ..errors import EffdepthError
from ..numerics import passage_analysis
from ..numerics.metrics import NO_COSINE_SUMMARIES
from ..numerics.similarities import SIMILARITIES
from ..result import Result, ViewResult
from .numbers import fmt
from .sources import result_label
from .style import OKABE_ITO, new_figure, save_figure, style

#: How each reference profile is drawn: (label, colour, line style, marker).
REFERENCE_STYLES = {
    "fl": (r"$F_N$: orthogonal equal updates", OKABE_ITO["orange"], "--", "^"),
    "init": (r"$R_\mathrm{init}$: + initial state", OKABE_ITO["sky_blue"], "-.", "v"),
    "size": (r"$R_\mathrm{size}$: + update sizes", OKABE_ITO["bluish_green"], ":", "D"),
    "matched": (r"$R_\mathrm{matched}$: both", OKABE_ITO["vermillion"], (0, (6, 2)), "s"),
    "corr": (r"$R_\mathrm{corr}$: + measured update correlation", OKABE_ITO["yellow"], (0, (5, 1, 1, 1, 1, 1)), "*"),
    # Calibrated references: surrogate streams through the same similarity (docs/method.md#calibrated-references).
    "structural_cal": (r"$R_\mathrm{structural\,cal}$: surrogate, equal updates", OKABE_ITO["black"], (0, (1, 1)), "x"),
    "matched_cal": (r"$R_\mathrm{matched\,cal}$: surrogate, measured energies", OKABE_ITO["reddish_purple"], (0, (3, 1, 1, 1)), "P"),
}

#: The figure files :func:`write_figures` may write; a rewrite removes those the new result does not produce.
STANDARD_STEMS = ("similarity", "profile", "attribution", "views", "layers", "sensitivity")
FORMATS = ("png", "pdf")

DEFF, R_INIT, R_MATCHED = r"$D_\mathrm{eff}$", r"$R_\mathrm{init}$", r"$R_\mathrm{matched}$"
F_N, F_L = "$F_N$", "$F_L$"  # the structural reference: token mode's N states; passage mode's L block outputs

ATTRIBUTION_TERMS = (
    ("initial_state", "initial\nstate"),
    ("size_imbalance", "size\nimbalance"),
    ("correlated_updates", "correlated\nupdates"),
)

# --------------------------------------------------------------------------- figures


def similarity_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Heatmap of the layer-by-layer similarity sim_ij of one view.

    >>> import effdepth, torch
    >>> fig = similarity_figure(effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0)))
    >>> fig.axes[0].get_xlabel()
    'layer j'
    """
    v, ctx = _view(result, view)
    sim = _matrix(v.similarity)
    first = _first_layer(v)
    n = sim.shape[0]
    with style():
        fig = new_figure(5.0, 4.2)
        ax = fig.add_subplot()
        lo, hi = first - 0.5, first + n - 0.5
        im = ax.imshow(sim, cmap="cividis", vmin=0.0, vmax=1.0, extent=(lo, hi, hi, lo), interpolation="nearest")
        ax.grid(False)
        ticks = layer_ticks(first, first + n - 1)
        ax.set_xticks(ticks)
        ax.set_yticks(ticks)
        ax.set_xlabel("layer j")
        ax.set_ylabel("layer i")
        if n <= 10:
            _annotate_cells(ax, sim, first)
        bar = fig.colorbar(im, ax=ax, fraction=0.05, pad=0.03)
        bar.set_label(_similarity_label(ctx))
        ax.set_title(_title("Layer similarity", v, ctx))
        _caption(fig, f"{DEFF} = {fmt(v.deff)}{_ci_text(v, 'deff')},   {ctx['reference']} = {fmt(v.reference)},   N = {n} states")
    return fig


def profile_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Decay profile P(k) with its bootstrap band and the reference profiles.

    >>> import effdepth, torch
    >>> fig = profile_figure(effdepth.from_states(torch.randn(5, 3, 8, 16).cumsum(0), bootstrap=20))
    >>> fig.axes[0].get_ylabel()
    'mean similarity $P(k)$'
    """
    v, ctx = _view(result, view)
    profile = _array(v.profile)
    k = np.arange(len(profile))
    every = max(1, len(k) // 12)
    with style():
        fig = new_figure(5.6, 4.6)
        ax = fig.add_subplot()
        values = {"fl": v.reference, **v.references}
        for key, (label, colour, dash, marker) in REFERENCE_STYLES.items():
            if key in (v.reference_profiles or {}):
                label = label.replace(F_N, ctx["reference"])
                ax.plot(k, _array(v.reference_profiles[key]), color=colour, linestyle=dash, marker=marker,
                        markersize=4, markevery=every, linewidth=1.4, label=f"{label} ({fmt(values.get(key))})")
        band = (v.ci or {}).get("profile")
        if band:
            level = _level(v)
            ax.fill_between(k, _array(band[0]), _array(band[1]), color=OKABE_ITO["blue"], alpha=0.25, linewidth=0,
                            label=f"{level}% bootstrap band")
        ax.plot(k, profile, color=OKABE_ITO["blue"], marker="o", markersize=4, markevery=every, linewidth=2.0,
                label=f"measured $P(k)$: {DEFF} = {fmt(v.deff)}")
        ax.set_xlabel("layer distance $k$")
        ax.set_ylabel("mean similarity $P(k)$")
        ax.set_ylim(-0.02, 1.04)
        ax.set_xlim(0, max(1, len(k) - 1))
        ax.xaxis.set_major_locator(MaxNLocator(nbins=10, integer=True, steps=[1, 2, 5, 10]))
        fig.legend(loc="outside lower center", ncol=2, frameon=False, title="effective depth in brackets", title_fontsize=7.5)
        ax.set_title(_title("Decay profile", v, ctx))
    return fig


def attribution_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Waterfall from F_N down (or up) to D_eff through the three gap terms.

    Each bar is labelled with its term in the one convention of the tables
    (docs/method.md#attribution): F_N - R_init, R_init - R_matched,
    R_matched - D_eff, positive when it pushes D_eff below F_N (the bar goes
    down). The terms add up exactly to F_N - D_eff; the running totals after
    the first two are R_init and R_matched.

    >>> import effdepth, torch
    >>> fig = attribution_figure(effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0)))
    >>> [t.get_text().split()[0] for t in fig.axes[0].get_xticklabels()][1:4]
    ['initial', 'size', 'correlated']
    """
    v, ctx = _view(result, view)
    ci = v.ci or {}
    level = _level(v)
    with style():
        fig = new_figure(5.6, 3.8)
        ax = fig.add_subplot()
        ax.grid(axis="x", visible=False)
        start = _num(v.reference)
        _end_bar(ax, 0, start, OKABE_ITO["orange"], "//")
        running, top = start, start
        for i, (key, _) in enumerate(ATTRIBUTION_TERMS, start=1):
            term = _num(v.attribution.get(key))
            after = running - term
            lower = term >= 0
            ax.bar(i, after - running, bottom=running, width=0.6, color=OKABE_ITO["vermillion" if lower else "bluish_green"],
                   hatch="\\\\" if lower else "..", edgecolor="black", linewidth=0.6)
            if _pair(ci.get(key)):
                lo, hi = _pair(ci[key])
                ax.errorbar(i, after, yerr=[[max(0.0, hi - term)], [max(0.0, term - lo)]], color="#444444", capsize=3, linewidth=1)
            ax.plot([i - 1 - 0.3, i + 0.3], [running, running], color="#666666", linewidth=0.8, linestyle=":")
            _bar_label(ax, i, max(running, after), fmt(term, signed=True))
            running, top = after, max(top, running, after)
        end = _num(v.deff)
        _end_bar(ax, 4, end, OKABE_ITO["blue"], None)
        ax.plot([3 - 0.3, 4 + 0.3], [running, running], color="#666666", linewidth=0.8, linestyle=":")
        deff_ci = _pair(ci.get("deff"))
        if deff_ci:
            lo, hi = deff_ci
            ax.errorbar(4, end, yerr=[[max(0.0, end - lo)], [max(0.0, hi - end)]], color="black", capsize=4, linewidth=1.2,
                        label=f"{level}% bootstrap interval")
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
        ax.set_title(_title(f"Gap attribution {ref} \u2192 {DEFF}", v, ctx))
        _caption(fig, f"labels: the terms of {ref} \u2212 {DEFF}; positive (hatched red) pushes {DEFF} below {ref}, "
                      "negative (dotted green) above")
    return fig


def views_figure(result: Result) -> Figure:
    """D_eff / F_N of every view, with intervals; the line at 1 is F_N.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 3, 8, 16).cumsum(0), views="default,center", bootstrap=20)
    >>> [t.get_text() for t in views_figure(r).axes[0].get_yticklabels()]
    ['default', 'center']
    """
    labels, ratios, intervals = [], [], []
    for name, v in result.views.items():
        labels.append(name)
        ratios.append(_num(v.ratio))
        intervals.append(_pair((v.ci or {}).get("ratio")))
    ctx = _context(result)
    return ratio_dot_figure(labels, ratios, intervals, xlabel=f"{DEFF} / {ctx['reference']}", title=_title("Controls", None, ctx),
                            level=_level(next(iter(result.views.values()))))


def sensitivity_figure(result: Result) -> Figure:
    """D_eff of the default view under every lag, taper and aggregation, over that form's own reference.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 3, 8, 16).cumsum(0), bootstrap=0)
    >>> len(sensitivity_figure(r).axes[0].get_yticklabels())
    9
    """
    from .robustness import label, variant_numbers

    v = result.default
    numbers, with_intervals = variant_numbers(v)
    labels, ratios, intervals = [], [], []
    for key, n in numbers.items():
        labels.append(label(key, v.num_states))
        ratios.append(n["deff"] / n["reference"])
        band = (v.ci or {}).get(f"sensitivity.{key}.deff") if with_intervals else None
        intervals.append([band[0] / n["reference"], band[1] / n["reference"]] if band else None)
    ctx = _context(result)
    return ratio_dot_figure(labels, ratios, intervals, xlabel=f"{DEFF} / the same form on equal updates",
                            title=_title("Lags, tapers, aggregations", v, ctx), level=_level(v))


def comparison_figure(results: list, labels: list | None = None) -> Figure:
    """D_eff / F_N (N = L, or L + 1 with the embedding) of several results, each its first view, with intervals.

    >>> import effdepth, torch
    >>> rs = [effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0)) for _ in range(2)]
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
    return ratio_dot_figure(labels, [_num(v.ratio) for v in views], [_pair((v.ci or {}).get("ratio")) for v in views],
                            xlabel=f"{DEFF} / {ref}", title=title, level=_level(next((v for v in views if v.ci), views[0])))


def layers_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Per-layer panels: update energy (log), cos(U_l, S_{l-1}) and block influence.

    Missing values (``None``/non-finite in the JSON) are drawn as gaps.

    >>> import effdepth, torch
    >>> fig = layers_figure(effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0)))
    >>> len(fig.axes)
    3
    """
    v, ctx = _view(result, view)
    if not v.update_energy and v.update_sizes:
        return passage_layers_figure(v, ctx)
    if not v.update_energy:
        raise EffdepthError(f"view {v.name!r} has no per-layer update summary: {NO_COSINE_SUMMARIES}")
    energy = _array(v.update_energy)
    layers = np.arange(1, len(energy) + 1)
    tokens = max(1, int(v.tokens or 1))
    with style():
        fig = new_figure(5.6, 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        ax = axes[0]
        ax.plot(layers, _positive(energy / tokens), color=OKABE_ITO["vermillion"], marker="o", markersize=4,
                label=r"update $\|u_l\|^2$")
        states = _state_energy(v)
        if states is not None and len(states) == len(layers) + 1:
            ax.plot(layers, _positive(states[:-1] / tokens), color=OKABE_ITO["blue"], linestyle="--", marker="s", markersize=3.5,
                    label=r"state entering the block $\|s_{l-1}\|^2$")
        ax.set_yscale("log")
        ax.set_ylabel("squared norm\n(mean per token)")
        # Above the panel: energies grow with depth and would hide under any legend inside it.
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False, borderaxespad=0.2)

        ax = axes[1]
        ax.axhline(0.0, color="#888888", linewidth=0.8)
        ax.plot(layers, _array(v.update_state_cosine), color=OKABE_ITO["bluish_green"], linestyle="-.", marker="D", markersize=3.5)
        ax.set_ylabel(r"$\cos(U_l, S_{l-1})$")

        ax = axes[2]
        influence = _array((v.related or {}).get("block_influence", [None] * len(layers)))
        ax.plot(layers, influence, color=OKABE_ITO["reddish_purple"], linestyle=":", marker="^", markersize=4)
        ax.set_ylabel("block influence\n" r"$1 - \overline{\cos}(s_{l-1}, s_l)$")
        ax.set_xlabel("layer $l$ (block)")
        ax.set_xticks(layer_ticks(1, len(layers)))
        ax.set_xlim(0.5, len(layers) + 0.5)
        # Pooled (Frobenius) quantities whatever the similarity (docs/method.md#update-correlation): no similarity named.
        fig.suptitle(_title("Per-layer updates", v, {**ctx, "similarity": None}, similarity=False), fontsize=10)
    return fig


def passage_layers_figure(v: ViewResult, ctx: dict) -> Figure:
    """Passage mode's per-layer panels: each update's covariance norm across passages (log), the update-to-state
    norm ratio (of the pooled vectors, and over tokens) and block influence, with their intervals where the
    result has them."""
    sizes = _array(v.update_sizes)
    layers = np.arange(1, len(sizes) + 1)
    related = v.related or {}
    ci = (v.ci or {})
    panels = [
        (sizes, ci.get("update_sizes"), r"update size $n_l$" "\n(covariance norm)", OKABE_ITO["vermillion"], "o", True),
        (_array(related.get("relative_contribution", [None] * len(layers))), ci.get("relative_contribution"),
         r"$\|u_l\| / \|s_{l-1}\|$" "\n(update / state norm)", OKABE_ITO["bluish_green"], "D", False),
        (_array(related.get("block_influence", [None] * len(layers))), ci.get("block_influence"),
         "block influence\n" r"$1 - \overline{\cos}(s_{l-1}, s_l)$", OKABE_ITO["reddish_purple"], "^", False),
    ]
    with style():
        fig = new_figure(5.6, 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        for ax, (values, band, label, colour, marker, log) in zip(axes, panels):
            if band and len(band) == 2 and len(band[0]) == len(layers):
                ax.fill_between(layers, _array(band[0]), _array(band[1]), color=colour, alpha=0.2, linewidth=0)
            ax.plot(layers, _positive(values) if log else values, color=colour, marker=marker, markersize=4,
                    label="over tokens" if marker == "D" and v.update_norm_ratio else None)
            if marker == "D" and len(v.update_norm_ratio) == len(layers):
                pooled_band = ci.get("update_norm_ratio")
                if pooled_band and len(pooled_band) == 2:
                    ax.fill_between(layers, _array(pooled_band[0]), _array(pooled_band[1]), color=OKABE_ITO["blue"],
                                    alpha=0.2, linewidth=0)
                ax.plot(layers, _array(v.update_norm_ratio), color=OKABE_ITO["blue"], linestyle="--", marker="s",
                        markersize=3.5, label="pooled vectors")
                ax.set_yscale("log")
                ax.legend(frameon=False, fontsize=8)
            if log:
                ax.set_yscale("log")
            ax.set_ylabel(label)
        axes[-1].set_xlabel("layer $l$ (block)")
        axes[-1].set_xticks(layer_ticks(1, len(layers)))
        axes[-1].set_xlim(0.5, len(layers) + 0.5)
        fig.suptitle(_title("Per-layer updates", v, ctx), fontsize=10)
    return fig


def layer_ticks(first: int, last: int, most: int = 10) -> list[int]:
    """Tick positions for a layer axis: the first layer, then round multiples.

    >>> layer_ticks(1, 30)
    [1, 5, 10, 15, 20, 25, 30]
    >>> layer_ticks(0, 3)
    [0, 1, 2, 3]
    """
    span = max(1, last - first)
    step = next(s for s in (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 10**9) if span / s <= most)
    ticks = [first] + [t for t in range(step * (first // step + 1), last + 1, step) if t - first >= step / 2]
    return ticks


def ratio_dot_figure(labels, ratios, intervals, *, xlabel: str, title: str, level: int = 95) -> Figure:
    """A dot per row with its interval and a reference line at 1 (shared by views and comparisons).

    >>> ratio_dot_figure(["a"], [0.8], [[0.7, 0.9]], xlabel="ratio", title="t").axes[0].get_xlabel()
    'ratio'
    """
    rows = len(labels)
    with style():
        fig = new_figure(5.6, 1.3 + 0.38 * rows)
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        y = np.arange(rows)[::-1]
        ax.axvline(1.0, color=OKABE_ITO["orange"], linestyle="--", linewidth=1.4, label="reference (ratio 1)")
        shown_interval = False
        for yi, r, ci in zip(y, ratios, intervals):
            below = ci is not None and ci[1] < 1.0
            if ci is not None:
                ax.plot(ci, [yi, yi], color=OKABE_ITO["blue"], linewidth=2, solid_capstyle="butt",
                        label=None if shown_interval else f"{level}% bootstrap interval")
                shown_interval = True
            ax.plot([r], [yi], marker="o", markersize=6, color=OKABE_ITO["blue"],
                    markerfacecolor=OKABE_ITO["blue"] if below else "white", markeredgewidth=1.4, linestyle="none")
            if math.isfinite(r):
                ax.annotate(fmt(r), (r, yi), xytext=(0, 5), textcoords="offset points", ha="center", va="bottom", fontsize=7.5)
        if shown_interval:  # filled vs open only means something with intervals
            ax.plot([], [], marker="o", color=OKABE_ITO["blue"], linestyle="none", label="interval below 1 (filled)")
        ax.set_yticks(y, labels)
        ax.set_ylim(-0.7, rows - 0.3)
        finite = [x for x in ratios if math.isfinite(x)] + [x for ci in intervals if ci for x in ci]
        lo, hi = min(finite + [1.0]), max(finite + [1.0])
        pad = 0.08 * (hi - lo or 1.0)
        ax.set_xlim(lo - pad, hi + 2.5 * pad)
        ax.set_xlabel(xlabel)
        ax.set_title(title)
        fig.legend(loc="outside lower center", ncol=3, frameon=False)
    return fig


# --------------------------------------------------------------------------- writing


def write_figures(result: Result, folder, view: str | None = None) -> list[Path]:
    """Write the standard figures of ``result`` into ``folder`` (PNG and PDF each).

    ``view`` picks the view of the per-view figures (default: the first);
    ``views.*`` is written only when the result has more than one view.
    Standard figures already in ``folder`` that this result does not produce
    (``views.*`` of an earlier many-view result) are removed.

    >>> import effdepth, torch, tempfile
    >>> r = effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0))
    >>> sorted({p.stem for p in write_figures(r, tempfile.mkdtemp())})
    ['attribution', 'layers', 'profile', 'similarity']
    """
    folder = Path(folder)
    paths = []
    for stem, fig in standard_figures(result, view):
        paths += save_figure(fig, folder / stem)
    remove_stale_figures(folder, keep={p.stem for p in paths})
    return paths


def remove_stale_figures(folder, keep=()) -> list[Path]:
    """Delete the standard figure files in ``folder`` (:data:`STANDARD_STEMS`, PNG and PDF) whose
    stem is not in ``keep``: left from an earlier result in the same folder, they would describe
    views it no longer has. Returns the files removed.

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
    chosen = _view(result, view)[0]
    if chosen.update_energy or chosen.update_sizes:  # see NO_COSINE_SUMMARIES
        yield "layers", layers_figure(result, view)
    if result.passages and result.default.sensitivity:
        yield "sensitivity", sensitivity_figure(result)


# --------------------------------------------------------------------------- helpers


def _view(result, view: str | None) -> tuple[ViewResult, dict]:
    if isinstance(result, ViewResult):  # a bare view does not say its mode: the general symbol
        return result, {"similarity": result.definition, "reference": F_N}
    if view is None:
        return result.default, _context(result)
    if view not in result.views:
        raise EffdepthError(f"no view {view!r} in this result; it has: {', '.join(result.views)}")
    return result.views[view], _context(result)


def _context(result: Result) -> dict:
    # Passage mode's N states are the L block outputs; the paper names their reference F_L.
    return {"label": result_label(result), "similarity": result.primary_similarity, "multi": len(result.views) > 1,
            "passages": result.passages, "reference": F_L if result.passages else F_N}


def _title(what: str, v: ViewResult | None, ctx: dict, similarity: bool = True) -> str:
    # What the figure shows, then on its own (wrapped) line whose it is: model ids can be long.
    whose = [ctx["label"]] if ctx.get("label") else []
    if v is not None and (ctx.get("multi") or v.name != "default"):
        whose.append(f"view {v.name}")
    name = (v.definition if v is not None else ctx.get("similarity")) if similarity else None
    if name:
        whose.append(f"similarity {name}")
    return "\n".join([what, *textwrap.wrap(" \u00b7 ".join(whose), 72)])


def _caption(fig: Figure, text: str) -> None:
    fig.supxlabel(text, fontsize=7.5, color="#444444")


def _similarity_label(ctx: dict) -> str:
    name = ctx["similarity"]
    spec = (passage_analysis.SIMILARITIES if ctx.get("passages") else SIMILARITIES).get(name)
    return f"similarity: {spec.axis_label} ({name})" if spec else f"similarity: {name}"


def _first_layer(v: ViewResult) -> int:
    # update_* have one entry per block (L); N is L, or L+1 with S_0 included.
    if v.update_energy:
        layers = len(v.update_energy)
    else:  # no update summary (see NO_COSINE_SUMMARIES): the kernel totals span S_0..S_L
        kernel = (v.statistics or {}).get("hsic") or (v.statistics or {}).get("hsic_full")
        layers = len(kernel) - 1 if kernel else v.num_states
    return 1 - (int(v.num_states) - layers)


def _annotate_cells(ax, sim: np.ndarray, first: int) -> None:
    n = sim.shape[0]
    for i in range(n):
        for j in range(n):
            x = sim[i, j]
            if math.isfinite(x):
                ax.text(first + j, first + i, f"{x:.2f}", ha="center", va="center", fontsize=7 if n <= 6 else 6,
                        color="black" if x > 0.55 else "white")


def _end_bar(ax, x, height, colour, hatch) -> None:
    ax.bar(x, height, width=0.6, color=colour, hatch=hatch, edgecolor="black", linewidth=0.6)


def _bar_label(ax, x, y, text) -> None:
    if math.isfinite(y):
        ax.annotate(text, (x, y), xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=7.5)


def _state_energy(v: ViewResult):
    gram = (v.statistics or {}).get("gram_states")
    if not gram:
        return None
    return np.diagonal(_matrix(gram)).copy()


def _level(v: ViewResult) -> int:
    level = (v.ci or {}).get("level") or 0.95
    return int(round(100 * level))


def _ci_text(v: ViewResult, key: str) -> str:
    ci = (v.ci or {}).get(key)
    return f" [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else ""


def _pair(ci):
    """``(lo, hi)`` as floats, or None when absent or not finite (saved as null)."""
    if not ci or any(x is None or not math.isfinite(float(x)) for x in ci):
        return None
    return float(ci[0]), float(ci[1])


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def _array(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in (xs or [])], dtype=np.float64)


def _matrix(rows) -> np.ndarray:
    return np.array([[np.nan if x is None else x for x in row] for row in rows], dtype=np.float64)


def _positive(a: np.ndarray) -> np.ndarray:
    # A log axis cannot show 0; a gap says "nothing here" more honestly than a clipped floor.
    return np.where(a > 0, a, np.nan)

