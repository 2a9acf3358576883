"""``suite``, ``sweep`` and ``trajectory``: many models or checkpoints, locally or on Ray (docs/scale.md)."""

from __future__ import annotations

from pathlib import Path

from effdepth.cli.arguments import log_line, output_folder, run_options_from_args
from effdepth.errors import EffdepthError
from effdepth.options import Options
from effdepth.options.flags import Parser, add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import ExecutorOptions
from effdepth.scale.sweep.options import SuiteOptions, SweepOptions
from effdepth.scale.trajectory.options import TrajectoryOptions

#: The flags of a sweep or a trajectory beside the measurement's: where the jobs run, how often they save.
RUN = ("progress", "checkpoint_every_s")


def register(sub) -> dict:
    s = sub.add_parser(
        "suite",
        help="list or show the model suites",
        description="Model suites: named lists of models for 'effdepth sweep'.",
    )
    actions = s.add_subparsers(dest="suite_command", parser_class=Parser, metavar="ACTION", required=True)
    actions.add_parser("list", help="the suites shipped with effdepth")
    show = actions.add_parser("show", help="the models of a suite")
    add_option_arguments(show, SuiteOptions)

    w = sub.add_parser(
        "sweep",
        help="measure every model of a suite (resumable)",
        description="Measure each model (suite names, suite files, ids, tiny:TYPE or folders) with the same options. "
        "Results go to DIR/<model>/<revision>/effdepth-<version>-<config hash>/result.json, written atomically: rerunning "
        "the same command skips finished models; a failing model leaves error.json and the rest go on. Writes "
        "DIR/summary.{csv,parquet}, DIR/suite.{png,pdf} and DIR/report.html. Exits 1 when a model failed. See docs/scale.md.",
    )
    add_option_arguments(w, SweepOptions)
    add_output_arguments(w, None)
    add_measure_arguments(w, model=False, run=RUN)
    add_option_arguments(w, ExecutorOptions)

    from effdepth.scale.suites.trajectories import preset_names

    t = sub.add_parser(
        "trajectory",
        help="measure a model across its training checkpoints",
        description="Measure a model at its training checkpoints: the hub repository's branches (Pythia step1000, OLMo-2 "
        "stage1-step1000-tokens5B, ...) or a local folder with one save_pretrained subfolder per checkpoint (step-100, "
        "checkpoint-100). Presets name the paper's trajectories: paper-olmo2 (OLMo-2 13B through 5T tokens) and "
        "paper-pythia (Pythia-1.4B), 35 checkpoints spaced in log tokens each. Checkpoints with the same weights as an "
        "earlier one are flagged, not measured again. Writes DIR/trajectory.{csv,parquet,json} and "
        "DIR/trajectory.{png,pdf}, D_eff/L and the updates' D_eff/L per checkpoint. See docs/scale.md.",
    )
    add_option_arguments(t, TrajectoryOptions, notes={"model": f" ({', '.join(preset_names())})"})
    add_output_arguments(t, None)
    add_measure_arguments(t, model=False, run=RUN)
    add_option_arguments(t, ExecutorOptions)
    return {"suite": cmd_suite, "sweep": cmd_sweep, "trajectory": cmd_trajectory}


def cmd_suite(args) -> int:
    from effdepth.scale.suites import load_suite, suite_names

    if args.suite_command == "list":
        for name in suite_names():
            suite = load_suite(name)
            print(f"{name:<10} {len(suite.models):>3} models  {suite.description}")
        return 0
    suite = load_suite(args.suite)
    print(f"{suite.name}: {suite.description}\n")
    print(suite.table())
    return 0


def cmd_sweep(args) -> int:
    from effdepth.scale.sweep import sweep
    from effdepth.scale.sweep.report import suite_summary_text

    options = Options.from_args(args, revision=None)  # the revision is each model's (make_jobs checks it)
    executor = _executor(args)
    with output_folder(Path(args.out)) as out:  # bad models or suites leave no empty folder behind
        outcome = sweep(
            args.models,
            out,
            options,
            revision=args.revision,
            executor=executor,
            figures=args.figures,
            report=args.report,
            run=run_options_from_args(args),
            log=log_line,
        )
    print()
    print(suite_summary_text(outcome.rows))
    print(f"\n{counts_text(outcome.counts)}; wrote {', '.join(p.name for p in outcome.files)} in {out}/")
    return 1 if outcome.counts.get("error") else 0


def cmd_trajectory(args) -> int:
    from effdepth.scale.trajectory import trajectory

    if args.revision is not None:
        raise EffdepthError("trajectory takes --revisions (auto, every:K, log:K or a list), not --revision")
    options = Options.from_args(args)
    executor = _executor(args)
    with output_folder(Path(args.out)) as out:
        outcome = trajectory(
            args.model,
            out,
            options,
            revisions=args.revisions,
            tokens_per_step=args.tokens_per_step,
            executor=executor,
            figures=args.figures,
            run=run_options_from_args(args),
            log=log_line,
        )
    print()
    print(outcome.table())
    print(
        f"\n{len(outcome.checkpoints)} checkpoints ({counts_text(outcome.counts)}), {len(outcome.duplicates)} duplicates flagged; "
        f"wrote {', '.join(p.name for p in outcome.files)} in {out}/"
    )
    return 1 if outcome.counts.get("error") else 0


def _executor(args):
    """The executor the flags of :class:`~effdepth.options.groups.ExecutorOptions` ask for, checked before any work."""
    from effdepth.scale.executors import make_executor

    return make_executor(
        args.executor, ray_address=args.ray_address, gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task
    )


def counts_text(counts: dict) -> str:
    """How the jobs ended, in words.

    >>> counts_text({"ok": 2, "error": 1})
    '2 measured, 1 failed'
    """
    words = {"done": "done before", "ok": "measured", "error": "failed"}
    return ", ".join(f"{counts[s]} {words[s]}" for s in words if counts.get(s)) or "nothing to do"
