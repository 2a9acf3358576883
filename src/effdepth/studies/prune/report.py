"""What a report and the terminal say of a pruning boundary check, from what ``prune.json`` holds."""

from __future__ import annotations

import numpy as np

from effdepth.numerics.pruning import order_positions
from effdepth.report.content.model import Cell, Table
from effdepth.report.numbers import fmt
from effdepth.report.tables import record_model, register_saved_study

SCHEMA = "effdepth.prune/1"

ORDER_STYLE = {
    "block_influence": ("block influence (ShortGPT)", "vermillion", "o", "-"),
    "local_deff": ("local $D_\\mathrm{eff}$", "blue", "s", "--"),
}


def prune_figure(record: dict):
    """Left: perplexity against k for both orders, the unpruned model at k = 0; right: each block's position
    in one order against the other, titled with their Spearman correlation."""
    from effdepth.report.style import OKABE_ITO, new_figure, style

    with style():
        fig = new_figure(7.2, 3.6)
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1.0]})
        k = np.array([0] + list(record["skips"]))
        for name, (label, colour, marker, dash) in ORDER_STYLE.items():
            values = np.array([record["baseline"]["perplexity"]] + list(record["perplexity"][name]), dtype=np.float64)
            left.plot(k, values, color=OKABE_ITO[colour], marker=marker, linestyle=dash, markersize=4, label=label)
        left.set_yscale("log")
        left.set_xlabel("blocks skipped $k$")
        left.set_ylabel("held-out perplexity")
        left.set_xticks(k)
        left.legend(frameon=False, fontsize=8)
        orders = record["orders"]
        bi, local = order_positions(orders["block_influence"]), order_positions(orders["local_deff"])
        right.plot([1, len(bi)], [1, len(bi)], color="#888888", linewidth=0.8)
        right.scatter(bi, local, color=OKABE_ITO["bluish_green"], s=18, zorder=3)
        right.set_xlabel("position, block influence order")
        right.set_ylabel("position, local $D_\\mathrm{eff}$ order")
        right.set_title(f"Spearman {fmt(record['spearman_of_rankings'])}", fontsize=9)
        fig.suptitle(f"Pruning boundary \u2014 {record_model(record)}", fontsize=10)
    return fig


def prune_table(record: dict) -> Table:
    """Held-out perplexity per k under each skip order, and the blocks each skips."""
    base = fmt(record["baseline"]["perplexity"])
    rows = [[Cell("0"), Cell("-"), Cell(base), Cell("-"), Cell(base)]]
    for row in record["rows"]:
        rows.append(
            [
                Cell(str(row["k"])),
                Cell(",".join(map(str, row["block_influence_skipped"]))),
                Cell(fmt(row["block_influence_perplexity"])),
                Cell(",".join(map(str, row["local_deff_skipped"]))),
                Cell(fmt(row["local_deff_perplexity"])),
            ]
        )
    note = (
        f"held-out perplexity over {record['heldout'].get('num_passages')} passages "
        f"({record['baseline']['tokens']:,} predicted tokens); Spearman correlation of the two rankings: "
        f"{fmt(record['spearman_of_rankings'])}"
    )
    return Table(
        ["k", "block influence skips", "perplexity", "local D_eff skips", "perplexity"],
        rows,
        [True, False, True, False, True],
        note=note,
    )


KIND = register_saved_study(
    5,
    "prune",
    SCHEMA,
    "pruning boundary check",
    "Held-out perplexity after skipping the first k blocks of each order (log scale), and each "
    "block's position in the two orders; the line is agreement.",
    prune_table,
    prune_figure,
)
