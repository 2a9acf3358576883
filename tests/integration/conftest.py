"""A local Hugging Face cache, built in the test from tiny models, and a clean hub state per test."""

import huggingface_hub.constants
import pytest

from effdepth.data import byte_tokenizer
from effdepth.models import hub
from effdepth.models.hub import needs as hub_needs
from effdepth.models.tiny import tiny_model


@pytest.fixture(scope="session")
def saved_checkpoints(tmp_path_factory):
    """Two tiny GPT-NeoX (Pythia's architecture) checkpoints with the byte tokenizer: seed 0 and seed 1."""
    root = tmp_path_factory.mktemp("saved")
    out = {}
    for name, seed in (("final", 0), ("early", 1)):
        tiny_model("gpt_neox", seed=seed).save_pretrained(root / name)
        byte_tokenizer().save_pretrained(root / name)
        out[name] = root / name
    return out


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """An empty Hugging Face cache that huggingface_hub, transformers and effdepth use for this test."""
    cache = tmp_path / "hf-cache"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    return cache


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 30)
    return str(path)


@pytest.fixture
def closed_port():
    """A local port nothing listens on: connecting to it is refused at once."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture
def unreachable_hub(monkeypatch, closed_port):
    """The hub's address points at a closed local port (as on a compute node without internet)."""
    endpoint = f"http://127.0.0.1:{closed_port}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    hub.forget_probe()
    return endpoint


@pytest.fixture(autouse=True)
def hub_state():
    """Each test starts online whatever the caller's environment (HF_HUB_OFFLINE=1 included), and
    gets the state it started with back: --offline switches the whole process."""
    hub.forget_probe()
    hub_needs._NOTED.clear()
    with hub.offline(False):
        yield
    hub.forget_probe()
