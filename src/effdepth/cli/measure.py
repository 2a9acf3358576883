"""``effdepth measure`` and ``effdepth show``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from effdepth.cli.arguments import (
    add_measure_arguments,
    add_model_argument,
    add_option_arguments,
    default_out,
    ensure_writable,
    float_arg,
    output_folder,
    run_options_from_args,
)
from effdepth.errors import EffdepthError
from effdepth.options import AnalysisOptions, Options

#: Flags that say where and how to run, not what to measure: never saved for a resume.
_NOT_SAVED = ("help", "resume", "out", "progress", "checkpoint_every", "figures")


def register(sub) -> dict:
    m = sub.add_parser(
        "measure", help="measure D_eff of one model", description="Measure D_eff of one model on a corpus."
    )
    m.set_defaults(parser=m)
    add_model_argument(m)
    add_measure_arguments(m)
    m.add_argument("--out", "-o", default=None, help="output folder for result.json (default: runs/<model>)")
    m.add_argument("--resume", metavar="DIR", default=None, help="continue an interrupted run from its output folder")
    m.add_argument(
        "--checkpoint-every",
        type=float_arg,
        default=30.0,
        metavar="SECONDS",
        help="save partial statistics this often (default 30)",
    )
    m.add_argument(
        "--no-figures",
        dest="figures",
        action="store_false",
        help="do not write the figures (PNG and PDF) next to result.json",
    )

    a = sub.add_parser(
        "analyse",
        help="recompute a passage-mode result from its pooled vectors (no forward pass)",
        description="Recompute every number of a passage-mode result from the pooled vectors saved beside "
        "it (DIR/pooled): other views (any top{k}pc and length; drop-pos0, drop-bos and token-norm if they "
        "were pooled), the confound controls and the sample-size curve, "
        "similarities, intervals, the embedding state. No model is loaded.",
    )
    a.add_argument("result", help="the folder of a passage-mode result (holding result.json and pooled/)")
    # The analysis options that apply after the forward pass, declared once in effdepth.options.
    add_option_arguments(
        a, AnalysisOptions, names=AnalysisOptions.AFTER_FORWARD, default=None, help_suffix=" (default: the result's)"
    )
    a.add_argument("--out", "-o", default=None, help="write the new result here (default: in place of the old one)")
    a.add_argument("--no-figures", dest="figures", action="store_false", help="do not write the figures")
    a.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")

    s = sub.add_parser(
        "show",
        help="print the tables of a saved result",
        description="Print a saved result without re-running anything: a measurement (result.json), an "
        "intervention (intervention.json), a carry experiment (experiment.json) or a trajectory "
        "(trajectory.json with its trajectory.csv).",
    )
    s.add_argument(
        "result", help="result.json, intervention.json, experiment.json or trajectory.json, or the folder holding one"
    )
    return {"measure": cmd_measure, "analyse": cmd_analyse, "show": cmd_show}


def cmd_measure(args) -> int:
    from effdepth.measurement import run_measurement
    from effdepth.measurement.checkpoint import checkpoint_dir
    from effdepth.results.files import one_writer

    if args.resume:
        adopt_saved_flags(args, checkpoint_dir(Path(args.resume)))
    options = Options.from_args(args)  # every option is checked before the output folder or the weights
    if args.resume and args.out and Path(args.out) != Path(args.resume):
        raise EffdepthError(
            f"--resume {args.resume} continues in that folder; drop --out {args.out} or make them equal"
        )
    # A run that fails before writing anything removes the output folder it created; one run writes a folder.
    with output_folder(Path(args.resume or args.out or default_out(args.model))) as out, one_writer(out):
        if not args.resume and (checkpoint_dir(out) / "state.json").is_file():
            print(
                f"effdepth: {out} holds an unfinished run; starting over (use --resume {out} to continue it instead)",
                file=sys.stderr,
            )
        record = {"flags": measured_flags(args), "command": resume_command(args, out)}
        run = run_options_from_args(args, checkpoint=checkpoint_dir(out), resume=bool(args.resume), record=record)
        result = run_measurement(options, run)
        write_result(result, out, figures=args.figures)
    return 0


def _option_actions(parser):
    return [a for a in parser.option_actions if a.dest not in _NOT_SAVED]


def measured_flags(args) -> dict:
    """The measurement flags of this run (and its model), as given, local paths made absolute: what a
    checkpoint keeps for ``--resume DIR``, from whichever folder it is typed."""
    flags = {a.dest: comparable_flag(a.dest, getattr(args, a.dest)) for a in _option_actions(args.parser)}
    return {"model": comparable_flag("model", args.model), **flags}


def comparable_flag(dest: str, value):
    """A flag's value as a resume compares it: a model or corpus that is a local path, absolute
    (``./m`` and ``m`` are the same folder); anything else (a hub id, ``shakespeare``) as given.

    >>> comparable_flag("corpus", "shakespeare"), comparable_flag("seq_len", 64)
    ('shakespeare', 64)
    >>> comparable_flag("model", ".") == str(Path.cwd())
    True
    """
    if dest in ("model", "corpus") and isinstance(value, str) and value and Path(value).expanduser().exists():
        return str(Path(value).expanduser().resolve())
    return value


def explicit_dests(args) -> set:
    """The flags the user typed (not left at their defaults), from the command line itself."""
    argv = getattr(args, "argv", None) or []
    out = set()
    for action in _option_actions(args.parser):
        if any(tok == flag or tok.startswith(flag + "=") for tok in argv for flag in action.option_strings):
            out.add(action.dest)
    return out


def adopt_saved_flags(args, folder: Path) -> None:
    """``--resume DIR`` alone continues the run saved there: its flags are taken from the checkpoint;
    flags typed now must equal the saved ones (they decide which numbers the statistics are)."""
    from effdepth.measurement.checkpoint import saved_run

    saved = (saved_run(folder) or {}).get("flags")
    if not saved:
        return  # an older checkpoint: the typed flags are checked against its fingerprint instead
    typed = explicit_dests(args) | ({"model"} if args.model is not None else set())
    differ = [d for d in saved if d in typed and comparable_flag(d, getattr(args, d)) != comparable_flag(d, saved[d])]
    if differ:
        names = ", ".join(
            f"--{d.replace('_', '-')} (saved {saved[d]!r}, given {getattr(args, d)!r})"
            if d != "model"
            else f"the model (saved {saved[d]!r}, given {getattr(args, d)!r})"
            for d in differ
        )
        raise EffdepthError(
            f"cannot resume {folder.parent}: {names} differ from the interrupted run; "
            "drop those flags to continue it, or start over without --resume"
        )
    for dest, value in saved.items():
        setattr(args, dest, value)


def resume_command(args, out: Path) -> str:
    """The whole command that continues this run (``--resume DIR`` alone does too, for this version).

    >>> import argparse
    >>> from effdepth.cli.arguments import Parser
    >>> p = Parser(prog="effdepth measure"); _ = p.add_argument("--seq-len", type=int, default=256)
    >>> resume_command(argparse.Namespace(parser=p, model="m", seq_len=64), Path("runs/x"))
    'effdepth measure m --seq-len 64 --resume runs/x'
    """
    parts = ["effdepth", "measure"] + ([str(args.model)] if args.model is not None else [])
    for action in _option_actions(args.parser):
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        parts += [flag] if action.nargs == 0 else [flag, str(value)]
    return shlex.join(parts + ["--resume", str(out)])


def write_result(result, out: Path, *, figures: bool, note: str = "") -> None:
    """Save ``result`` in ``out``, print its tables, and write its figures."""
    from effdepth.report.figures import remove_stale_figures, write_figures
    from effdepth.report.tables import result_summary_text

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
            print(
                f"removed {len(removed)} figures of an earlier result in {out}/: {', '.join(sorted({p.name for p in removed}))}"
            )


def cmd_analyse(args) -> int:
    from effdepth.measurement.run import ANALYSIS_CHANGES, analyse_saved

    changes = {k: getattr(args, k) for k in ANALYSIS_CHANGES if getattr(args, k) is not None}
    result = analyse_saved(Path(args.result), progress=args.progress, **changes)
    out = Path(args.out) if args.out else Path(args.result)
    write_result(result, ensure_writable(out), figures=args.figures, note=" (re-analysed from the pooled vectors)")
    return 0


def cmd_show(args) -> int:
    from effdepth.report.tables import show_text
    from effdepth.results.loading import load

    print(show_text(load(args.result)))
    return 0
