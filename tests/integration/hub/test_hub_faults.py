"""What a cluster user meets, through the real clients: a missing repository, revision, dataset config or
split, a gated repository, pickle-only weights, the server answering 500, a connection dropped in the
middle of a weights file, the server gone in the middle of a run. Each is one line (what, why, what to
do) or a retry that succeeds, and the cache is never left corrupt."""

import json

from hubtools import MODELS, REPO, SMALL, assert_cache_sound, fetch_table, ok, one_line, results

DATASET = "HuggingFaceFW/fineweb-edu"


def test_measure_refuses_in_one_line_before_any_download(machine, corpus_file):
    hub = machine.hub
    text = ["--corpus", corpus_file]
    commands = {
        "repository": ["measure", "acme/absent", *text],
        "revision": ["measure", REPO, "--revision", "step999", *text],
        "gated": ["measure", "acme/gated-model", *text],
        "pickle": ["measure", REPO, "--revision", "step512", *text],
        "branches": ["trajectory", "acme/absent"],
    }
    procs = dict(
        zip(commands, machine.run_all([[*c, *SMALL, "--out", machine.home / name] for name, c in commands.items()]))
    )
    said = {name: one_line(p) for name, p in procs.items()}
    assert {name: p.returncode for name, p in procs.items()} == dict.fromkeys(commands, 2)
    assert said["repository"] == (
        f"there is no model acme/absent on the Hugging Face hub at {hub.url} (or it is private "
        "and this machine is not logged in); check the name, or run `hf auth login` if it is private"
    )
    assert said["revision"] == (
        f"model {REPO} has no revision step999 (no such branch, tag or commit on the Hugging Face "
        "hub); it has 3 branches: main, step1000, step512; check --revision"
    )
    assert said["gated"].startswith(
        "model acme/gated-model is gated: the Hugging Face hub lets only accounts that accepted"
    )
    assert (
        f"accept them at {hub.url}/acme/gated-model, then run `hf auth login` here (or set HF_TOKEN)" in said["gated"]
    )
    assert said["pickle"] == (
        f"model {REPO} at revision step512 has only pickle weights (pytorch_model.bin), which can "
        "run arbitrary code when loaded; pass --allow-pickle if you trust its source"
    )
    assert said["branches"].startswith("cannot list the branches of acme/absent: there is no model acme/absent")
    # Nothing was downloaded for the refused models.
    assert not hub.asked(r"\.(safetensors|bin)$", "GET") and not hub.asked(r"^/acme/", "GET")
    assert all(p.seconds < 60 for p in procs.values())


def test_fetch_lists_every_problem_and_fetches_the_rest(machine):
    hub = machine.hub
    hub.fault(r"GET /api/models/EleutherAI/pythia-1\.4b", status=500, times=None)  # the hub's own fault, every time
    proc = machine.run(
        "fetch",
        REPO,
        "acme/gated-model",
        "acme/absent",
        "EleutherAI/pythia-1.4b",
        "--revision",
        "main",
        "--revision",
        "step512",
        "--corpus",
        f"hf:{DATASET}:sample-999BT:train",
        "--corpus",
        f"hf:{DATASET}:sample-10BT:test",
        "--corpus",
        "hf:acme/no-dataset",
        "--documents",
        "10",
        "--no-progress",
    )
    assert proc.returncode == 1 and one_line(proc) == "10 item(s) could not be fetched; see the status column"
    status = {(r["name"], r["revision"]): r["status"] for r in fetch_table(proc.stdout)}
    assert status[(REPO, "main")] == "fetched"
    assert status[(REPO, "step512")] == (
        "error: only pickle weights (pytorch_model.bin); pass --allow-pickle if you trust this source"
    )
    assert (
        status[("acme/gated-model", "main")]
        == "error: gated: accept its terms on the hub page, then `hf auth login` here"
    )
    assert status[("acme/gated-model", "step512")] == "error: no revision 'step512' in this repository"
    assert status[("acme/absent", "main")] == "error: no such repository on the hub (or it is private: `hf auth login`)"
    assert status[("EleutherAI/pythia-1.4b", "main")] == (
        "error: the hub answered 500 (a fault on its side); run the same fetch again later: finished files are kept"
    )
    assert status[(f"hf:{DATASET}:sample-999BT:train", "first 10 documents")] == (
        f"failed: dataset {DATASET} has no config sample-999BT (it has: default, sample-10BT); name one as "
        f"hf:{DATASET}:CONFIG[:SPLIT] in corpus 'hf:{DATASET}:sample-999BT:train'"
    )
    assert status[(f"hf:{DATASET}:sample-10BT:test", "first 10 documents")].startswith(
        f"failed: dataset {DATASET} (config sample-10BT) has no split test (it has: train); name one as "
        f"hf:{DATASET}:sample-10BT:SPLIT"
    )
    assert (
        status[("hf:acme/no-dataset", "-")]
        == "error: no such repository on the hub (or it is private: `hf auth login`)"
    )
    # Planned, not downloaded: nothing of the pickle-only revision or the gated repository was fetched.
    step512 = hub.commit(REPO, "step512")
    assert not hub.asked(rf"/resolve/{step512}/", "GET") and not hub.asked(r"^/acme/gated-model/resolve/", "GET")
    assert_cache_sound(machine.hub_cache)
    assert (machine.hub_cache / "models--EleutherAI--pythia-160m" / "refs" / "main").read_text() == hub.commit(REPO)


def test_a_connection_dropped_in_a_weights_file_then_the_next_fetch(machine):
    hub = machine.hub
    hub.fault(r"GET /EleutherAI/pythia-160m/resolve/[0-9a-f]{40}/model\.safetensors", drop_after=50_000, times=None)
    failed = machine.run("fetch", REPO, "--revision", "step1000", "--no-progress")
    assert failed.returncode == 1
    assert "failed: hub not reachable or the connection dropped" in failed.stdout
    assert "run the same fetch again: finished files are kept" in failed.stdout
    assert_cache_sound(machine.hub_cache)  # no partial blob, nothing half-written in the snapshot
    snapshot = machine.hub_cache / "models--EleutherAI--pythia-160m" / "snapshots" / hub.commit(REPO, "step1000")
    assert not (snapshot / "model.safetensors").exists() and (snapshot / "config.json").is_file()
    hub.clear()
    again = ok(machine.run("fetch", REPO, "--revision", "step1000", "--no-progress"))
    assert "fetched" in again.stdout  # only what was missing
    assert [r.path.rsplit("/", 1)[1] for r in hub.asked("/resolve/", "GET")] == ["model.safetensors"]
    assert_cache_sound(machine.hub_cache)
    assert (snapshot / "model.safetensors").is_file()


def test_the_server_gone_in_the_middle_of_a_sweep(machine, corpus_file, tmp_path):
    hub = machine.hub
    out = tmp_path / "sweep"
    args = ["sweep", *MODELS, "--corpus", corpus_file, *SMALL, "--no-report", "--out", out]
    hub.fault(r"GET /api/models/allenai/OLMo-2-1124-13B", gone=True)  # after the first model, before the second
    proc = machine.run(*args)
    assert proc.returncode == 1 and not hub.running and proc.seconds < 60
    (error,) = [json.loads(p.read_text()) for p in out.rglob("error.json")]
    assert error["model"] == MODELS[1] and "\n" not in error["error"]
    assert error["error"].startswith(f"cannot reach the Hugging Face hub at {hub.url} (connection to 127.0.0.1:")
    assert (
        f"lacks model '{MODELS[1]}' (not cached); run `effdepth fetch {MODELS[1]}` on a machine with internet"
        in error["error"]
    )
    assert list(results(out)) and all(MODELS[0].replace("/", "-") in key for key in results(out))
    assert_cache_sound(machine.hub_cache)
    hub.start()  # back: the same command finishes the sweep
    again = ok(machine.run(*args))
    assert "done already" in again.stdout and "1 measured" in again.stdout and len(results(out)) == 2
    assert not list(out.rglob("error.json"))
