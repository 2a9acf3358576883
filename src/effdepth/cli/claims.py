"""``effdepth claims``: does a model reproduce the paper? (docs/method.md#claims)"""

from __future__ import annotations

from effdepth.options.commands import ClaimsOptions
from effdepth.options.flags import add_option_arguments


def register(sub) -> dict:
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
    add_option_arguments(c, ClaimsOptions)
    return {"claims": cmd_claims}


def cmd_claims(args) -> int:
    from effdepth.studies.claims import check_paths

    print(check_paths(args.results).text())
    return 0
