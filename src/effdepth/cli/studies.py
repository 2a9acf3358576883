"""``effdepth null`` (the random-weight null: the model's architecture at initialisation, same protocol) and
``effdepth prune-check`` (can D_eff order a model's blocks for pruning? docs/method.md#pruning)."""

from __future__ import annotations

from pathlib import Path

from effdepth.cli.arguments import output_folder, run_options_from_args
from effdepth.options import Options
from effdepth.options.flags import add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import default_out
from effdepth.results.files import one_writer
from effdepth.results.loading import KINDS, SavedStudy
from effdepth.studies.null.options import NullOptions
from effdepth.studies.prune.options import PruneOptions


def register(sub) -> dict:
    n = sub.add_parser(
        "null",
        help="D_eff of the model's architecture with random weights (the random-weight null)",
        description="Measure the model, then its architecture randomly initialised from its config (no weights are "
        "read), once per seed, with the same options: one measurement per seed beside the trained one. Prints "
        "D_eff/L and D_eff/F_L of the default view, trained against the seeds' mean and sd.",
    )
    p = sub.add_parser(
        "prune-check",
        help="skip blocks in block-influence and local-D_eff order; held-out perplexity per k",
        description="Measure the model once (passage mode, these options), rank its blocks by ShortGPT's block "
        "influence and by local D_eff (leave one state out of the similarity matrix), then skip the first k blocks "
        "of each order and measure the next-token perplexity on held-out passages (the corpus drawn with the next "
        "seed, measured passages left out). Runs one measurement and 1 + 2K perplexity passes over the held-out "
        "passages. Prints the perplexity per k and order and the Spearman correlation of the two rankings; writes "
        "prune.json, prune.png and the measured result.",
    )
    for parser, options, name in ((n, NullOptions, "null"), (p, PruneOptions, "prune")):
        parser.set_defaults(parser=parser)
        add_measure_arguments(parser)
        add_option_arguments(parser, options)
        add_output_arguments(parser, f"runs/<model>-{name}", names=("out",))
    return {"null": cmd_null, "prune-check": cmd_prune_check}


def cmd_null(args) -> int:
    from effdepth.studies.null import parse_seeds, random_weight_null

    seeds = parse_seeds(args.seeds)
    return run_saved_study(
        args,
        "null",
        lambda options, run: random_weight_null(options, seeds, run=run),
        "(the trained result in {out}/trained, each seed's in {out}/seed-S)",
    )


def cmd_prune_check(args) -> int:
    from effdepth.studies.prune import parse_skip, prune_check

    skips = parse_skip(args.skip)
    return run_saved_study(
        args,
        "prune",
        lambda options, run: prune_check(options, skips, heldout=args.heldout, run=run),
        "and the measured result in {out}/measured",
    )


def run_saved_study(args, name: str, study, wrote: str) -> int:
    """``study(options, run)`` into ``--out`` (else ``runs/<model>-<name>``) as its one writer, saved with its
    figure; print its tables and what was written (``wrote``, with ``{out}`` the folder)."""
    from effdepth.report.style import save_figure
    from effdepth.report.tables import study_text

    options = Options.from_args(args)
    out = Path(args.out) if args.out else Path(f"{default_out(args.model)}-{name}")
    with output_folder(out) as folder, one_writer(folder):
        done = study(options, run_options_from_args(args))
        path = done.save(folder)
        save_figure(KINDS[name].figure(SavedStudy(name, done.record())), Path(folder) / name)
    print(study_text(name, done.record()))
    print(f"\nwrote {path}, {name}.png/.pdf {wrote.format(out=out)}")
    return 0
