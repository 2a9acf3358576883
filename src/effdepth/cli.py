"""The ``effdepth`` command line."""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback
from pathlib import Path

from . import __version__
from .errors import EffdepthError
from .measure import DEFAULTS


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, not usage + message
        raise EffdepthError(f"{self.prog}: {message} (see {self.prog} --help)")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="effdepth", description="Effective depth (D_eff) of a transformer's residual stream.")
    parser.add_argument("--version", action="version", version=f"effdepth {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=_Parser, metavar="COMMAND")

    m = sub.add_parser("measure", help="measure D_eff of one model", description="Measure D_eff of one model on a corpus.")
    m.add_argument("model", nargs="?", default=None, help="Hugging Face id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    add_measure_arguments(m)
    m.add_argument("--out", "-o", default=None, help="output folder for result.json (default: runs/<model>)")

    s = sub.add_parser("show", help="print the tables of a saved result", description="Print a saved result without re-running anything.")
    s.add_argument("result", help="result.json or the folder holding it")
    return parser


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """Measurement options shared by every command that measures."""
    p.add_argument("--revision", default=None, help="model revision (branch, tag or commit) on the hub")
    p.add_argument("--corpus", default=None, help="shakespeare (default), a text/JSONL file or folder, or hf:NAME[:CONFIG[:SPLIT]]")
    p.add_argument("--seq-len", type=_int, default=DEFAULTS["seq_len"], help=f"tokens per sequence, BOS included (default {DEFAULTS['seq_len']})")
    p.add_argument("--num-seqs", type=_int, default=DEFAULTS["num_seqs"], help=f"number of sequences (default {DEFAULTS['num_seqs']})")
    p.add_argument("--batch-size", type=_int, default=DEFAULTS["batch_size"], help=f"sequences per forward pass (default {DEFAULTS['batch_size']})")
    p.add_argument("--similarity", choices=("frobenius", "token"), default="frobenius", help="layer similarity (default frobenius)")
    p.add_argument("--include-embedding", action="store_true", help="analyse S_0..S_L (N = L+1) instead of S_1..S_L")
    p.add_argument("--views", default="default", help="comma-separated views, e.g. default,drop-pos0,token-norm,top1pc, or 'paper'")
    p.add_argument("--pc-estimate", choices=("calibration", "exact"), default="calibration", help="how center/top-k PC views fit (default: first batch)")
    p.add_argument("--bootstrap", type=_int, default=DEFAULTS["bootstrap"], help=f"bootstrap resamples over sequences, 0 to skip (default {DEFAULTS['bootstrap']})")
    p.add_argument("--seed", type=_int, default=DEFAULTS["seed"], help="seed for sequence sampling and bootstrap (default 0)")
    p.add_argument("--dtype", default=None, help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)")
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--device-map", default=None, help="'auto' to spread a large model over the GPUs (accelerate)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow the model repository's own code to run")
    p.add_argument("--no-bos", dest="add_bos", action="store_false", help="do not prepend the BOS token to each sequence")
    p.add_argument("--blocks-path", default=None, help="attribute path of the decoder blocks, for models outside the registry")
    p.add_argument("--embedding-path", default=None, help="attribute path of the token embedding, with --blocks-path")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")


def measure_kwargs(args: argparse.Namespace) -> dict:
    return {
        "revision": args.revision,
        "seq_len": args.seq_len,
        "num_seqs": args.num_seqs,
        "batch_size": args.batch_size,
        "similarity": args.similarity,
        "include_embedding": args.include_embedding,
        "bootstrap": args.bootstrap,
        "seed": args.seed,
        "dtype": args.dtype,
        "device": args.device,
        "device_map": args.device_map,
        "trust_remote_code": args.trust_remote_code,
        "views": args.views,
        "pc_estimate": args.pc_estimate,
        "add_bos": args.add_bos,
        "blocks_path": args.blocks_path,
        "embedding_path": args.embedding_path,
        "progress": args.progress,
    }


def default_out(model: str | None) -> Path:
    """``runs/<model>``: a slug that can never leave ``runs/``.

    >>> default_out("EleutherAI/pythia-70m").as_posix()
    'runs/EleutherAI--pythia-70m'
    """
    name = "smollm2-135m-instruct" if model is None else Path(str(model)).name if str(model).endswith(".gguf") else str(model)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip(".-") or "model"
    return Path("runs") / slug


def ensure_writable(folder: Path) -> Path:
    """Fail before an hour of measuring, not after it."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".effdepth-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EffdepthError(f"cannot write to output folder {folder}: {exc.strerror}; choose another --out") from None
    return folder


def cmd_measure(args) -> int:
    from .measure import measure
    from .report.table import headline, references_table, summary_table

    out = ensure_writable(Path(args.out) if args.out else default_out(args.model))
    result = measure(args.model, args.corpus, **measure_kwargs(args))
    path = result.save(out)
    print(headline(result))
    print()
    print(summary_table(result))
    print()
    print(references_table(result))
    print(f"\nwrote {path}")
    return 0


def cmd_show(args) -> int:
    from .report.table import headline, references_table, summary_table
    from .result import load

    result = load(args.result)
    print(headline(result))
    print()
    print(summary_table(result))
    print()
    print(references_table(result))
    return 0


COMMANDS = {"measure": cmd_measure, "show": cmd_show}


def main(argv=None) -> int:
    """Entry point; returns the exit status (0, 2 for a user error, 130 on Ctrl-C)."""
    try:
        args = build_parser().parse_args(argv)
        if args.command is None:
            build_parser().print_help()
            return 2
        return COMMANDS[args.command](args)
    except EffdepthError as exc:
        print(f"effdepth: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("effdepth: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: one line, the traceback on request
        if os.environ.get("EFFDEPTH_DEBUG"):
            traceback.print_exc()
        else:
            print(
                f"effdepth: internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:300]} "
                "(set EFFDEPTH_DEBUG=1 for the traceback, and please report it)",
                file=sys.stderr,
            )
        return 1


if __name__ == "__main__":
    sys.exit(main())
