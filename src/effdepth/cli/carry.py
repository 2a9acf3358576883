"""The residual-carry commands: ``intervene`` (in the model), ``recompose`` (offline) and ``experiment carry`` (trained)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from effdepth.cli.arguments import typed
from effdepth.errors import EffdepthError
from effdepth.options import Options, RunOptions
from effdepth.options.flags import (
    Parser,
    add_measure_arguments,
    add_option_arguments,
    add_output_arguments,
    option_flags,
)
from effdepth.options.groups import default_out, ensure_writable
from effdepth.results.files import one_writer
from effdepth.studies.intervene.options import InterventionOptions
from effdepth.studies.recompose import RecomposeOptions

#: Where ``experiment carry`` writes unless told.
EXPERIMENT_OUT = "runs/carry-experiment"


def register(sub) -> dict:
    i = sub.add_parser(
        "intervene",
        help="measure D_eff and loss with the residual carry scaled",
        description="For each carry lam, blocks output lam * s_{l-1} + (s_l - s_{l-1}) (lam = 1: the unmodified model); "
        "D_eff, references and next-token loss are measured on the same passages, as effdepth measure measures them "
        "(--pooling none: each passage's tokens as samples), so carry 1 gives measure's number. Writes intervention.json, "
        "carry-<lam>/result.json and intervention.{png,pdf}. For the offline version from a saved result see 'effdepth recompose'.",
    )
    add_option_arguments(i, InterventionOptions)
    add_measure_arguments(i)
    add_output_arguments(i, "runs/<model>/intervention", names=("out",))

    r = sub.add_parser(
        "recompose",
        help="offline carry sweep and decorrelation of a saved passage-mode result",
        description="Rebuild a saved passage-mode result's stream without running the model, from the pooled "
        "vectors kept beside its result.json: increments X_0 = P_0, X_l = P_l - P_{l-1}, carry sweep "
        "S'_l = lam S'_{l-1} + X_l (mean pooling is linear, so this is exactly pooling the recomposed token "
        "stream), and the same with the increments centred across passages, orthogonalised in order and kept "
        "at their energies (decorrelated). Each stream is analysed as the result was (its similarities, "
        "embedding state, seed), so lam = 1 gives the measured D_eff back; the decorrelated stream at lam = 1 "
        "is shown beside R_matched with the difference (under CKA they are not equal). Views: default, "
        "drop-bos, drop-pos0, length and their compositions (token-norm and top{k}pc are not linear in the "
        "states). Writes recompose.json with --out.",
    )
    add_option_arguments(r, RecomposeOptions)
    add_option_arguments(r, RunOptions, names=("progress",))
    add_output_arguments(r, "none: recompose.json is written only with --out", names=("out",))

    e = sub.add_parser(
        "experiment",
        help="controlled training experiments",
        description="Train small models from scratch and measure them.",
    )
    kinds = e.add_subparsers(dest="experiment", parser_class=Parser, metavar="EXPERIMENT", required=True)
    c = kinds.add_parser(
        "carry",
        help="train tiny Llamas with a fixed residual carry and measure D_eff",
        description="Train one tiny byte-level Llama per carry value (and seed), identical but for the carry in every block, "
        "on the built-in Shakespeare; save Hugging Face checkpoints DIR/lam-<lam>/seed-<k>/step-<N>/ and measure each on "
        "held-out sequences WITH its carry (stored as effdepth_carry in the config; a plain 'effdepth measure' of such a "
        "checkpoint measures the lam = 1 model). Writes DIR/experiment.json and DIR/experiment.{png,pdf}.",
    )
    from effdepth.studies.experiment import CarryExperiment

    add_option_arguments(c, CarryExperiment)
    add_option_arguments(c, RunOptions, names=("progress",))
    add_output_arguments(c, EXPERIMENT_OUT, names=("out",))
    return {"intervene": cmd_intervene, "recompose": cmd_recompose, "experiment": cmd_experiment}


def cmd_intervene(args) -> int:
    from effdepth.report.tables import save_study
    from effdepth.studies.intervene import intervene
    from effdepth.studies.intervene.hooks import check_layer_spec, parse_carry
    from effdepth.studies.intervene.report import intervention_headline, intervention_table

    options = Options.from_args(args)
    # Bad carry values or layers fail before the output folder and the weights.
    carries = parse_carry(args.carry)
    check_layer_spec(args.layers)
    out = ensure_writable(Path(args.out) if args.out else default_out(args.model) / "intervention")
    with one_writer(out):
        result = intervene(
            carry=carries, layers=args.layers, carry_on=args.carry_on, progress=args.progress, **_keywords(options)
        )
        path = save_study(result, out)
    print(intervention_headline(result))
    print()
    print(intervention_table(result))
    print(f"\nwrote {path}, {len(carries)} results under {out}/carry-*/ and {out / 'intervention'}.{{png,pdf}}")
    return 0


def _keywords(options: Options) -> dict:
    """The options as :func:`effdepth.intervene` keywords (the objects, not their descriptions)."""
    return {f.name: getattr(part, f.name) for part in (options.load, options.analysis) for f in fields(part)}


def cmd_recompose(args) -> int:
    from effdepth.options import validate_options
    from effdepth.results.files import write_json_atomic
    from effdepth.results.loading import load
    from effdepth.results.result import Result
    from effdepth.studies.intervene.hooks import parse_carry
    from effdepth.studies.recompose import recompose_report

    carries = parse_carry(args.carry)
    validate_options(bootstrap=args.bootstrap)  # before reading the pooled vectors
    result = load(args.result)
    if not isinstance(result, Result):
        raise EffdepthError(
            f"{args.result} is not a measurement's result; effdepth recompose rebuilds the stream of "
            "one (result.json of effdepth measure, or a carry-<lam>/ folder of an intervention)"
        )
    data, text = recompose_report(result, carries, view=args.view, bootstrap=args.bootstrap, progress=args.progress)
    print(text)
    if args.out:
        path = ensure_writable(Path(args.out)) / "recompose.json"
        write_json_atomic(path, data)
        print(f"\nwrote {path}")
    return 0


def cmd_experiment(args) -> int:
    from effdepth.studies.experiment import CarryExperiment, carry_experiment
    from effdepth.studies.experiment.report import (
        experiment_final_table,
        experiment_headline,
        experiment_paper_table,
        experiment_step_table,
    )

    declared = [f for f in fields(CarryExperiment) if f.metadata.get("cli") and f.name != "paper"]
    given = {f.name: getattr(args, f.name) for f in declared}
    if args.paper:  # the paper's values, but for what was typed
        named = {f.name for f in declared if typed(args, option_flags(f))}
        spec = CarryExperiment.paper_setting(**{k: v for k, v in given.items() if k in named}).checked()
    else:
        spec = CarryExperiment(**given).checked()
    out = ensure_writable(Path(args.out or EXPERIMENT_OUT))
    with one_writer(out):
        result = carry_experiment(spec, out, progress=args.progress)
    print(experiment_headline(result))
    print()
    print(experiment_final_table(result))
    print()
    print(experiment_step_table(result))
    differences = "; ".join(spec.paper_differences())
    if spec.paper:
        print()
        print(
            f"beside the paper's Table S14:\n{experiment_paper_table(result)}\ndiffers from the paper's run: {differences}"
        )
    else:
        print(
            f"\ndiffers from the paper's S17 run (--paper runs its setting, a GPU job, and shows its Table S14): {differences}"
        )
    print(
        f"\nwrote {out / 'experiment.json'} and {out / 'experiment'}.{{png,pdf}}; checkpoints under {out}/lam-*/seed-*/step-*/"
    )
    return 0
