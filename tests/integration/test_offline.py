"""--offline and HF_HUB_OFFLINE: measure, sweep and trajectory read only a local Hugging Face cache;
what is missing fails in seconds with one line naming the `effdepth fetch` command; and without network
the hub is given up after one probe, not after five retries."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import huggingface_hub
import pytest
from hubcache import add_revision

import effdepth
import effdepth.scale.sweep as sweep_module
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.models import hub
from effdepth.models.hub import network
from effdepth.scale.trajectory import trajectory

REPO = "EleutherAI/pythia-70m"
SMALL = ["--seq-len", "16", "--num-seqs", "4", "--bootstrap", "0", "--no-progress", "--no-figures"]
SRC = str(Path(effdepth.__file__).resolve().parents[1])


@pytest.fixture
def cached_pythia(hf_cache, saved_checkpoints):
    """REPO in the cache: main (seed 0) and branch step100 (seed 1), each with a commit hash."""
    main_commit = add_revision(hf_cache, REPO, saved_checkpoints["final"], branch="main")
    step_commit = add_revision(hf_cache, REPO, saved_checkpoints["early"], branch="step100")
    return {"main": main_commit, "step100": step_commit}


@pytest.fixture
def no_network_calls(monkeypatch):
    """Any HTTP request through huggingface_hub fails the test."""
    from huggingface_hub.utils import _http

    def refuse(request):
        raise AssertionError(f"network request in an offline test: {request.url}")

    monkeypatch.setattr(_http, "hf_request_event_hook", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda *a, **k: pytest.fail("model_info called offline"))


def one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


def test_measure_offline_from_the_cache(cached_pythia, corpus_file, tmp_path, no_network_calls, capsys):
    assert main(["measure", REPO, "--offline", "--corpus", corpus_file, "--out", str(tmp_path / "main"), *SMALL]) == 0
    assert (
        main(
            [
                "measure",
                REPO,
                "--revision",
                "step100",
                "--offline",
                "--corpus",
                corpus_file,
                "--out",
                str(tmp_path / "step"),
                *SMALL,
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "measure",
                REPO,
                "--revision",
                cached_pythia["step100"],
                "--offline",
                "--corpus",
                corpus_file,
                "--out",
                str(tmp_path / "commit"),
                *SMALL,
            ]
        )
        == 0
    )
    assert os.environ["HF_HUB_OFFLINE"] == "1" and huggingface_hub.constants.HF_HUB_OFFLINE is True
    main_r, step_r, commit_r = (effdepth.load(tmp_path / n) for n in ("main", "step", "commit"))
    assert main_r.provenance["model"]["commit"] == cached_pythia["main"]
    assert (
        step_r.provenance["model"]["commit"] == cached_pythia["step100"]
        and step_r.provenance["model"]["revision"] == "step100"
    )
    assert step_r.default.deff != main_r.default.deff  # other weights
    assert commit_r.default.deff == pytest.approx(step_r.default.deff)
    assert "error" not in capsys.readouterr().err


def test_hf_hub_offline_environment_is_honoured(cached_pythia, corpus_file, tmp_path, monkeypatch, no_network_calls):
    # HF_HUB_OFFLINE read by huggingface_hub at import: the flag there, as a fresh process would have it.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    r = effdepth.measure(REPO, corpus_file, revision="step100", seq_len=16, num_seqs=4, bootstrap=0, progress=False)
    assert r.provenance["model"]["commit"] == cached_pythia["step100"]


def test_missing_revision_and_model_fail_fast_naming_fetch(
    cached_pythia, corpus_file, tmp_path, capsys, no_network_calls
):
    started = time.perf_counter()
    code = main(
        [
            "measure",
            REPO,
            "--revision",
            "step999",
            "--offline",
            "--corpus",
            corpus_file,
            "--out",
            str(tmp_path / "o"),
            *SMALL,
        ]
    )
    line = one_line(capsys.readouterr().err)
    assert code == 2 and time.perf_counter() - started < 5
    assert (
        "could not load model 'EleutherAI/pythia-70m' at revision 'step999' (revision step999 not cached) offline"
        in line
    )
    assert "`effdepth fetch EleutherAI/pythia-70m --revision step999`" in line
    code = main(
        ["measure", "acme/absent", "--offline", "--corpus", "hf:acme/texts", "--out", str(tmp_path / "o"), *SMALL]
    )
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "model 'acme/absent' (not cached), corpus 'hf:acme/texts'" in line
    assert "`effdepth fetch acme/absent --corpus hf:acme/texts`" in line


def test_pickle_only_cache_needs_allow_pickle(hf_cache, saved_checkpoints, tmp_path, corpus_file, capsys):
    import torch
    from safetensors.torch import load_file

    folder = tmp_path / "pickled"
    folder.mkdir()
    for f in saved_checkpoints["final"].iterdir():
        if f.suffix != ".safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    torch.save(load_file(saved_checkpoints["final"] / "model.safetensors"), folder / "pytorch_model.bin")
    add_revision(hf_cache, "acme/old", folder, branch="main")
    with hub.offline():
        assert hub.model_missing("acme/old").startswith("only pickle weights cached")
        assert hub.model_missing("acme/old", allow_pickle=True) is None
    assert (
        main(["measure", "acme/old", "--offline", "--corpus", corpus_file, "--out", str(tmp_path / "o"), *SMALL]) == 2
    )
    assert "--allow-pickle" in one_line(capsys.readouterr().err)


def test_sweep_offline_lists_everything_missing_before_measuring(
    cached_pythia, corpus_file, tmp_path, monkeypatch, capsys
):
    suite = tmp_path / "mine.yaml"
    suite.write_text(
        f"name: mine\nmodels:\n  - {{id: {REPO}}}\n  - {{id: {REPO}, revision: step100}}\n"
        f"  - {{id: {REPO}, revision: step200}}\n  - {{id: acme/absent}}\n  - tiny:gpt2\n"
    )
    monkeypatch.setattr(sweep_module, "measure_job", lambda payload: pytest.fail("measured before the cache check"))
    started = time.perf_counter()
    code = main(["sweep", str(suite), "--offline", "--corpus", corpus_file, "--out", str(tmp_path / "o"), *SMALL[:-1]])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and time.perf_counter() - started < 5
    assert (
        "model 'EleutherAI/pythia-70m' at revision 'step200' (revision step200 not cached), model 'acme/absent' (not cached) "
        "[2 of 4 needed]"
    ) in line
    assert f"`effdepth fetch {suite}`" in line


def test_sweep_offline_measures_from_the_cache(cached_pythia, corpus_file, tmp_path, no_network_calls):
    out = tmp_path / "o"
    assert (
        main(
            [
                "sweep",
                REPO,
                "--revision",
                "step100",
                "--offline",
                "--corpus",
                corpus_file,
                "--out",
                str(out),
                *SMALL[:-1],
                "--no-report",
            ]
        )
        == 0
    )
    (result,) = list(out.rglob("result.json"))
    assert json.loads(result.read_text())["provenance"]["model"]["commit"] == cached_pythia["step100"]


def test_trajectory_offline_from_recorded_branches(
    cached_pythia, corpus_file, tmp_path, hf_cache, saved_checkpoints, no_network_calls, monkeypatch
):
    monkeypatch.setattr(huggingface_hub, "list_repo_refs", lambda *a, **k: pytest.fail("listed the hub offline"))
    # step200 has the same weights as step100 (same blobs): flagged from the cache's blob names.
    add_revision(hf_cache, REPO, saved_checkpoints["early"], branch="step200")
    hub.record_branches(
        REPO,
        {"main": cached_pythia["main"], "step100": cached_pythia["step100"], "step200": "f" * 40, "step300": "e" * 40},
    )
    out = tmp_path / "t"
    code = main(
        [
            "trajectory",
            REPO,
            "--revisions",
            "step100,step200",
            "--offline",
            "--corpus",
            corpus_file,
            "--out",
            str(out),
            *SMALL,
        ]
    )
    assert code == 0
    summary = json.loads((out / "trajectory.json").read_text())
    assert summary["duplicates"] == {"step200": "step100"}
    # every:2 of the recorded list (step100, step200, step300, main) asks for step300, which is not cached.
    with pytest.raises(EffdepthError, match=r"step300.*`effdepth fetch EleutherAI/pythia-70m --revisions every:2`"):
        trajectory(REPO, tmp_path / "t2", revisions="every:2", corpus=corpus_file, seq_len=16, num_seqs=4, bootstrap=0)


def test_trajectory_offline_without_branches_names_fetch(hf_cache, tmp_path, capsys):
    code = main(["trajectory", "acme/absent", "--revisions", "every:10", "--offline", "--out", str(tmp_path / "t")])
    line = one_line(capsys.readouterr().err)
    assert code == 2 and "cannot list the branches of acme/absent offline" in line
    assert "`effdepth fetch acme/absent --revisions every:10`" in line


def test_offline_default_corpus_must_be_cached(cached_pythia, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "empty-effdepth-cache"))
    assert main(["measure", REPO, "--offline", "--out", str(tmp_path / "o"), *SMALL]) == 2
    line = one_line(capsys.readouterr().err)
    assert "corpus 'shakespeare' (not in effdepth's cache" in line and "`effdepth fetch EleutherAI/pythia-70m`" in line


# --------------------------------------------------------------------------- no network at all


def test_unreachable_hub_fails_after_one_probe(hf_cache, unreachable_hub, corpus_file, tmp_path, capsys, monkeypatch):
    calls = []
    real = hub.probe
    monkeypatch.setattr(network, "probe", lambda *a, **k: calls.append(a) or real(*a, **k))
    started = time.perf_counter()
    code = main(["measure", REPO, "--corpus", corpus_file, "--out", str(tmp_path / "o"), *SMALL])
    elapsed = time.perf_counter() - started
    line = one_line(capsys.readouterr().err)
    assert code == 2 and elapsed < 3, elapsed
    assert len(calls) == 1
    assert line.startswith(
        f"effdepth: error: cannot reach the Hugging Face hub at {unreachable_hub} (connection to 127.0.0.1:"
    )
    assert "refused), and the local cache" in line and "lacks model 'EleutherAI/pythia-70m' (not cached)" in line
    assert "`effdepth fetch EleutherAI/pythia-70m`" in line and "Retry" not in line


def test_unreachable_hub_with_a_full_cache_goes_offline(cached_pythia, unreachable_hub, corpus_file, tmp_path, capsys):
    started = time.perf_counter()
    assert (
        main(["measure", REPO, "--revision", "step100", "--corpus", corpus_file, "--out", str(tmp_path / "o"), *SMALL])
        == 0
    )
    assert time.perf_counter() - started < 60
    err = capsys.readouterr().err
    assert "cannot be reached" in err and "reading the local cache only" in err and "Retry" not in err
    assert effdepth.load(tmp_path / "o").provenance["model"]["commit"] == cached_pythia["step100"]


def test_fetch_dry_run_without_network_fails_in_one_line(unreachable_hub, capsys):
    started = time.perf_counter()
    assert main(["fetch", "paper16", "--dry-run"]) == 2
    line = one_line(capsys.readouterr().err)
    assert time.perf_counter() - started < 3
    assert (
        f"cannot reach the Hugging Face hub at {unreachable_hub}" in line
        and "to list the files of suite paper16" in line
    )


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:{port}", "https://no-such-host.invalid"])
def test_cli_process_without_network(endpoint, closed_port, tmp_path):
    """The whole command, as a user runs it: one line, no retry chatter, in seconds (imports included)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if "proxy" not in k.lower() and k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    env.update(HF_ENDPOINT=endpoint.format(port=closed_port), HF_HUB_CACHE=str(tmp_path / "cache"), PYTHONPATH=SRC)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "effdepth.cli", "measure", REPO, "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    elapsed = time.perf_counter() - started
    assert proc.returncode == 2, proc.stderr
    line = one_line(proc.stderr)
    assert (
        line.startswith("effdepth: error: cannot reach the Hugging Face hub")
        and "effdepth fetch EleutherAI/pythia-70m" in line
    )
    assert elapsed < 30, elapsed  # five retries took 74 s
