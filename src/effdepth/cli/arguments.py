"""Argument groups and helpers shared by the commands: one definition of every measurement flag."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from dataclasses import fields
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions


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


def add_model_argument(p: argparse.ArgumentParser) -> None:
    """The optional positional MODEL of every command that loads one model."""
    p.add_argument("model", nargs="?", default=None, help=MODEL_HELP)


def option_flags(declared) -> tuple:
    """A declared option's spellings on the command line (``--name-with-dashes`` unless declared otherwise)."""
    return declared.metadata["flags"] or ("--" + declared.name.replace("_", "-"),)


def add_option_arguments(p: argparse.ArgumentParser, cls, *, names=None, default=..., help_suffix: str = "") -> None:
    """The flags of the dataclass ``cls``'s options declared for the command line
    (:func:`effdepth.options.option`), in declaration order; ``names`` keeps some of them, ``default``
    sets every one's default (e.g. ``None``: "the saved result's"), ``help_suffix`` ends every help.

    >>> from effdepth.options import AnalysisOptions
    >>> q = Parser(prog="x"); add_option_arguments(q, AnalysisOptions, names=("bootstrap", "pooling"))
    >>> q.parse_args(["--pooling", "none"]).pooling, q.parse_args([]).bootstrap
    ('none', 1000)
    """
    converters = {"int": int_arg, "float": float_arg}
    for f in fields(cls):
        meta = f.metadata
        if not meta.get("cli") or (names is not None and f.name not in names):
            continue
        flags = option_flags(f)
        text = meta["help"] if default is ... else re.sub(r"\s*\(default[^()]*\)", "", meta["help"])
        kwargs = {"dest": f.name, "help": text + help_suffix}
        value = meta["cli_default"] if default is ... else default
        if meta["kind"] == "flag":
            kwargs.update(action="store_true", default=False if value is None and default is ... else value)
        elif meta["kind"] == "no-flag":
            kwargs.update(action="store_false", default=True if default is ... else value)
        else:
            kwargs["default"] = ",".join(value) if isinstance(value, tuple) else value
            if meta["kind"] in converters:
                kwargs["type"] = converters[meta["kind"]]
            if meta["choices"] is not None:
                kwargs["choices"] = tuple(meta["choices"])
            if meta["metavar"] is not None:
                kwargs["metavar"] = meta["metavar"]
        p.add_argument(*flags, **kwargs)


def add_measure_arguments(p: argparse.ArgumentParser) -> None:
    """Every measurement option as a flag, built from its declaration (:mod:`effdepth.options`), and ``--offline``."""
    for cls in (LoadOptions, AnalysisOptions, RunOptions):
        add_option_arguments(p, cls)
    p.add_argument(
        "--offline",
        action="store_true",
        help="read only the local Hugging Face cache (sets HF_HUB_OFFLINE=1); fill it with 'effdepth fetch' where there is internet",
    )


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
    from effdepth.scale.executors import make_executor

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
