"""The per-layer figure of a view."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from effdepth.errors import EffdepthError
from effdepth.report.figures_common import array, chosen_view, figure_title, layer_ticks, matrix, positive
from effdepth.report.style import OKABE_ITO, new_figure, style
from effdepth.results.result import Result, ViewResult


def layers_figure(result: Result | ViewResult, view: str | None = None) -> Figure:
    """Per-layer panels: update energy (log), cos(U_l, S_{l-1}) and block influence; missing values are gaps.

    >>> import effdepth, torch
    >>> fig = layers_figure(effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0)))
    >>> len(fig.axes)
    3
    """
    v, ctx = chosen_view(result, view)
    if not v.update_energy and v.update_sizes:
        return passage_layers_figure(v, ctx)
    if not v.update_energy:
        raise EffdepthError(
            f"view {v.name!r} has no per-layer update summary (an old token-mode result measured under kernel "
            "similarities alone kept none); measure again"
        )
    energy = array(v.update_energy)
    layers = np.arange(1, len(energy) + 1)
    tokens = max(1, int(v.tokens or 1))
    with style():
        fig = new_figure(5.6, 6.4)
        axes = fig.subplots(3, 1, sharex=True)
        ax = axes[0]
        _series(ax, layers, positive(energy / tokens), None, "vermillion", "o", label=r"update $\|u_l\|^2$")
        states = _state_energy(v)
        if states is not None and len(states) == len(layers) + 1:
            label = r"state entering the block $\|s_{l-1}\|^2$"
            _series(ax, layers, positive(states[:-1] / tokens), None, "blue", "s", 3.5, linestyle="--", label=label)
        ax.set_yscale("log")
        ax.set_ylabel("squared norm\n(mean per token)")
        # Above the panel: energies grow with depth and would hide under any legend inside it.
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=2, frameon=False, borderaxespad=0.2)

        ax = axes[1]
        ax.axhline(0.0, color="#888888", linewidth=0.8)
        _series(ax, layers, array(v.update_state_cosine), None, "bluish_green", "D", 3.5, linestyle="-.")
        ax.set_ylabel(r"$\cos(U_l, S_{l-1})$")

        ax = axes[2]
        influence = array((v.related or {}).get("block_influence", [None] * len(layers)))
        _series(ax, layers, influence, None, "reddish_purple", "^", linestyle=":")
        ax.set_ylabel("block influence\n" r"$1 - \overline{\cos}(s_{l-1}, s_l)$")
        ax.set_xlabel("layer $l$ (block)")
        ax.set_xticks(layer_ticks(1, len(layers)))
        ax.set_xlim(0.5, len(layers) + 0.5)
        # Pooled (Frobenius) quantities whatever the similarity (docs/method.md#update-correlation): no similarity named.
        fig.suptitle(figure_title("Per-layer updates", v, {**ctx, "similarity": None}, similarity=False), fontsize=10)
    return fig


def passage_layers_figure(v: ViewResult, ctx: dict) -> Figure:
    """Passage mode's per-layer panels: each update's covariance norm across passages (log), the update-to-state
    norm ratio and block influence, with their intervals where the result has them."""
    sizes = array(v.update_sizes)
    layers = np.arange(1, len(sizes) + 1)
    related, ci = v.related or {}, v.ci or {}
    with style():
        fig = new_figure(5.6, 6.4)
        top, middle, bottom = fig.subplots(3, 1, sharex=True)
        _series(top, layers, positive(sizes), ci.get("update_sizes"), "vermillion", "o")
        top.set_yscale("log")
        top.set_ylabel(r"update size $n_l$" "\n(covariance norm)")
        tokens = array(related.get("relative_contribution", [None] * len(layers)))
        label = "over tokens" if v.update_norm_ratio else None
        _series(middle, layers, tokens, ci.get("relative_contribution"), "bluish_green", "D", label=label)
        if len(v.update_norm_ratio) == len(layers):
            pooled, band = array(v.update_norm_ratio), ci.get("update_norm_ratio")
            _series(middle, layers, pooled, band, "blue", "s", 3.5, linestyle="--", label="pooled vectors")
            middle.set_yscale("log")
            middle.legend(frameon=False, fontsize=8)
        middle.set_ylabel(r"$\|u_l\| / \|s_{l-1}\|$" "\n(update / state norm)")
        influence = array(related.get("block_influence", [None] * len(layers)))
        _series(bottom, layers, influence, ci.get("block_influence"), "reddish_purple", "^")
        bottom.set_ylabel("block influence\n" r"$1 - \overline{\cos}(s_{l-1}, s_l)$")
        bottom.set_xlabel("layer $l$ (block)")
        bottom.set_xticks(layer_ticks(1, len(layers)))
        bottom.set_xlim(0.5, len(layers) + 0.5)
        fig.suptitle(figure_title("Per-layer updates", v, ctx), fontsize=10)
    return fig


def _series(ax, layers, values, band, colour: str, marker: str, size: float = 4, **line) -> None:
    """One line per layer, with its interval as a band when it has one of the right length."""
    if band and len(band) == 2 and len(band[0]) == len(layers):
        ax.fill_between(layers, array(band[0]), array(band[1]), color=OKABE_ITO[colour], alpha=0.2, linewidth=0)
    ax.plot(layers, values, color=OKABE_ITO[colour], marker=marker, markersize=size, **line)


def _state_energy(v: ViewResult):
    gram = (v.statistics or {}).get("gram_states")
    if not gram:
        return None
    return np.diagonal(matrix(gram)).copy()
