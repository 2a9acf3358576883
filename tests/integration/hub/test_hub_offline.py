"""A login node and a compute node: ``effdepth fetch`` through the local hub into an empty cache, then the
same commands with ``--offline`` and the server stopped give the numbers the online runs gave."""

import json

import pandas as pd
from hubtools import MODELS, PAPER, REPO, SMALL, assert_cache_sound, fetch_table, numbers, ok, results


def test_fetch_then_offline_with_the_server_stopped(
    machine, paper_run, pythia_run, ray_sweep, documents, corpus_file, tmp_path
):
    hub = machine.hub
    # Login node: the models of the measure and the sweep, the trajectory preset, the paper's corpus.
    fetched = ok(machine.run("fetch", "paper-pythia", *MODELS, "--protocol", "paper", "--no-progress"))
    rows = {(r["name"], r["revision"]): r["status"] for r in fetch_table(fetched.stdout)}
    assert rows.pop(("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train", "first 10,500 documents")) == (
        f"fetched: the split ended after {len(documents)} documents"
    )
    assert set(rows.values()) == {"fetched"}
    assert sorted(rows) == sorted(
        [(m, "main") for m in MODELS]
        + [("EleutherAI/pythia-1.4b", b) for b in ("step0", "step1", "step2", "step1000", "main")]
    )
    assert_cache_sound(machine.hub_cache)
    branches = json.loads(
        (machine.hub_cache / "models--EleutherAI--pythia-1.4b" / "effdepth-branches.json").read_text()
    )
    assert set(branches["branches"]) == {"main", "step0", "step1", "step2", "step1000", "v0"}

    # Compute node: no hub at all; the three commands side by side on the shared cache.
    hub.stop()
    out = tmp_path / "offline"
    procs = machine.run_all(
        [
            ["measure", REPO, *PAPER, "--offline", "--out", out / "paper"],
            ["trajectory", "paper-pythia", "--offline", "--corpus", corpus_file, *SMALL, "--out", out / "trajectory"],
            ["sweep", *MODELS, "--offline", "--corpus", corpus_file, *SMALL, "--no-report", "--out", out / "sweep"],
        ]
    )
    for proc in procs:
        ok(proc)
        assert "effdepth: error" not in proc.stderr and "Retry" not in proc.stderr

    assert numbers(out / "paper") == numbers(paper_run[0])
    assert (
        "effdepth's local copy"
        in json.loads((out / "paper" / "result.json").read_text())["provenance"]["corpus"]["source"]
    )

    online, offline = (json.loads((d / "trajectory.json").read_text()) for d in (pythia_run[0], out / "trajectory"))
    assert offline["checkpoints"] == online["checkpoints"] and offline["duplicates"] == online["duplicates"]
    online, offline = (pd.read_csv(d / "trajectory.csv") for d in (pythia_run[0], out / "trajectory"))
    assert set(online["weights_source"]) == {"hub LFS sha256"} and set(offline["weights_source"]) == {
        "cached LFS sha256"
    }
    pd.testing.assert_frame_equal(
        offline.drop(columns="weights_source"), online.drop(columns="weights_source")
    )  # weights too

    ray, local = results(ray_sweep[0]), results(out / "sweep")
    assert sorted(local) == sorted(ray)  # the same keys: the same models, revisions and options
    for key in ray:
        assert numbers(local[key]) == numbers(ray[key]), key
