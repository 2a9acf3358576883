"""The paper's corpus on offline nodes: ``effdepth fetch --documents N`` / ``--protocol paper`` streams the
first documents of an hf: dataset into effdepth's cache, and passage mode reads them from there, in the same
order as the stream, online or offline; a run that needs more continues the stream after them."""

from __future__ import annotations

import json
import types

import huggingface_hub
import pytest

from effdepth.cli import main
from effdepth.data.corpus_prefix import cached_prefix, prefix_folder
from effdepth.data.paper import PAPER_CORPUS
from effdepth.data.passages import load_passages
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models import hub

SPEC = "hf:acme/docs:default:train"
# Blank rows are skipped by the stream and do not count as documents, but they count as rows.
ROWS = [
    {"text": f"document {i}: " + "words and more words " * (3 + i % 5)} if i % 4 else {"text": "  "} for i in range(40)
]


class FakeStream:
    """What ``datasets.load_dataset(..., streaming=True)`` returns, over fixed rows."""

    def __init__(self, rows, log):
        self.rows, self.log = rows, log

    def __iter__(self):
        self.log.append(("iter", len(self.rows)))
        return iter(self.rows)

    def skip(self, n):
        self.log.append(("skip", n))
        return FakeStream(self.rows[n:], self.log)


@pytest.fixture
def fake_datasets(tmp_path, monkeypatch):
    """A hub that answers, a dataset of ROWS behind ``datasets.load_dataset``, and an empty effdepth cache."""
    import datasets
    import transformers.utils.hub  # noqa: F401 - bound to the real HfApi before it is replaced here

    log = []

    def load_dataset(name, config=None, split=None, streaming=False, revision=None, **kwargs):
        log.append(("load", name, config, split, streaming, revision))
        if not streaming:
            raise FileNotFoundError(f"{name} is not in the datasets cache")
        return FakeStream(ROWS, log)

    class FakeApi:
        def dataset_info(self, repo_id, files_metadata=False, **kwargs):
            return types.SimpleNamespace(sha="d" * 40, siblings=[])

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    monkeypatch.setattr(hub, "hub_problem", lambda timeout=None: None)
    monkeypatch.setattr(hub, "_dataset_missing", lambda name, config, split: "not in the datasets cache")
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "effdepth-cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    return log


def streamed_passages(n):
    return load_passages(SPEC, byte_tokenizer(), max_len=48, num_passages=n, split="document", bos="never")


def test_fetch_streams_the_first_documents_and_the_dry_run_writes_nothing(fake_datasets, capsys):
    assert main(["fetch", "--corpus", SPEC, "--documents", "12", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "first 12 documents" in out and "to fetch" in out and cached_prefix("acme/docs", "default", "train") is None
    assert main(["fetch", "--corpus", SPEC, "--documents", "12", "--no-progress"]) == 0
    assert "first documents of hf: corpora: " in capsys.readouterr().out
    copy = cached_prefix("acme/docs", "default", "train")
    texts = [r["text"] for r in ROWS if r["text"].strip()]
    assert list(copy.texts()) == texts[:12]
    assert copy.commit == "d" * 40 and copy.meta["rows"] == 16 and not copy.complete  # rows 0, 4, 8, 12 are blank
    assert ("load", "acme/docs", "default", "train", True, "d" * 40) in fake_datasets  # the planned commit, streamed
    assert main(["fetch", "--corpus", SPEC, "--documents", "12", "--dry-run"]) == 0
    assert "cached" in capsys.readouterr().out


def test_a_run_reads_the_copy_offline_and_gets_the_streams_passages(fake_datasets):
    online = streamed_passages(8)
    assert main(["fetch", "--corpus", SPEC, "--documents", "10", "--no-progress"]) == 0
    fake_datasets.clear()
    with hub.offline():
        offline = streamed_passages(8)
        assert hub.corpus_missing(SPEC) is None
    assert fake_datasets == []  # nothing asked of datasets: the copy alone served
    assert offline.sha256 == online.sha256
    assert "local copy" in offline.info["source"] and "d" * 40 in offline.info["source"]


def test_online_a_run_that_needs_more_continues_the_stream_after_the_copy(fake_datasets):
    whole = streamed_passages(20)
    assert main(["fetch", "--corpus", SPEC, "--documents", "6", "--no-progress"]) == 0
    fake_datasets.clear()
    assert streamed_passages(20).sha256 == whole.sha256
    assert ("skip", 8) in fake_datasets  # six documents took eight rows (two blank ones)


def test_offline_a_run_that_needs_more_than_the_copy_says_how_to_fetch_more(fake_datasets):
    assert main(["fetch", "--corpus", SPEC, "--documents", "3", "--no-progress"]) == 0
    with (
        hub.offline(),
        pytest.raises(EffdepthError, match=r"more than the 3 documents of its local copy.*--documents N"),
    ):
        streamed_passages(8)


def test_a_split_shorter_than_asked_is_kept_whole_and_says_so(fake_datasets, capsys):
    assert main(["fetch", "--corpus", SPEC, "--documents", "500", "--no-progress"]) == 0
    assert "the split ended after 30 documents" in capsys.readouterr().out
    assert cached_prefix("acme/docs", "default", "train").complete
    with hub.offline():
        assert streamed_passages(30).num_passages == 30


def test_an_interrupted_fetch_leaves_nothing_a_run_would_read(fake_datasets, monkeypatch):
    import datasets

    def broken(name, config=None, split=None, streaming=False, revision=None, **kwargs):
        def rows():
            yield from ROWS[:6]
            raise ConnectionError("connection reset by peer")

        return rows()

    monkeypatch.setattr(datasets, "load_dataset", broken)
    assert main(["fetch", "--corpus", SPEC, "--documents", "12", "--no-progress"]) == 1
    assert cached_prefix("acme/docs", "default", "train") is None
    assert not list(prefix_folder("acme/docs", "default", "train").glob("first-*"))


def test_fetch_protocol_paper_streams_the_papers_corpus(fake_datasets, capsys):
    assert main(["fetch", "--protocol", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert PAPER_CORPUS in out and "first 10,500 documents" in out


def test_a_damaged_copy_is_one_line(fake_datasets):
    assert main(["fetch", "--corpus", SPEC, "--documents", "4", "--no-progress"]) == 0
    copy = cached_prefix("acme/docs", "default", "train")
    copy.path.write_text(json.dumps({"text": "fine " * 20}) + "\nnot json\n")
    with pytest.raises(EffdepthError, match="damaged: delete"):
        streamed_passages(4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fetch", "--corpus", SPEC, "--documents", "0"], "is not a positive whole number"),
        (["fetch", "--protocol", "papr"], "unknown --protocol 'papr'"),
    ],
)
def test_bad_fetch_options_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_measure_protocol_paper_runs_offline_from_the_copy(tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    from effdepth import load
    from effdepth.data.corpus_prefix import write_prefix
    from effdepth.models.tiny import tiny_config

    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "effdepth-cache"))
    folder = tmp_path / "tiny-llama"
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    name, config, split = hub.parse_hf_corpus(PAPER_CORPUS)
    texts = [f"An educational page, number {i}, about the water cycle and the seasons of the year." for i in range(12)]
    write_prefix(name, config, split, enumerate(texts, 1), 12, commit="e" * 40)
    with hub.offline():
        assert (
            main(
                [
                    "measure",
                    str(folder),
                    "--protocol",
                    "paper",
                    "--num-seqs",
                    "8",
                    "--seq-len",
                    "32",
                    "--offline",
                    "--bootstrap",
                    "0",
                    "--no-progress",
                    "--no-figures",
                    "--out",
                    str(tmp_path / "run"),
                ]
            )
            == 0
        )
    result = load(tmp_path / "run")
    assert result.config["protocol"] == "paper" and result.config["states"] == "hidden"
    assert "local copy" in result.provenance["corpus"]["source"] and "e" * 40 in result.provenance["corpus"]["source"]
