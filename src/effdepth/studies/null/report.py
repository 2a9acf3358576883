"""What a report and the terminal say of a random-weight null, from what ``null.json`` holds."""

from __future__ import annotations

import numpy as np

from effdepth.report.content.model import Cell, Table
from effdepth.report.numbers import fmt
from effdepth.report.tables import record_model, register_saved_study

SCHEMA = "effdepth.null/1"


def null_figure(record: dict):
    """One row per similarity: every seed's D_eff/L (open dots), their mean, and the trained model's (filled)."""
    from effdepth.report.style import OKABE_ITO, new_figure, style

    summary = record["summary"]
    with style():
        fig = new_figure(5.6, 1.4 + 0.5 * len(summary))
        ax = fig.add_subplot()
        ax.grid(axis="y", visible=False)
        for y, s in enumerate(reversed(list(summary.values()))):
            seeds = np.asarray(s.get("null_deff_per_layer") or [], dtype=np.float64)
            # Each seed (open), their mean (bar), the trained model (filled); labelled once.
            for xs, colour, marker, size, face, label in (
                (seeds, "orange", "o", 5, "white", "random initialisation (each seed)"),
                ([s["null_deff_per_layer_mean"]], "orange", "|", 14, None, "their mean"),
                ([s["trained_deff_per_layer"]], "blue", "o", 7, None, "trained"),
            ):
                kw = {"marker": marker, "markersize": size, "markerfacecolor": face, "color": OKABE_ITO[colour]}
                ax.plot(xs, np.full(len(xs), y), linestyle="none", label=label if y == 0 else None, **kw)
        ax.set_yticks(range(len(summary)), list(reversed(list(summary))))
        ax.set_ylim(-0.7, len(summary) - 0.3)
        ax.set_xlabel("$D_\\mathrm{eff}$ / L (default view)")
        ax.set_title(f"Random-weight null \u2014 {record_model(record)}", fontsize=9)
        fig.legend(loc="outside lower center", ncol=3, frameon=False)
    return fig


def null_table(record: dict) -> Table:
    """The trained model's D_eff/L and D_eff/F_L against its random-weight null, one row per similarity."""
    rows = []
    for sim, s in record["summary"].items():
        rows.append(
            [
                Cell(sim),
                Cell(fmt(s["trained_deff_per_layer"])),
                Cell(f"{fmt(s['null_deff_per_layer_mean'])} ± {fmt(s['null_deff_per_layer_sd'])}"),
                Cell(fmt(s["trained_ratio"])),
                Cell(f"{fmt(s['null_ratio_mean'])} ± {fmt(s['null_ratio_sd'])}"),
            ]
        )
    seeds = record["seeds"]
    note = (
        f"random init: mean ± sample sd over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}), the same "
        f"architecture (config sha256 {record['config_sha256'][:12]}) and options; default view"
    )
    return Table(
        ["similarity", "trained D_eff/L", "random init D_eff/L", "trained D_eff/F_L", "random init D_eff/F_L"],
        rows,
        [False, True, True, True, True],
        note=note,
    )


KIND = register_saved_study(
    4,
    "null",
    SCHEMA,
    "random-weight null",
    "D_eff/L of the default view: each random initialisation (open), their mean (bar) and the trained "
    "model (filled), per similarity.",
    null_table,
    null_figure,
)
