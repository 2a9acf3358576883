"""The pure parts of effdepth.models.hub: file selection, cache reading, the offline switch, the probe, messages."""

import hashlib
import json
import os
import socket
import time

import huggingface_hub.constants
import pytest

from effdepth.errors import EffdepthError
from effdepth.models import hub
from effdepth.models.hub import network
from effdepth.numerics.hsic_plan import byte_size
from effdepth.scale import fetch as fetching

PYTHIA = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "pytorch_model.bin",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "README.md",
    ".gitattributes",
]
SHARDED = [
    "config.json",
    "model.safetensors.index.json",
    "model-00001-of-00003.safetensors",
    "model-00002-of-00003.safetensors",
    "model-00003-of-00003.safetensors",
    "consolidated.safetensors",
    "pytorch_model.bin.index.json",
    "pytorch_model-00001-of-00002.bin",
    "pytorch_model-00002-of-00002.bin",
    "tokenizer.model",
    "original/params.json",
    "additional_chat_templates/rag.jinja",
    "additional_chat_templates/deep/x.jinja",
    "modeling_custom.py",
]


@pytest.fixture(autouse=True)
def clean_state():
    hub.forget_probe()
    with hub.offline(False):  # online unless a test says otherwise, whatever the caller's environment
        yield
    hub.forget_probe()


def test_needed_files_single_safetensors_never_pickle():
    assert hub.needed_files(PYTHIA) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert hub.needed_files(PYTHIA, allow_pickle=True) == hub.needed_files(PYTHIA)  # safetensors win


def test_needed_files_sharded_and_templates_and_code():
    files = hub.needed_files(SHARDED)
    assert files == [
        "additional_chat_templates/rag.jinja",
        "config.json",
        "model-00001-of-00003.safetensors",
        "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors",
        "model.safetensors.index.json",
        "tokenizer.model",
    ]
    assert "modeling_custom.py" in hub.needed_files(SHARDED, trust_remote_code=True)


def test_pickle_only_repositories():
    names = ["config.json", "pytorch_model.bin", "training_args.bin", "tokenizer.json"]
    assert hub.weight_files(names) == [] and hub.pickle_only(names)
    assert hub.needed_files(names, allow_pickle=True) == ["config.json", "pytorch_model.bin", "tokenizer.json"]
    sharded = [
        "config.json",
        "pytorch_model.bin.index.json",
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
    ]
    assert hub.weight_files(sharded, allow_pickle=True) == sharded[1:]


def test_fetch_command_quotes_and_orders():
    assert (
        hub.fetch_command(["EleutherAI/pythia-70m"], revisions=["step1000", "main"])
        == "effdepth fetch EleutherAI/pythia-70m --revision step1000"
    )
    assert (
        hub.fetch_command(["my suite.yaml"], corpora=["hf:wiki:raw:test"], trust_remote_code=True)
        == "effdepth fetch 'my suite.yaml' --corpus hf:wiki:raw:test --trust-remote-code"
    )
    assert hub.fetch_command(corpora=["shakespeare"]) == "effdepth fetch --corpus shakespeare"


def test_parse_hf_corpus():
    assert hub.parse_hf_corpus("hf:a/b::validation") == ("a/b", None, "validation")
    assert hub.parse_hf_corpus("hf:") is None and hub.parse_hf_corpus("hf:a:b:c:d") is None
    assert hub.parse_hf_corpus(None) is None and hub.parse_hf_corpus(["hf:x"]) is None


def test_sizes():
    assert [byte_size(n, "decimal") for n in (999, 1000, 12_345_678_901, 2 * 10**12)] == [
        "999 B",
        "1.0 kB",
        "12.3 GB",
        "2.0 TB",
    ]
    assert fetching.format_total([None, None]) == ">= 0 B"


def test_offline_switch_sets_environment_and_library_flags(monkeypatch):
    import datasets.config

    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)
    assert not hub.is_offline()
    with hub.offline():
        assert os.environ["HF_HUB_OFFLINE"] == os.environ["HF_DATASETS_OFFLINE"] == "1"
        assert huggingface_hub.constants.HF_HUB_OFFLINE is True and huggingface_hub.is_offline_mode()
        assert datasets.config.HF_HUB_OFFLINE is True and hub.is_offline()
    assert "HF_HUB_OFFLINE" not in os.environ and huggingface_hub.constants.HF_HUB_OFFLINE is False
    assert datasets.config.HF_HUB_OFFLINE is False
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")  # huggingface_hub honours it too
    assert hub.is_offline()


def test_probe_refused_and_unresolvable_are_fast(monkeypatch):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    started = time.perf_counter()
    assert hub.probe("127.0.0.1", port) == f"connection to 127.0.0.1:{port} refused"
    reason = hub.probe("no-such-host.invalid", 443, timeout=2)
    assert reason.startswith("name resolution of no-such-host.invalid") and time.perf_counter() - started < 5


def test_probe_succeeds_on_a_listening_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        assert hub.probe("127.0.0.1", server.getsockname()[1]) is None
    finally:
        server.close()


def test_probe_goes_to_the_proxy(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    assert hub.probe_address("https://huggingface.co") == ("proxy.example", 3128, True)
    monkeypatch.setenv("NO_PROXY", "huggingface.co")
    assert hub.probe_address("https://huggingface.co") == ("huggingface.co", 443, False)


def test_hub_problem_is_probed_once(monkeypatch):
    calls = []
    monkeypatch.setattr(network, "probe", lambda host, port, timeout: calls.append(host) or "nope")
    assert hub.hub_problem() == hub.hub_problem() == "nope" and len(calls) == 1


def test_network_errors_are_told_apart():
    class ConnectError(Exception):  # httpx / httpx2 name their errors so
        pass

    assert hub.is_network_error(ConnectError()) and hub.is_network_error(socket.gaierror())
    assert not hub.is_network_error(KeyError()) and not hub.is_network_error(OSError("Repository Not Found"))


def _snapshot(cache, repo, branch, files: dict, commit="c" * 40):
    folder = hub.repo_folder(repo, cache)
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (folder / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    (folder / "refs").mkdir(exist_ok=True)
    (folder / "refs" / branch).write_text(commit)
    return snap


def test_model_missing_reads_the_cache_layout(tmp_path):
    index = json.dumps(
        {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    )
    snap = _snapshot(
        tmp_path,
        "o/m",
        "main",
        {
            "config.json": b"{}",
            "model.safetensors.index.json": index.encode(),
            "model-00001-of-00002.safetensors": b"w1",
        },
    )
    assert hub.model_missing("o/m", cache_dir=tmp_path) == "1 of 2 weight shards not cached"
    assert hub.model_missing("o/m", "step1", cache_dir=tmp_path) == "revision step1 not cached"
    (snap / "model-00002-of-00002.safetensors").write_bytes(b"w2")
    assert hub.model_missing("o/m", cache_dir=tmp_path) is None
    assert hub.model_missing("o/m", "c" * 40, cache_dir=tmp_path) is None  # a commit hash needs no ref
    blob = (snap / "config.json").resolve()
    blob.unlink()  # a dangling link is not a file
    assert hub.model_missing("o/m", cache_dir=tmp_path) == "config.json not cached"


def test_cached_branches_and_weight_shas(tmp_path):
    _snapshot(tmp_path, "o/m", "step1", {"config.json": b"{}", "model.safetensors": b"weights"})
    (hub.repo_folder("o/m", tmp_path) / "refs" / "pr").mkdir()
    (hub.repo_folder("o/m", tmp_path) / "refs" / "pr" / "1").write_text("d" * 40)
    assert hub.cached_branches("o/m", tmp_path) == ({"step1": "c" * 40}, False)
    assert hub.cached_weight_shas("o/m", "step1", tmp_path) == [
        ("model.safetensors", hashlib.sha256(b"weights").hexdigest())
    ]
    hub.record_branches("o/m", {"step1": "c" * 40, "step2": "e" * 40}, tmp_path)
    assert hub.cached_branches("o/m", tmp_path) == ({"step1": "c" * 40, "step2": "e" * 40}, True)


def test_check_available_offline_lists_all_missing(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    _snapshot(tmp_path, "o/m", "main", {"config.json": b"{}", "model.safetensors": b"w"})
    needs = [
        hub.Need("model", "o/m"),
        hub.Need("model", "o/m", "step9"),
        hub.Need("model", "x/y"),
        hub.Need("corpus", "notes.txt"),
    ]
    with hub.offline():
        with pytest.raises(EffdepthError) as info:
            hub.check_available(needs, fix="effdepth fetch s")
    message = str(info.value)
    assert message.startswith(
        "could not load model 'o/m' at revision 'step9' (revision step9 not cached), "
        "model 'x/y' (not cached) [2 of 4 needed] offline"
    )
    assert (
        message.endswith("run `effdepth fetch s` on a machine with internet (a login node) first")
        and "\n" not in message
    )


def test_check_available_online_does_not_probe_for_local_inputs(monkeypatch):
    monkeypatch.setattr(network, "probe", lambda *a, **k: pytest.fail("probed for local inputs"))
    hub.check_available([hub.Need("corpus", "notes.txt"), hub.Need("corpus", ["texts"])], fix="effdepth fetch")


def test_unreachable_hub_with_cached_inputs_switches_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(network, "probe", lambda *a, **k: "connection to h:443 refused")
    _snapshot(tmp_path, "o/m", "main", {"config.json": b"{}", "model.safetensors": b"w"})
    with hub.offline(False):
        hub.check_available([hub.Need("model", "o/m")], fix="effdepth fetch o/m")
        assert hub.is_offline()
    assert "reading the local cache only" in capsys.readouterr().err


def test_fetch_table_shape():
    plan = fetching.FetchPlan(
        [
            fetching.FetchItem(
                "model",
                "o/m",
                "step1",
                "a" * 40,
                [("config.json", 10), ("model.safetensors", 2000)],
                ["model.safetensors"],
                2010,
                2000,
            ),
            fetching.FetchItem("model", "x/y", "main", status="error", problem="gated: accept its terms"),
        ],
        hub.hub_cache("/c"),
    )
    lines = plan.table().splitlines()
    assert lines[0].split() == ["kind", "name", "revision", "commit", "files", "size", "to", "fetch", "status"]
    assert lines[2].split()[:7] == ["model", "o/m", "step1", "aaaaaaaaaa", "2", "2.0", "kB"]
    assert "error: gated: accept its terms" in lines[3] and lines[-1].split()[:2] == ["total", "2"]
    assert len(plan.problems) == 1
