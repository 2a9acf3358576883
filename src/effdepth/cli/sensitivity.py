"""``effdepth sensitivity``: D_eff under the paper's maximum lags, tapers and aggregations, from saved results."""

from __future__ import annotations

from effdepth.options.commands import SensitivityOptions
from effdepth.options.flags import add_option_arguments


def register(sub) -> dict:
    s = sub.add_parser(
        "sensitivity",
        help="D_eff under other maximum lags, tapers and aggregations (no forward pass)",
        description="For each saved result: D_eff of a view under the maximum lags 1, 5, 25 and full, the Bartlett, "
        "Parzen and Tukey-Hanning tapers, and the participation-ratio, effective-rank and threshold-count "
        "aggregations, each against the same form on orthogonal equal updates, with bootstrap intervals (passage "
        "mode; old token-mode results give the values of their saved similarity matrix). With three or more results (a "
        "sweep's folder): the Spearman correlation of the models' ordering under each form with the Bartlett one. "
        "Reads only the result files: seconds.",
    )
    add_option_arguments(s, SensitivityOptions)
    return {"sensitivity": cmd_sensitivity}


def sensitivity_text(sources, view: str = "default", similarity: str | None = None) -> str:
    """Every result's table, then the ordering table when there are three or more."""
    from effdepth.errors import EffdepthError
    from effdepth.report.content import robustness
    from effdepth.report.plain import table_text

    parts = []
    for source in sources:
        table = robustness.sensitivity_table(source.result, similarity, view)
        if table is None:
            have = ", ".join(f"{s}: {', '.join(views)}" for s, views in source.result.similarities.items())
            raise EffdepthError(
                f"{source.path} has no view {view!r} under similarity "
                f"{similarity or source.result.primary_similarity!r} (it has {have}); pass --view / "
                "--similarity accordingly"
            )
        parts.append(f"{source.label}:\n{table_text(table)}")
    ordering = robustness.ordering_table([(s.label, s.result) for s in sources], similarity, view)
    if ordering is not None:
        parts.append(f"model ordering:\n{table_text(ordering)}")
    return "\n\n".join(parts)


def cmd_sensitivity(args) -> int:
    from effdepth.report.sources import load_sources

    print(sensitivity_text(load_sources(args.results), args.view, args.similarity))
    return 0
