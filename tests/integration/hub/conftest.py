"""The local hub for the Hugging Face tests: one server and one set of repositories per session; each
test gets a fresh machine (its own caches) that runs effdepth commands in processes of their own.

The commands run as subprocesses because huggingface_hub, transformers and datasets read
``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` at import: only a process started with them set talks to the
local server the way it would talk to the hub.
"""

from __future__ import annotations

import importlib.util
from concurrent.futures import ThreadPoolExecutor

import pytest
from hubrepos import build
from hubtools import MODELS, PAPER, REPO, SMALL, Machine, ok
from localhub import LocalHub


@pytest.fixture(scope="session")
def hub_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("hub-repositories")
    facts = build(root)
    return root, facts


@pytest.fixture(scope="session")
def session_hub(hub_root):
    server = LocalHub(hub_root[0]).start()
    yield server
    server.stop()


@pytest.fixture
def hub(session_hub):
    """The session's server, answering, with no faults and an empty request log (also after a test that stopped it)."""
    session_hub.start()
    session_hub.clear()
    yield session_hub
    session_hub.start()
    session_hub.clear()


@pytest.fixture(scope="session")
def documents(hub_root):
    """The non-blank documents of the dataset's ``sample-10BT`` split, in stream order."""
    return hub_root[1]["documents"]


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text("The mitochondria is the organelle in which the cell turns food into usable energy. " * 40)
    return str(path)


@pytest.fixture
def machine(tmp_path, hub):
    return Machine(tmp_path / "machine", hub)


# --------------------------------------------------------------------------- online runs, once per session
# The tests of each command check them; the offline test compares its numbers with them. They run side
# by side (each on a machine of its own), so the request log they leave holds all three.


@pytest.fixture(scope="session")
def online_runs(session_hub, tmp_path_factory, corpus_file):
    """``{name: (output folder, process, requests of all three, machine)}`` for ``paper`` (``measure REPO
    --protocol paper``, the dataset streamed), ``pythia`` (``trajectory paper-pythia``) and ``ray``
    (``sweep`` of MODELS with ``--executor ray``, a local Ray; only where Ray is installed)."""
    root = tmp_path_factory.mktemp("online")
    runs = {
        "paper": ["measure", REPO, *PAPER, "--out", root / "paper"],
        "pythia": ["trajectory", "paper-pythia", "--corpus", corpus_file, *SMALL, "--out", root / "pythia"],
        "ray": [
            "sweep",
            *MODELS,
            "--executor",
            "ray",
            "--corpus",
            corpus_file,
            *SMALL,
            "--no-report",
            "--out",
            root / "ray",
        ],
    }
    if importlib.util.find_spec("ray") is None:
        del runs["ray"]
    machines = {name: Machine(root / f"{name}-machine", session_hub) for name in runs}
    session_hub.start()
    session_hub.clear()
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        procs = dict(zip(runs, pool.map(lambda name: machines[name].run(*runs[name], timeout=300), runs)))
    requests = list(session_hub.requests)
    return {name: (root / name, procs[name], requests, machines[name]) for name in runs}


def _online(online_runs, name: str):
    if name not in online_runs:
        pytest.skip(f"the {name} run needs what is not installed here")
    out, proc, requests, machine = online_runs[name]
    return out, ok(proc), requests, machine


@pytest.fixture(scope="session")
def paper_run(online_runs):
    """``measure REPO --protocol paper`` online: ``(folder, process, requests, machine)``."""
    return _online(online_runs, "paper")


@pytest.fixture(scope="session")
def pythia_run(online_runs):
    """``trajectory paper-pythia`` online: ``(folder, process, requests, machine)``."""
    return _online(online_runs, "pythia")


@pytest.fixture(scope="session")
def ray_sweep(online_runs):
    """``sweep`` of MODELS on a local Ray: ``(folder, process, requests, machine)``."""
    return _online(online_runs, "ray")
