"""The commands that read saved results: ``effdepth report`` (HTML or Markdown), ``effdepth claims`` (does a
model reproduce the paper? docs/method.md#claims) and ``effdepth sensitivity`` (D_eff under the paper's maximum
lags, tapers and aggregations).
"""

from __future__ import annotations

from effdepth.options.commands import ClaimsOptions, ReportOptions, SensitivityOptions
from effdepth.options.flags import add_option_arguments


def register(sub) -> dict:
    r = sub.add_parser(
        "report",
        help="write an HTML or Markdown report of saved results",
        description="One result: a report with its tables, figures and provenance. Several: a comparison table and "
        "figure (sorted by D_eff / F_L), then a section per result. The studies in the folders (an intervention, a "
        "carry experiment, a trajectory, a random-weight null, a pruning check) get a section each with their tables "
        "and figure. HTML is one self-contained file; Markdown writes its images into <name>_files/ beside it.",
    )
    c = sub.add_parser(
        "claims",
        help="check the paper's claims on saved results",
        description="Judge the five claims of the paper's abstract (sub-reference by default, not the initial state or "
        "update sizes, not a BOS artefact, survives the controls, below the calibrated reference) on saved results, for "
        "every similarity they hold: holds, fails or not measured, with the numbers and intervals behind each verdict. "
        "One result: a table of claims x similarities and the evidence. Several (a sweep's folder): one row per model "
        "and similarity, and a tally next to what the abstract reports. Passage-mode results come first beside the "
        "paper's Table 2 (D_eff, D_eff/L, gap and the difference). Exits 0 whatever the verdicts. Measure with "
        "--views paper --similarity all to check every claim under every similarity.",
    )
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
    for parser, options in ((r, ReportOptions), (c, ClaimsOptions), (s, SensitivityOptions)):
        add_option_arguments(parser, options)
    return {"report": cmd_report, "claims": cmd_claims, "sensitivity": cmd_sensitivity}


def cmd_report(args) -> int:
    from effdepth.report.build import write_report

    written = write_report(args.results, args.output, args.format)
    extra = f" and {len(written) - 1} images in {written[1].parent}/" if len(written) > 1 else ""
    print(f"wrote {written[0]}{extra}")
    return 0


def cmd_claims(args) -> int:
    from effdepth.studies.claims import check_paths

    print(check_paths(args.results).text())
    return 0


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
