"""The local hub for the Hugging Face tests: one server and one set of repositories per session; each
test gets a fresh machine (its own caches) that runs effdepth commands in processes of their own.

The commands run as subprocesses because huggingface_hub, transformers and datasets read
``HF_ENDPOINT`` and ``HF_HUB_OFFLINE`` at import: only a process started with them set talks to the
local server the way it would talk to the hub.
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def session_machine(tmp_path_factory, session_hub):
    """One machine for the online runs several tests compare against."""
    return Machine(tmp_path_factory.mktemp("online-machine"), session_hub)



# --------------------------------------------------------------------------- online runs, once per session
# The tests of each command check them; the offline test compares its numbers with them.


def _online(machine, hub, *args, timeout: float = 120):
    hub.start()
    hub.clear()
    proc = ok(machine.run(*args, timeout=timeout))
    return proc, list(hub.requests)


@pytest.fixture(scope="session")
def paper_run(session_machine, session_hub, tmp_path_factory):
    """``measure REPO --protocol paper`` online (the dataset streamed): ``(folder, process, requests)``."""
    out = tmp_path_factory.mktemp("paper-run") / "result"
    return (out, *_online(session_machine, session_hub, "measure", REPO, *PAPER, "--out", out))


@pytest.fixture(scope="session")
def pythia_run(session_machine, session_hub, tmp_path_factory, corpus_file):
    """``trajectory paper-pythia`` online: ``(folder, process, requests)``."""
    out = tmp_path_factory.mktemp("paper-pythia") / "out"
    return (out, *_online(session_machine, session_hub, "trajectory", "paper-pythia", "--corpus", corpus_file, *SMALL,
                          "--out", out))


@pytest.fixture(scope="session")
def ray_sweep(session_hub, tmp_path_factory, corpus_file):
    """``sweep`` of MODELS with ``--executor ray`` (a local Ray) on a machine of its own (the Ray tasks download
    every model): ``(folder, process, requests)``."""
    pytest.importorskip("ray")
    home = tmp_path_factory.mktemp("ray-machine")
    out = home / "out"
    return (out, *_online(Machine(home, session_hub), session_hub, "sweep", *MODELS, "--executor", "ray", "--corpus",
                          corpus_file, *SMALL, "--no-report", "--out", out, timeout=300))
