"""The figure of a random-weight null: the trained model's D_eff/L beside each random initialisation's.

Takes what ``null.json`` holds (:meth:`effdepth.studies.null.NullResult.record`); ``effdepth null`` saves it as
``DIR/null.{png,pdf}``, and reports draw it again from the saved file.
"""

from __future__ import annotations

import numpy as np

from effdepth.report.style import OKABE_ITO, new_figure, style


def null_figure(record: dict):
    """One row per similarity: every seed's D_eff/L (open dots), their mean, and the trained model's (filled)."""
    summary = record["summary"]
    with style():
        fig = new_figure(5.6, 1.4 + 0.5 * len(summary))
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        for y, s in enumerate(reversed(list(summary.values()))):
            seeds = np.asarray(s.get("null_deff_per_layer") or [], dtype=np.float64)
            ax.plot(
                seeds,
                np.full(len(seeds), y),
                marker="o",
                markersize=5,
                linestyle="none",
                markerfacecolor="white",
                color=OKABE_ITO["orange"],
                label="random initialisation (each seed)" if y == 0 else None,
            )
            ax.plot(
                [s["null_deff_per_layer_mean"]],
                [y],
                marker="|",
                markersize=14,
                color=OKABE_ITO["orange"],
                label="their mean" if y == 0 else None,
            )
            ax.plot(
                [s["trained_deff_per_layer"]],
                [y],
                marker="o",
                markersize=7,
                linestyle="none",
                color=OKABE_ITO["blue"],
                label="trained" if y == 0 else None,
            )
        ax.set_yticks(range(len(summary)), list(reversed(list(summary))))
        ax.set_ylim(-0.7, len(summary) - 0.3)
        ax.set_xlabel("$D_\\mathrm{eff}$ / L (default view)")
        model = str((record.get("model") or {}).get("id", "model"))
        ax.set_title(f"Random-weight null \u2014 {model}", fontsize=9)
        fig.legend(loc="outside lower center", ncol=3, frameon=False)
    return fig
