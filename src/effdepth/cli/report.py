"""``effdepth report``: HTML or Markdown reports of saved results."""

from __future__ import annotations

from effdepth.options.commands import ReportOptions
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
    add_option_arguments(r, ReportOptions)
    return {"report": cmd_report}


def cmd_report(args) -> int:
    from effdepth.report.build import write_report

    written = write_report(args.results, args.output, args.format)
    extra = f" and {len(written) - 1} images in {written[1].parent}/" if len(written) > 1 else ""
    print(f"wrote {written[0]}{extra}")
    return 0
