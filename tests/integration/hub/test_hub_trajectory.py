"""effdepth trajectory against the local hub: the paper-pythia and paper-olmo2 presets discover the
fixture repositories' step branches, flag repeated weights from the hub's LFS sha256, and measure the
rest through the real clients; a branch with only pickle weights is refused while planning."""

import json

from hubtools import SMALL, ok, trajectory_rows

PYTHIA = "EleutherAI/pythia-1.4b"


def test_paper_pythia_discovers_steps_and_flags_repeated_weights(pythia_run, session_hub):
    out, proc, requests, _ = pythia_run
    summary = json.loads((out / "trajectory.json").read_text())
    assert (
        summary["preset"]["name"] == "paper-pythia" and summary["model"] == PYTHIA and summary["revisions"] == "log:35"
    )
    assert [c["revision"] for c in summary["checkpoints"]] == ["step0", "step1", "step2", "step1000", "main"]
    assert summary["duplicates"] == {"step2": "step1", "main": "step1000"} and summary["skipped"] == ["v0"]
    table = trajectory_rows(out)
    assert [s for s, _ in table.values()] == ["ok", "ok", "duplicate", "ok", "duplicate"]
    assert table["step2"][1] == table["step1"][1] and table["main"][1] == table["step1000"][1]
    # Branches from the refs API; the duplicates' weights were never downloaded.
    assert [r.path for r in requests if r.path.endswith("/refs")] == [f"/api/models/{PYTHIA}/refs"]
    weights = {
        r.path.split("/resolve/")[1].split("/")[0]
        for r in requests
        if r.path.startswith(f"/{PYTHIA}/resolve/") and r.path.endswith("/model.safetensors") and r.method == "GET"
    }
    assert weights == {session_hub.commit(PYTHIA, b) for b in ("step0", "step1", "step1000")}
    assert "2 duplicates flagged" in proc.stdout


def test_paper_olmo2_spaces_stage1_and_adds_main(machine, corpus_file, tmp_path):
    out = tmp_path / "olmo2"
    proc = ok(machine.run("trajectory", "paper-olmo2", "--corpus", corpus_file, *SMALL, "--out", out))
    summary = json.loads((out / "trajectory.json").read_text())
    assert summary["model"] == "allenai/OLMo-2-1124-13B"
    assert [c["revision"] for c in summary["checkpoints"]] == [
        "stage1-step0-tokens0B",
        "stage1-step1000-tokens5B",
        "main",
    ]
    assert [c["tokens_seen"] for c in summary["checkpoints"]] == [0, 5_000_000_000, None]
    assert any("stage2-ingredient1 are not selected" in n for n in summary["notes"])
    assert [s for s, _ in trajectory_rows(out).values()] == ["ok", "ok", "ok"] and summary["duplicates"] == {}
    assert "3 checkpoints (3 measured)" in proc.stdout


def test_a_pickle_only_branch_is_refused_while_planning(machine, corpus_file, tmp_path):
    hub = machine.hub
    out = tmp_path / "t"
    args = [
        "trajectory",
        "EleutherAI/pythia-160m",
        "--revisions",
        "step512,step1000",
        "--corpus",
        corpus_file,
        *SMALL,
        "--out",
        out,
    ]
    proc = machine.run(*args)
    assert proc.returncode == 1, proc.stderr
    assert "step512: checkpoint step512 of EleutherAI/pythia-160m has only pickle weights" in proc.stdout
    assert "pass --allow-pickle if you trust its source; not downloaded, not measured" in proc.stdout
    step512 = hub.commit("EleutherAI/pythia-160m", "step512")
    assert not hub.asked(f"/resolve/{step512}/") and not hub.asked("/resolve/step512/")  # nothing of it downloaded
    table = trajectory_rows(out)
    assert table["step512"][0] == "error" and table["step1000"][0] == "ok"
    assert "1 measured, 1 failed" in proc.stdout
    # Trusted: measured, and nobody is asked to convert the repository's weights (transformers would, unasked).
    hub.clear()
    again = ok(machine.run(*args, "--allow-pickle"))
    assert "1 done before, 1 measured" in again.stdout and trajectory_rows(out)["step512"][0] == "ok"
    assert hub.asked(rf"/resolve/{step512}/pytorch_model\.bin$", "GET")
    assert not hub.asked(r"/(commits|discussions)\b") and not hub.asked(r"/api/models/EleutherAI/pythia-160m$")
