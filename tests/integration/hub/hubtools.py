"""Helpers of the local-hub tests: a user's machine (its caches, the commands it runs) and checks of
what the commands left behind. Imported by name (``from hubtools import ...``): conftest.py files
share their module name."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from localhub import LocalHub

import effdepth

SRC = str(Path(effdepth.__file__).resolve().parents[1])
#: What every measurement here uses: tiny passages, few resamples, no figures.
SMALL = ["--seq-len", "16", "--num-seqs", "8", "--bootstrap", "20", "--no-progress", "--no-figures"]
#: --protocol paper with fewer and shorter passages.
PAPER = [
    "--protocol",
    "paper",
    "--num-seqs",
    "8",
    "--seq-len",
    "32",
    "--bootstrap",
    "20",
    "--no-progress",
    "--no-figures",
]
PAPER_CORPUS = "hf:HuggingFaceFW/fineweb-edu:sample-10BT:train"
#: The model of the measure and fetch tests, and the two models of the sweeps.
REPO = "EleutherAI/pythia-160m"
MODELS = [REPO, "allenai/OLMo-2-1124-13B"]
#: The variables that would point a command elsewhere than the local hub and the test's own caches.
_FOREIGN = (
    "HF_HUB_OFFLINE",
    "HF_DATASETS_OFFLINE",
    "TRANSFORMERS_OFFLINE",
    "HF_HUB_CACHE",
    "HF_DATASETS_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "TRANSFORMERS_CACHE",
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_TOKEN_PATH",
    "HF_ENDPOINT",
    "EFFDEPTH_CACHE",
    "RAY_ADDRESS",
)


@dataclass
class Machine:
    """A user's machine: its own Hugging Face home and effdepth cache, and the hub it talks to."""

    home: Path
    hub: LocalHub

    @property
    def hub_cache(self) -> Path:
        return self.home / "hf" / "hub"

    @property
    def effdepth_cache(self) -> Path:
        return self.home / "effdepth-cache"

    def env(self, **extra) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in _FOREIGN and "proxy" not in k.lower()}
        env.update(
            HF_ENDPOINT=self.hub.url,
            HF_HOME=str(self.home / "hf"),
            HF_HUB_DISABLE_XET="1",
            HF_HUB_DISABLE_TELEMETRY="1",
            EFFDEPTH_CACHE=str(self.effdepth_cache),
            TOKENIZERS_PARALLELISM="false",
            RAY_AUTH_MODE="disabled",
            PYTHONPATH=os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p),
        )
        env.update(extra)
        return env

    def run(self, *args, timeout: float = 120, **extra) -> subprocess.CompletedProcess:
        """``effdepth ARGS`` in a process of its own, as a user would type it."""
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "effdepth.cli", *map(str, args)],
            capture_output=True,
            text=True,
            check=False,
            env=self.env(**extra),
            timeout=timeout,
        )
        proc.seconds = time.perf_counter() - started
        return proc

    def run_all(self, commands: list, timeout: float = 120) -> list:
        """Several commands side by side (each is a process of its own), in order of ``commands``."""
        with ThreadPoolExecutor(max_workers=3) as pool:
            return list(pool.map(lambda args: self.run(*args, timeout=timeout), commands))


def one_line(proc) -> str:
    """The command's one error line (nothing else on stderr)."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("effdepth: error: "), proc.stderr
    return lines[0][len("effdepth: error: ") :]


def ok(proc) -> subprocess.CompletedProcess:
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def numbers(folder) -> dict:
    """Every number of a saved result (views and similarities, intervals included) and the tokens it measured."""
    data = json.loads((Path(folder) / "result.json").read_text())
    return {
        "views": data["views"],
        "similarities": data["similarities"],
        "tokens": data["provenance"]["corpus"]["sha256"],
    }


def assert_cache_sound(cache: Path) -> None:
    """No partial download left behind, every snapshot file a complete blob (its sha256 or git id is its name)."""
    cache = Path(cache)
    assert not [p for p in cache.rglob("*.incomplete")], "a partial download was left in the cache"
    for link in cache.glob("*/snapshots/*/**/*"):
        if link.is_dir():
            continue
        assert link.exists(), f"{link} points at no blob"
        blob = link.resolve()
        data = blob.read_bytes()
        if len(blob.name) == 64:
            assert hashlib.sha256(data).hexdigest() == blob.name, f"{link} is not the file the hub served"
        elif len(blob.name) == 40:
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == blob.name, (
                f"{link} is not the hub's file"
            )


def results(out) -> dict:
    """``{key: result folder}`` of a sweep's output."""
    out = Path(out)
    return {p.parent.relative_to(out).as_posix(): p.parent for p in sorted(out.rglob("result.json"))}


def trajectory_rows(out) -> dict:
    """``{revision: (status, D_eff under cka)}`` from a trajectory's ``trajectory.csv``."""
    import pandas as pd

    table = pd.read_csv(Path(out) / "trajectory.csv")
    table = table[(table["similarity"] == "cka") | table["similarity"].isna()]
    return {r.revision: (r.status, None if pd.isna(r.D_eff) else r.D_eff) for r in table.itertuples()}


def fetch_table(stdout: str) -> list[dict]:
    """The rows of the table ``effdepth fetch`` prints (columns cut where the header's words start)."""
    lines = stdout.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("kind "))
    header = lines[top]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S+(?: \S+)?(?=\s{2}|$)", header)]
    names = [header[a:b].strip() for a, b in zip(starts, [*starts[1:], None])]
    rows = []
    for line in lines[top + 2 :]:
        if line.startswith("-----"):
            break
        rows.append({n: line[a:b].strip() for n, a, b in zip(names, starts, [*starts[1:], None])})
    return rows
