"""The option groups several commands share, each declared once.

None of them changes a number: they are left out of a result's options (:class:`~effdepth.options.Options`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.options.declare import option

#: Where many jobs run: here, one at a time, or as Ray tasks (:mod:`effdepth.scale.executors`).
EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class ProgramOptions:
    """The flags of the program itself, before any command."""

    version: bool = option(None, "show effdepth's version and exit", kind="version")


@dataclass(frozen=True)
class OutputOptions:
    """Where a command writes, and what. Each command says its own default folder (``add_output_arguments``)."""

    out: str | None = option(None, "output folder", flags=("--out", "-o"), metavar="DIR")
    figures: bool = option(True, "do not write the figures (PNG and PDF)", flags=("--no-figures",), kind="no-flag")
    resume: str | None = option(None, "continue an interrupted run from its output folder", metavar="DIR")


@dataclass(frozen=True)
class HubOptions:
    """Whether a command may reach the Hugging Face hub."""

    offline: bool = option(
        False,
        "read only the local Hugging Face cache (sets HF_HUB_OFFLINE=1); fill it with 'effdepth fetch' where "
        "there is internet",
        kind="flag",
    )


@dataclass(frozen=True)
class ExecutorOptions:
    """Where the jobs of a sweep or a trajectory run."""

    executor: str = option(
        "local", "local: one model at a time here (default); ray: each model a Ray task", choices=EXECUTORS
    )
    ray_address: str | None = option(
        None, "Ray cluster to join (ray://HEAD:10001, HEAD:6379 or auto; default: start Ray here)"
    )
    gpus_per_task: float = option(0.0, "GPUs each Ray task reserves (default {default})", kind="float")
    cpus_per_task: float = option(1.0, "CPUs each Ray task reserves (default {default})", kind="float")


def _documents(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise EffdepthError(f"--documents {text!r} is not a positive whole number; e.g. --documents 10500")
    return int(text)


@dataclass(frozen=True)
class FetchOptions:
    """What ``effdepth fetch`` downloads into the Hugging Face cache."""

    models: tuple = option(
        (),
        "suite name (effdepth suite list), suite file, model id, or trajectory preset (paper-olmo2, "
        "paper-pythia: its checkpoints and the branch list, for an offline trajectory)",
        flags=(),
        nargs="*",
        metavar="SUITE_OR_MODEL",
        cli_default=None,
    )
    revision: tuple = option(
        (), "revision to fetch (repeatable; default main; a suite's own revision wins)", kind="append"
    )
    revisions: str | None = option(
        None, "checkpoints as for trajectory: auto, every:K, log:K or a comma-separated list"
    )
    corpus: tuple = option(
        (), "hf:NAME[:CONFIG[:SPLIT]] or shakespeare (repeatable; default shakespeare)", kind="append"
    )
    documents: int | None = option(
        None,
        "stream only the first N documents of each hf: corpus into effdepth's cache (what passage mode "
        "reads, in order) instead of downloading the whole dataset",
        kind=_documents,
        metavar="N",
    )
    protocol: str | None = option(
        None,
        "also fetch the protocol's corpus: paper = the first FineWeb-Edu documents its 10,000 passages "
        "come from (with a margin for documents too short to be a passage)",
        metavar="NAME",
    )
    cache_dir: str | None = option(None, "Hugging Face cache to fill (default: HF_HUB_CACHE, ~/.cache/huggingface/hub)")
    dry_run: bool = option(False, "list what would be fetched and its size; download nothing", kind="flag")


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
