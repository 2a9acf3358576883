"""``effdepth measure`` and ``effdepth show``."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from effdepth.cli.arguments import output_folder, run_options_from_args, typed
from effdepth.errors import EffdepthError
from effdepth.options import AnalysisOptions, Options, RunOptions
from effdepth.options.commands import AnalyseOptions, ShowOptions
from effdepth.options.flags import add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import default_out, ensure_writable

#: Flags that say where and how to run, not what to measure: never saved for a resume.
_NOT_SAVED = ("help", "resume", "out", "progress", "checkpoint_every_s", "figures")


def register(sub) -> dict:
    m = sub.add_parser(
        "measure", help="measure D_eff of one model", description="Measure D_eff of one model on a corpus."
    )
    m.set_defaults(parser=m)
    add_measure_arguments(m, run=("progress", "checkpoint_every_s"))
    add_output_arguments(m, "runs/<model>", names=("out", "figures", "resume"))

    a = sub.add_parser(
        "analyse",
        help="recompute a passage-mode result from its pooled vectors (no forward pass)",
        description="Recompute every number of a passage-mode result from the pooled vectors saved beside "
        "it (DIR/pooled): other views (any top{k}pc and length; drop-pos0, drop-bos and token-norm if they "
        "were pooled), the confound controls and the sample-size curve, "
        "similarities, intervals, the embedding state. No model is loaded.",
    )
    add_option_arguments(a, AnalyseOptions)
    # The analysis options that apply after the forward pass, declared once in effdepth.options.
    add_option_arguments(
        a, AnalysisOptions, names=AnalysisOptions.AFTER_FORWARD, default=None, help_suffix=" (default: the result's)"
    )
    add_output_arguments(a, "the result's folder, in place of the old result")
    add_option_arguments(a, RunOptions, names=("progress",))

    s = sub.add_parser(
        "show",
        help="print the tables of a saved result",
        description="Print a saved result without re-running anything: a measurement (result.json: every table "
        "with its notes, where measure prints the first ones; --all adds its options and provenance), an "
        "intervention (intervention.json), a carry experiment (experiment.json) or a trajectory "
        "(trajectory.json with its trajectory.csv).",
    )
    add_option_arguments(s, ShowOptions)
    return {"measure": cmd_measure, "analyse": cmd_analyse, "show": cmd_show}


def cmd_measure(args) -> int:
    from effdepth.measurement import run_measurement
    from effdepth.measurement.checkpoint import checkpoint_dir
    from effdepth.report.plain import write_result
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


def adopt_saved_flags(args, folder: Path) -> None:
    """``--resume DIR`` alone continues the run saved there: its flags are taken from the checkpoint;
    flags typed now must equal the saved ones (they decide which numbers the statistics are)."""
    from effdepth.measurement.checkpoint import saved_run

    saved = (saved_run(folder) or {}).get("flags")
    if not saved:
        return  # an older checkpoint: the typed flags are checked against its fingerprint instead
    given = {a.dest for a in _option_actions(args.parser) if typed(args, a.option_strings)}  # typed, not defaults
    given |= {"model"} if args.model is not None else set()
    differ = [d for d in saved if d in given and comparable_flag(d, getattr(args, d)) != comparable_flag(d, saved[d])]
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
    >>> from effdepth.options.flags import Parser
    >>> p = Parser(prog="effdepth measure"); add_option_arguments(p, AnalysisOptions, names=("seed",))
    >>> resume_command(argparse.Namespace(parser=p, model="m", seed=3), Path("runs/x"))
    'effdepth measure m --seed 3 --resume runs/x'
    """
    parts = ["effdepth", "measure"] + ([str(args.model)] if args.model is not None else [])
    for action in _option_actions(args.parser):
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        parts += [flag] if action.nargs == 0 else [flag, str(value)]
    return shlex.join(parts + ["--resume", str(out)])


def cmd_analyse(args) -> int:
    from effdepth.measurement.run import ANALYSIS_CHANGES, analyse_saved
    from effdepth.report.plain import write_result
    from effdepth.results.files import one_writer

    changes = {k: getattr(args, k) for k in ANALYSIS_CHANGES if getattr(args, k) is not None}
    result = analyse_saved(Path(args.result), progress=args.progress, **changes)
    out = ensure_writable(Path(args.out) if args.out else Path(args.result))
    with one_writer(out):
        write_result(result, out, figures=args.figures, note=" (re-analysed from the pooled vectors)")
    return 0


def cmd_show(args) -> int:
    from effdepth.report.tables import show_text
    from effdepth.results.loading import load
    from effdepth.results.result import Result

    saved = load(args.result)
    print(show_text(saved))
    if args.all and isinstance(saved, Result):
        print()
        print(facts_text(saved, args.result))
    return 0


def facts_text(result, named) -> str:
    """What ``show --all`` adds for a measurement: its facts, extra measurements, options and provenance."""
    from effdepth.report.content import result_content
    from effdepth.report.content.facts import extras_rows, provenance_groups
    from effdepth.report.plain import facts_text as plain_facts
    from effdepth.report.sources import load_sources

    source = load_sources([named])[0]
    return plain_facts(result_content(result).summary + extras_rows(result), provenance_groups(source))
