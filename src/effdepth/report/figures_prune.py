"""The figure of a pruning boundary check: held-out perplexity after skipping k blocks in each order, and
where each block falls in the two orders.

Takes what ``prune.json`` holds (:meth:`effdepth.studies.prune.PruneResult.record`); ``effdepth prune-check`` saves
it as ``DIR/prune.{png,pdf}``, and reports draw it again from the saved file.
"""

from __future__ import annotations

import numpy as np

from effdepth.numerics.pruning import order_positions
from effdepth.report.numbers import fmt
from effdepth.report.style import OKABE_ITO, new_figure, style

ORDER_STYLE = {
    "block_influence": ("block influence (ShortGPT)", OKABE_ITO["vermillion"], "o", "-"),
    "local_deff": ("local $D_\\mathrm{eff}$", OKABE_ITO["blue"], "s", "--"),
}


def prune_figure(record: dict):
    """Left: perplexity against k for both orders, the unpruned model at k = 0; right: each block's position
    in one order against the other, titled with their Spearman correlation."""
    with style():
        fig = new_figure(7.2, 3.6)
        left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.4, 1.0]})
        k = np.array([0] + list(record["skips"]))
        for name, (label, colour, marker, dash) in ORDER_STYLE.items():
            values = np.array([record["baseline"]["perplexity"]] + list(record["perplexity"][name]), dtype=np.float64)
            left.plot(k, values, color=colour, marker=marker, linestyle=dash, markersize=4, label=label)
        left.set_yscale("log")
        left.set_xlabel("blocks skipped $k$")
        left.set_ylabel("held-out perplexity")
        left.set_xticks(k)
        left.legend(frameon=False, fontsize=8)
        bi, local = (
            order_positions(record["orders"]["block_influence"]),
            order_positions(record["orders"]["local_deff"]),
        )
        right.plot([1, len(bi)], [1, len(bi)], color="#888888", linewidth=0.8)
        right.scatter(bi, local, color=OKABE_ITO["bluish_green"], s=18, zorder=3)
        right.set_xlabel("position, block influence order")
        right.set_ylabel("position, local $D_\\mathrm{eff}$ order")
        right.set_title(f"Spearman {fmt(record['spearman_of_rankings'])}", fontsize=9)
        model = str((record.get("model") or {}).get("id", "model"))
        fig.suptitle(f"Pruning boundary \u2014 {model}", fontsize=10)
    return fig
