"""``effdepth measure`` and ``effdepth show``."""

from __future__ import annotations

import sys
from pathlib import Path

from ..errors import EffdepthError
from ..options import Options
from .arguments import add_measure_arguments, add_model_argument, default_out, ensure_writable, float_arg, run_options_from_args


def register(sub) -> dict:
    m = sub.add_parser("measure", help="measure D_eff of one model", description="Measure D_eff of one model on a corpus.")
    add_model_argument(m)
    add_measure_arguments(m)
    m.add_argument("--out", "-o", default=None, help="output folder for result.json (default: runs/<model>)")
    m.add_argument("--resume", metavar="DIR", default=None, help="continue an interrupted run from its output folder")
    m.add_argument("--checkpoint-every", type=float_arg, default=30.0, metavar="SECONDS", help="save partial statistics this often (default 30)")
    m.add_argument("--no-figures", dest="figures", action="store_false", help="do not write the figures (PNG and PDF) next to result.json")

    s = sub.add_parser("show", help="print the tables of a saved result",
                       description="Print a saved result without re-running anything: a measurement (result.json), an "
                       "intervention (intervention.json), a carry experiment (experiment.json) or a trajectory "
                       "(trajectory.json with its trajectory.csv).")
    s.add_argument("result", help="result.json, intervention.json, experiment.json or trajectory.json, or the folder holding one")
    return {"measure": cmd_measure, "show": cmd_show}


def cmd_measure(args) -> int:
    from ..checkpoint import checkpoint_dir
    from ..measure import run_measurement

    options = Options.from_args(args)  # every option is checked before the output folder or the weights
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise EffdepthError(f"--resume {args.resume} continues in that folder; drop --out {args.out} or make them equal")
    out = ensure_writable(Path(args.resume or args.out or default_out(args.model)))
    if not args.resume and (checkpoint_dir(out) / "state.json").is_file():
        print(f"effdepth: {out} holds an unfinished run; starting over (use --resume {out} to continue it instead)", file=sys.stderr)
    run = run_options_from_args(args, checkpoint=checkpoint_dir(out), resume=bool(args.resume))
    result = run_measurement(options, run)
    write_result(result, out, figures=args.figures)
    return 0


def write_result(result, out: Path, *, figures: bool, note: str = "") -> None:
    """Save ``result`` in ``out``, print its tables, and write its figures."""
    from ..report.tables import result_summary_text

    from ..report.figures import remove_stale_figures, write_figures

    path = result.save(out)
    print(result_summary_text(result))
    print(f"\nwrote {path}{note}")
    if figures:
        written = write_figures(result, out)  # also removes standard figures this result does not produce
        print(f"wrote {len(written)} figures to {out}/: {', '.join(sorted({p.stem for p in written}))} (.png, .pdf)")
    else:
        # Figures of an earlier result in this folder would now sit next to numbers they do not show.
        removed = remove_stale_figures(out)
        if removed:
            print(f"removed {len(removed)} figures of an earlier result in {out}/: {', '.join(sorted({p.name for p in removed}))}")


def cmd_show(args) -> int:
    from ..loading import load
    from ..report.tables import show_text

    print(show_text(load(args.result)))
    return 0
