"""What a result needs to be traced: library versions, code version, machine."""

from __future__ import annotations

import platform
import subprocess
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

from effdepth.results.version import __version__


def code_version() -> dict:
    """effdepth's version and, when run from a git checkout, its commit (and whether it was modified)."""
    out = {"effdepth": __version__, "git_commit": None, "git_dirty": None}
    root = Path(__file__).resolve().parents[3]  # src/effdepth/results/provenance.py -> the checkout

    def git(*args) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()

    if (root / ".git").exists():
        try:
            commit, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
            out.update(git_commit=commit or None, git_dirty=bool(dirty))
        except (OSError, subprocess.SubprocessError):
            pass
    return out


def library_versions() -> dict:
    names = ("torch", "transformers", "numpy", "gguf", "accelerate", "datasets")
    return {"python": sys.version.split()[0], **{name: package_version(name) for name in names}}


def package_version(name: str) -> str | None:
    """The installed version of the distribution ``name``; ``None`` when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def machine() -> dict:
    import torch

    out = {"platform": platform.platform(), "cpu_threads": torch.get_num_threads()}
    if torch.cuda.is_available():
        out["cuda"] = torch.version.cuda
        out["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return out


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def corpus_record(passages) -> dict:
    """What a result records of its passages (:class:`~effdepth.data.passages.Passages`): the corpus, the
    options that cut it, the tokenizer, and the digests of the passages' tokens and texts."""
    return {"name": passages.name, "sha256": passages.sha256, **passages.info}


def provenance_record(
    *, model: dict | None = None, passages=None, started: float | None = None, saved: dict | None = None, **facts
) -> dict:
    """The provenance record of every result, study and experiment: ``model``, ``passages`` (corpus and tokens
    measured), code version, libraries, machine, when, seconds since ``started`` (``time.perf_counter()``),
    then ``facts``. ``saved``: a saved result's record, analysed again: kept whole, with when, which code
    and ``facts`` (what changed) under ``analysed``.

    >>> r = provenance_record(model={"id": "m"}, tokens_measured=12)
    >>> list(r)[:2], r["tokens_measured"], "python" in r["libraries"]
    (['model', 'code'], 12, True)
    >>> list(provenance_record(saved=r, changes={"bootstrap": 10})["analysed"])
    ['created', 'code', 'changes']
    """
    if saved is not None:
        return {**saved, "analysed": {"created": now(), "code": code_version(), **facts}}
    record = {} if model is None else {"model": model}
    if passages is not None:
        record["corpus"] = corpus_record(passages)
        facts = {"tokens_measured": passages.tokens, **facts}
    record.update(code=code_version(), libraries=library_versions(), machine=machine(), created=now())
    if started is not None:
        record["elapsed_s"] = round(time.perf_counter() - started, 3)
    return {**record, **facts}
