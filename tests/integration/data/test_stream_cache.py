"""Large corpora keep their token stream in the effdepth cache: the next run reads it instead of tokenizing again."""

import pytest

from effdepth.data import byte_tokenizer, load_corpus, packing

DOCS = ["Is this a dagger which I see before me, the handle toward my hand? " * 30, "Come, let me clutch thee. " * 40]


@pytest.fixture
def streams(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(packing, "_DISK_STREAM_MIN_CHARS", 100)  # these documents count as large
    return tmp_path / "cache" / "streams"


def test_the_next_run_reads_the_stored_stream(streams, monkeypatch):
    first = load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8, seed=3)
    (stored,) = streams.glob("*.npz")
    monkeypatch.setattr(packing, "_tokenize_all", lambda *a: pytest.fail("tokenized again"))
    again = load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8, seed=3)  # a new tokenizer object: not in memory
    assert again.sha256 == first.sha256 and again.info == first.info


def test_a_damaged_stream_is_tokenized_again(streams):
    first = load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8)
    (stored,) = streams.glob("*.npz")
    stored.write_bytes(stored.read_bytes()[:100])
    assert load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8).sha256 == first.sha256
    assert packing._read_stored_stream(stored) is not None  # rewritten whole


def test_another_tokenizer_or_text_has_its_own_stream(streams):
    load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8)
    other = byte_tokenizer()
    other.add_tokens(["dagger"])
    load_corpus(DOCS, other, seq_len=16, num_seqs=8)
    load_corpus(DOCS[:1], byte_tokenizer(), seq_len=16, num_seqs=8)
    assert len(list(streams.glob("*.npz"))) == 3


def test_small_corpora_stay_in_memory_only(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFDEPTH_CACHE", str(tmp_path / "cache"))
    load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8)
    assert not (tmp_path / "cache").exists()


def test_a_cache_that_cannot_be_written_only_costs_the_next_run_time(streams, tmp_path):
    streams.parent.mkdir(parents=True)
    streams.write_text("a file where the folder would go")  # mkdir fails whoever runs the tests
    first = load_corpus(DOCS, byte_tokenizer(), seq_len=16, num_seqs=8)
    assert streams.is_file() and first.input_ids.shape == (8, 16)
    assert not list(streams.parent.glob(".*tmp*"))  # nothing half-written left behind
