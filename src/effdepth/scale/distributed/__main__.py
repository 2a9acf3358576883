"""``torchrun --nproc-per-node N -m effdepth.scale.distributed measure MODEL ...``: one measurement over several
processes. Its flags are ``effdepth measure``'s, built from the same declarations (:mod:`effdepth.options.flags`)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.options import Options
from effdepth.options.commands import TorchrunOptions
from effdepth.options.flags import Parser, add_measure_arguments, add_option_arguments, add_output_arguments
from effdepth.options.groups import default_out, ensure_writable


def build_parser() -> Parser:
    parser = Parser(
        prog="effdepth.scale.distributed",
        description="Measure one model over several processes (torchrun). Example: "
        "torchrun --nproc-per-node 2 -m effdepth.scale.distributed measure MODEL --out DIR",
    )
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="COMMAND", required=True)
    m = sub.add_parser("measure", help="measure D_eff of one model, sequences shared by the ranks")
    add_measure_arguments(m)
    add_option_arguments(m, TorchrunOptions)
    add_output_arguments(m, "runs/<model>")
    return parser


def main(argv=None) -> int:
    """``python -m effdepth.scale.distributed measure ...`` under torchrun; returns the exit status."""
    from effdepth.scale.distributed.group import PeerFailed, process_group

    rank = int(os.environ.get("RANK", 0))
    try:
        args = build_parser().parse_args(argv)
        if args.device_map is not None:
            raise EffdepthError(
                "--device-map does not combine with a distributed measurement: every rank holds the whole model"
            )
        with process_group(args.backend):
            return _measure_command(args)
    except PeerFailed as exc:
        if rank == 0:
            print(f"effdepth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except EffdepthError as exc:
        print(f"effdepth: error: [rank {rank}] {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"effdepth: interrupted [rank {rank}]", file=sys.stderr)
        return 130


def _measure_command(args) -> int:
    import torch
    import torch.distributed as dist

    from effdepth.report.plain import write_result
    from effdepth.scale.distributed import agreed, comm_device, measure_distributed

    options = Options.from_args(args)
    if options.load.device is None and torch.cuda.is_available():
        options = options.replace(device=f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}")
    out = default_out(args.model) if args.out is None else Path(args.out)
    # Rank 0 alone writes, but every rank must hear if it cannot: they would wait for it forever.
    agreed(lambda: ensure_writable(out) if dist.get_rank() == 0 else None, "checking the output folder", comm_device())
    result = measure_distributed(options, progress=args.progress, folder=out)
    # Every rank waits for rank 0's write: torchrun stops all ranks when one exits badly.
    agreed(
        lambda: (
            None
            if result is None
            else write_result(result, out, figures=args.figures, note=f" ({dist.get_world_size()} processes)")
        ),
        "writing the result",
        comm_device(),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
