"""``effdepth compare``: paired differences of saved results (or models measured on their passages) and
the cross-model CKA."""

from __future__ import annotations

from pathlib import Path

from effdepth.cli.arguments import output_folder
from effdepth.errors import EffdepthError
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions
from effdepth.options.flags import add_option_arguments, add_output_arguments
from effdepth.options.groups import HubOptions, default_out
from effdepth.studies.compare.options import ANALYSIS, MODEL, CompareOptions


def register(sub) -> dict:
    c = sub.add_parser(
        "compare",
        help="is B's D_eff different from A's? paired differences with intervals, and the cross-model CKA",
        description="Compare results measured on the same passages: for every view and similarity they share, "
        "D_eff(B) - D_eff(A), the difference of D_eff/F_L and of the gap, each with a percentile interval from "
        "one paired bootstrap (the same resampled passages for both), its verdict and its sample-size curve; and "
        "the linear CKA of every state of A with every state of B. Reads the pooled vectors saved beside each "
        "result.json (no forward pass). A model given after the first result is measured on that result's "
        "passages with its options. Writes comparison.json and comparison.{png,pdf}.",
    )
    add_option_arguments(c, CompareOptions)
    add_option_arguments(c, AnalysisOptions, names=ANALYSIS, default=None, help_suffix=" (default: the first result's)")
    add_option_arguments(c, LoadOptions, names=MODEL, help_suffix=" (models measured here)")
    add_option_arguments(c, RunOptions, names=("progress",))
    add_option_arguments(c, HubOptions)
    add_output_arguments(c, "runs/compare/<A>--<B>")
    return {"compare": cmd_compare}


def cmd_compare(args) -> int:
    from effdepth.report.style import save_figure
    from effdepth.report.tables import show_text
    from effdepth.results.files import one_writer
    from effdepth.studies.compare import compare_results, members_from_specs
    from effdepth.studies.compare.report import comparison_figure

    out = Path(args.out) if args.out else compare_out(args.results)
    refuse_other_comparison(out, args.results)
    changes = {k: getattr(args, k) for k in ANALYSIS if getattr(args, k) is not None}
    model_options = {k: getattr(args, k) for k in MODEL if getattr(args, k) not in (None, False)}
    with output_folder(out), one_writer(out):
        members, consecutive = members_from_specs(
            args.results, out, model_options=model_options, progress=args.progress
        )
        comparison = compare_results(
            members, pairs=args.pairs, consecutive=consecutive, progress=args.progress, **changes
        )
        comparison.config["inputs"] = [str(s) for s in args.results]
        if args.figures:
            save_figure(comparison_figure(comparison), out / "comparison")
        path = comparison.save(out)
    print(show_text(comparison))
    print(f"\nsaved {path}; effdepth report {out} renders it with its figure")
    return 0


def compare_out(specs) -> Path:
    """``runs/compare/<A>--<B>``, from the names of what is compared.

    >>> compare_out(["runs/base", "runs/tuned"]).as_posix()
    'runs/compare/base--tuned'
    """
    names = [default_out(Path(str(s)).name).name for s in specs[:3]]
    return Path("runs") / "compare" / "--".join(names)


def refuse_other_comparison(out: Path, specs) -> None:
    """An output folder that holds a comparison of other inputs is refused in one line (the same inputs:
    replaced)."""
    from effdepth.results.loading import load

    path = out / "comparison.json"
    if not path.is_file():
        return
    try:
        inputs = load(path).config.get("inputs")
    except EffdepthError:
        inputs = None
    if inputs != [str(s) for s in specs]:
        raise EffdepthError(
            f"{out} already holds another comparison ({', '.join(inputs or ['unreadable'])}); choose another "
            "--out, or delete that folder to replace it"
        )
