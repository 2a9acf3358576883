"""Argument groups and helpers shared by the commands: one definition of every measurement flag."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path

from ..data.passages import BOS_CHOICES, SPLITS
from ..errors import EffdepthError
from ..numerics.fits import PC_ESTIMATES
from ..numerics.similarities import PASSAGE, TOKEN, all_similarities, specs
from ..options import DEFAULTS, PASSAGE_DEFAULTS, POOLINGS, PROTOCOLS, STATES, RunOptions


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, not usage + message, and which keeps
    the flags added to it (``option_actions``: argparse itself lists them only privately).

    >>> p = Parser(prog="x"); _ = p.add_argument("--seq-len", type=int, default=256)
    >>> [a.dest for a in p.option_actions]
    ['help', 'seq_len']
    """

    def __init__(self, *args, **kwargs):
        self.option_actions: list = []  # before argparse adds --help through add_argument
        # Whole flags only: `--num-seq 100` must not pass for --num-seqs (a resume compares the
        # flags typed with the saved ones by their names).
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        action = super().add_argument(*args, **kwargs)
        if action.option_strings:
            self.option_actions.append(action)
        return action

    def error(self, message):
        raise EffdepthError(f"{self.prog}: {message} (see {self.prog} --help)")


def int_arg(text: str) -> int:
    """``type=`` for integer flags, with a readable error.

    >>> int_arg("12")
    12
    """
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def float_arg(text: str) -> float:
    """``type=`` for number flags, with a readable error.

    >>> float_arg("0.5")
    0.5
    """
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


MODEL_HELP = (
    "Hugging Face id, local folder, .gguf file, or an embedded model by name: smollm2-135m "
    "(SmolLM2-135M-Instruct, the default) or gemma-3-270m (Gemma-3-270m base)"
)


def similarity_choices(mode: str) -> str:
    """A mode's similarities as ``--similarity``'s help lists them: its default and companions said.

    >>> similarity_choices("passage")
    'cka (default, always with cka-debiased beside it), cka-debiased, cosine'
    """

    def choice(spec) -> str:
        notes = (["default"] if spec.default else []) + [f"always with {c} beside it" for c in spec.companions]
        return f"{spec.name} ({', '.join(notes)})" if notes else spec.name

    return ", ".join(choice(spec) for spec in specs(mode))


def add_model_argument(p: argparse.ArgumentParser) -> None:
    """The optional positional MODEL of every command that loads one model."""
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """Measurement options shared by every command that measures (see :class:`effdepth.options.Options`)."""
    p.add_argument("--revision", default=None, help="model revision (branch, tag or commit) on the hub")
    p.add_argument(
        "--tokenizer",
        default=None,
        metavar="PATH_OR_ID",
        help="tokenizer for text corpora when the model has none (or another): a folder, a Hugging Face id or a .gguf file",
    )
    p.add_argument(
        "--corpus", default=None, help="shakespeare (default), a text/JSONL file or folder, or hf:NAME[:CONFIG[:SPLIT]]"
    )
    p.add_argument(
        "--protocol",
        default=None,
        choices=tuple(PROTOCOLS),
        help="a named set of settings: paper = 10,000 FineWeb-Edu passages of <= 512 tokens, bfloat16, "
        "--states hidden, cka (flags given beside it win, and are recorded)",
    )
    p.add_argument(
        "--pooling",
        default=None,
        choices=POOLINGS,
        help="mean (default): passage mode, each layer mean-pooled per passage and compared across passages "
        "(the paper's protocol); none: token mode, compared across the tokens of each sequence",
    )
    p.add_argument(
        "--seq-len",
        type=int_arg,
        default=None,
        help=f"tokens per passage at most (passage mode, default {PASSAGE_DEFAULTS['seq_len']}) or per sequence "
        f"(token mode, default {DEFAULTS['seq_len']}), special tokens included",
    )
    p.add_argument(
        "--num-seqs",
        "--num-passages",
        dest="num_seqs",
        type=int_arg,
        default=None,
        help=f"passages (default {PASSAGE_DEFAULTS['num_seqs']}) or token-mode sequences (default {DEFAULTS['num_seqs']})",
    )
    p.add_argument(
        "--batch-size",
        type=int_arg,
        default=DEFAULTS["batch_size"],
        help=f"sequences per forward pass (default {DEFAULTS['batch_size']})",
    )
    p.add_argument(
        "--states",
        default=None,
        choices=STATES,
        help="blocks (default): hooks on the decoder blocks, before the final norm; hidden: transformers' "
        "hidden_states[1:], whose last entry is the final norm's output (the paper's convention; passage mode)",
    )
    p.add_argument(
        "--bos",
        default=None,
        choices=BOS_CHOICES,
        help="passage mode: special tokens as the tokenizer adds them (auto, default), BOS always first, or none",
    )
    p.add_argument(
        "--passage-split",
        default=None,
        choices=SPLITS,
        help="windows (default): each document cut into consecutive windows of exactly --seq-len tokens "
        "(equal lengths: no first-token x length confound); paragraphs: documents cut at blank lines, "
        "packed into passages of at most --seq-len; document: each document's first tokens (--protocol "
        "paper)",
    )
    p.add_argument(
        "--similarity",
        default=None,
        metavar="NAME[,NAME...]|all",
        help=f"passage mode: {similarity_choices(PASSAGE)}, or all; token mode: {similarity_choices(TOKEN)}, a "
        f"comma list (the first is the primary), or all ({', '.join(all_similarities(TOKEN))}). Every one "
        "comes from the same forward passes",
    )
    p.add_argument(
        "--bootstrap-units",
        type=int_arg,
        default=None,
        metavar="G",
        help="passage mode: passages are resampled in G blocks of consecutive passages, so each resample "
        "costs G^2 per layer pair whatever N (default 128; one passage per block when N <= G)",
    )
    p.add_argument(
        "--surrogate-seqs",
        default=None,
        metavar="K|all",
        help="the first K sequences of the corpus feed the surrogate streams of the calibrated references "
        "(default all; 0 to skip)",
    )
    p.add_argument(
        "--max-memory",
        default="4GiB",
        metavar="SIZE",
        help="memory the analysis may hold, e.g. 64GiB (default 4GiB): passage mode's Gram tiles, unit sums "
        "and the layers it keeps (more memory, fewer passes over the pooled vectors; the same numbers); "
        "token mode's cka-full cross-products",
    )
    p.add_argument("--include-embedding", action="store_true", help="analyse S_0..S_L (N = L+1) instead of S_1..S_L")
    p.add_argument(
        "--views",
        default="default",
        help="comma-separated views, or 'paper'; passage mode: default, drop-pos0, drop-bos, length, "
        "token-norm, top{k}pc and their '+' compositions (paper = default,drop-pos0,token-norm,top1pc,"
        "top3pc; drop-pos0 and length are measured in every result, as controls); token mode: "
        "default, drop-pos0, pos0-only, token-norm, center, top{k}pc[-shared]",
    )
    p.add_argument(
        "--pc-estimate",
        choices=PC_ESTIMATES,
        default="calibration",
        help="how center/top-k PC views fit, in a forward pass before measuring: calibration (default) on the first sequences holding >= 8 sequences and 2048 tokens, or exact on every sequence",
    )
    p.add_argument(
        "--bootstrap",
        type=int_arg,
        default=DEFAULTS["bootstrap"],
        help=f"bootstrap resamples over passages (token mode: sequences), 0 to skip (default {DEFAULTS['bootstrap']})",
    )
    p.add_argument(
        "--seed", type=int_arg, default=DEFAULTS["seed"], help="seed for sequence sampling and bootstrap (default 0)"
    )
    p.add_argument(
        "--dtype", default=None, help="float32, bfloat16 or float16 (default: float32 on CPU, bfloat16 on CUDA)"
    )
    p.add_argument("--device", default=None, help="cpu, cuda or cuda:N (default: cuda when available)")
    p.add_argument("--device-map", default=None, help="'auto' to spread a large model over the GPUs (accelerate)")
    p.add_argument("--trust-remote-code", action="store_true", help="allow the model repository's own code to run")
    p.add_argument(
        "--allow-pickle", action="store_true", help="allow pickle (.bin) weights; safetensors are required otherwise"
    )
    p.add_argument(
        "--no-bos",
        dest="add_bos",
        action="store_false",
        help="token mode: do not prepend BOS to each sequence (passage mode: the same as --bos never)",
    )
    p.add_argument(
        "--blocks-path", default=None, help="attribute path of the decoder blocks, for models outside the registry"
    )
    p.add_argument("--embedding-path", default=None, help="attribute path of the token embedding, with --blocks-path")
    p.add_argument(
        "--offline",
        action="store_true",
        help="read only the local Hugging Face cache (sets HF_HUB_OFFLINE=1); fill it with 'effdepth fetch' where there is internet",
    )
    p.add_argument(
        "--allow-long", action="store_true", help="allow --seq-len beyond the positions the model's config states"
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")


def add_executor_arguments(p: argparse.ArgumentParser) -> None:
    """Where the jobs of a sweep or trajectory run, and how often they checkpoint."""
    p.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local: one model at a time here (default); ray: each model a Ray task",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        help="Ray cluster to join (ray://HEAD:10001, HEAD:6379 or auto; default: start Ray here)",
    )
    p.add_argument("--gpus-per-task", type=float_arg, default=0.0, help="GPUs each Ray task reserves (default 0)")
    p.add_argument("--cpus-per-task", type=float_arg, default=1.0, help="CPUs each Ray task reserves (default 1)")
    p.add_argument(
        "--checkpoint-every",
        type=float_arg,
        default=30.0,
        metavar="SECONDS",
        help="local executor: save a model's partial statistics this often, and on Ctrl-C/SIGTERM; a rerun continues them (default 30)",
    )


def executor_from_args(args):
    """The executor the flags of :func:`add_executor_arguments` ask for (checked before any work)."""
    from ..executors import make_executor

    return make_executor(
        args.executor, ray_address=args.ray_address, gpus_per_task=args.gpus_per_task, cpus_per_task=args.cpus_per_task
    )


def run_options_from_args(args, **values) -> RunOptions:
    """:class:`~effdepth.options.RunOptions` from ``--no-progress`` and ``--checkpoint-every``.

    >>> run_options_from_args(argparse.Namespace(progress=False, checkpoint_every=5.0)).checkpoint_every_s
    5.0
    """
    return RunOptions(
        progress=getattr(args, "progress", True), checkpoint_every_s=getattr(args, "checkpoint_every", 30.0), **values
    )


def default_out(model: str | None) -> Path:
    """``runs/<model>``: a slug that can never leave ``runs/``.

    >>> default_out("EleutherAI/pythia-70m").as_posix()
    'runs/EleutherAI--pythia-70m'
    """
    name = (
        "smollm2-135m-instruct"
        if model is None
        else Path(str(model)).name
        if str(model).endswith(".gguf")
        else str(model)
    )
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", name).strip(".-") or "model"
    return Path("runs") / slug


def ensure_writable(folder: Path) -> Path:
    """Fail before an hour of measuring, not after it.

    >>> import tempfile
    >>> ensure_writable(Path(tempfile.mkdtemp()) / "out").is_dir()
    True
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".effdepth-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise EffdepthError(f"cannot write to output folder {folder}: {exc.strerror}; choose another --out") from None
    return folder


@contextlib.contextmanager
def output_folder(folder: Path):
    """:func:`ensure_writable`, and when the block fails, remove the folders it created that are
    still empty: a run that fails before writing anything leaves no empty output folder behind.

    >>> import tempfile
    >>> out = Path(tempfile.mkdtemp()) / "runs" / "x"
    >>> try:
    ...     with output_folder(out):
    ...         raise EffdepthError("the model did not load")
    ... except EffdepthError:
    ...     pass
    >>> out.exists(), out.parent.exists()
    (False, False)
    """
    created = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    ensure_writable(folder)
    try:
        yield folder
    except BaseException:
        for made in created:
            try:
                made.rmdir()  # only an empty folder: anything written (a checkpoint, a result) stays
            except OSError:
                break
        raise


def log_line(line: str) -> None:
    """Progress lines of sweeps and trajectories, flushed at once (they may run for hours).

    A reader that leaves (``effdepth sweep ... | head -1``) stops the lines, not the run: stdout
    then goes to /dev/null and the sweep writes every result as it would have.
    """
    try:
        print(line, flush=True)
    except BrokenPipeError:
        silence_stdout()


def silence_stdout() -> None:
    """Point stdout at /dev/null so that no later write (nor Python's exit-time flush) fails on a
    closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
