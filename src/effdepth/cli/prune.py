"""``effdepth prune-check``: can D_eff order a model's blocks for pruning? (docs/method.md#pruning)"""

from __future__ import annotations

from pathlib import Path

from effdepth.cli.arguments import output_folder, run_options_from_args
from effdepth.options import Options
from effdepth.options.flags import add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import default_out
from effdepth.results.files import one_writer
from effdepth.studies.prune.options import PruneOptions


def register(sub) -> dict:
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
    p.set_defaults(parser=p)
    add_measure_arguments(p)
    add_option_arguments(p, PruneOptions)
    add_output_arguments(p, "runs/<model>-prune", names=("out",))
    return {"prune-check": cmd_prune_check}


def cmd_prune_check(args) -> int:
    from effdepth.report.style import save_figure
    from effdepth.report.tables import study_text
    from effdepth.studies.prune import parse_skip, prune_check
    from effdepth.studies.prune.report import prune_figure

    skips = parse_skip(args.skip)
    options = Options.from_args(args)
    out = Path(args.out) if args.out else Path(f"{default_out(args.model)}-prune")
    with output_folder(out) as folder, one_writer(folder):
        pr = prune_check(options, skips, heldout=args.heldout, run=run_options_from_args(args))
        path = pr.save(folder)
        save_figure(prune_figure(pr.record()), Path(folder) / "prune")
    print(study_text("prune", pr.record()))
    print(f"\nwrote {path}, prune.png/.pdf and the measured result in {out}/measured")
    return 0
