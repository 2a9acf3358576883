"""``effdepth null``: the random-weight null of a model (its architecture at initialisation, same protocol)."""

from __future__ import annotations

from pathlib import Path

from effdepth.cli.arguments import output_folder, run_options_from_args
from effdepth.errors import EffdepthError
from effdepth.options import Options
from effdepth.options.flags import add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import default_out
from effdepth.results.files import one_writer
from effdepth.studies.null.options import NullOptions


def register(sub) -> dict:
    n = sub.add_parser(
        "null",
        help="D_eff of the model's architecture with random weights (the random-weight null)",
        description="Measure the model, then its architecture randomly initialised from its config (no weights are "
        "read), once per seed, with the same options: one measurement per seed beside the trained one. Prints "
        "D_eff/L and D_eff/F_L of the default view, trained against the seeds' mean and sd.",
    )
    n.set_defaults(parser=n)
    add_measure_arguments(n)
    add_option_arguments(n, NullOptions)
    add_output_arguments(n, "runs/<model>-null", names=("out",))
    return {"null": cmd_null}


def parse_seeds(text: str) -> list:
    """``"3"`` -> ``[0, 1, 2]``; ``"4,7"`` -> ``[4, 7]``.

    >>> parse_seeds("3"), parse_seeds("4,7")
    ([0, 1, 2], [4, 7])
    """
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() for p in parts):
        raise EffdepthError(
            f"--seeds {text!r} is not a count or a comma-separated list of whole numbers; e.g. --seeds 5"
        )
    if len(parts) == 1:
        if int(parts[0]) < 1:
            raise EffdepthError("--seeds 0 measures no null; give at least 1")
        return list(range(int(parts[0])))
    return [int(p) for p in parts]


def cmd_null(args) -> int:
    from effdepth.report.style import save_figure
    from effdepth.report.tables import study_text
    from effdepth.studies.null import random_weight_null
    from effdepth.studies.null.report import null_figure

    seeds = parse_seeds(args.seeds)
    options = Options.from_args(args)
    out = Path(args.out) if args.out else Path(f"{default_out(args.model)}-null")
    with output_folder(out) as folder, one_writer(folder):
        null = random_weight_null(options, seeds, run=run_options_from_args(args))
        path = null.save(folder)
        save_figure(null_figure(null.record()), Path(folder) / "null")
    print(study_text("null", null.record()))
    print(f"\nwrote {path}, null.png/.pdf (the trained result in {out}/trained, each seed's in {out}/seed-S)")
    return 0
