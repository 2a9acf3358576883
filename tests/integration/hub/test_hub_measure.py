"""effdepth measure against the local hub, through the real huggingface_hub, transformers and datasets:
a revision (and the commit the server gave in the provenance), and the paper's protocol streaming a
FineWeb-Edu-shaped dataset."""

import json

from hubtools import PAPER_CORPUS, REPO, SMALL, assert_cache_sound, numbers, ok

import effdepth


def test_measure_at_a_revision_through_a_500_and_a_dropped_connection(machine, corpus_file, tmp_path):
    hub = machine.hub
    weights = r"GET /EleutherAI/pythia-160m/resolve/[0-9a-f]{40}/model\.safetensors"
    hub.fault(r"HEAD /EleutherAI/pythia-160m/resolve/[0-9a-f]{40}/model\.safetensors", status=500)  # retried
    hub.fault(weights, drop_after=100_000)  # asked again (from the start: its first chunk of 10 MB never came whole)
    out = tmp_path / "step1000"
    ok(machine.run("measure", REPO, "--revision", "step1000", "--corpus", corpus_file, *SMALL, "--out", out))
    model = effdepth.load(out).provenance["model"]
    assert model["revision"] == "step1000" and model["commit"] == hub.commit(REPO, "step1000")
    downloads = [(r.status, r.fault) for r in hub.asked(r"/model\.safetensors$", "GET")]
    assert downloads[0] == (200, "drop after 100000") and downloads[1:] in ([(200, None)], [(206, None)])
    assert [r.status for r in hub.asked(r"/model\.safetensors$", "HEAD")][:2] == [500, 200]
    assert not hub.asked(r"/api/models/EleutherAI/pythia-160m/revision/main")  # only the revision asked for
    assert_cache_sound(machine.hub_cache)
    assert (machine.hub_cache / "models--EleutherAI--pythia-160m" / "refs" / "step1000").read_text() == model["commit"]


def test_protocol_paper_streams_fineweb_edu(paper_run, documents, session_hub):
    out, _, requests, _ = paper_run
    result = effdepth.load(out)
    corpus = result.provenance["corpus"]
    assert corpus["name"] == PAPER_CORPUS and corpus["num_passages"] == 8 and corpus["max_len"] == 32
    assert "config sample-10BT, split train" in corpus["source"]
    assert result.config["protocol"] == "paper" and result.provenance["model"]["commit"] == session_hub.commit(REPO)
    # Streamed: the README's config named the shards, read in ranges; nothing of the other config.
    shard_reads = [r for r in requests if "/sample/10BT/" in r.path and r.method == "GET"]
    assert shard_reads and all(r.status == 206 for r in shard_reads)
    assert not [r for r in requests if "/data/CC-MAIN" in r.path]
    assert corpus["documents"] <= len(documents)
    assert json.loads((out / "result.json").read_text())["config"]["num_seqs"] == 8
    assert numbers(out)["tokens"] == corpus["sha256"]
