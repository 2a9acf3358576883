"""Passages know their text: each one's document, character span and hash; ``paragraphs`` is cut on the text,
so two tokenizers get the same passages (the same identity, the same seeded draw) and every passage fits."""

import hashlib

import numpy as np
import pytest
from merging_tokenizer import merging_tokenizer

from effdepth.data import passages as passages_module
from effdepth.data.paragraphs import MIN_PASSAGE_BYTES, RESERVED_TOKENS, paragraph_spans, text_pieces, utf8_ends
from effdepth.data.passages import identity_sha256, load_passages
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.errors import EffdepthError

WORDS = "to be or not to be that is the question whether tis nobler in the mind ünd straße 😀 ".split()


def corpus(documents=3, paragraphs=40, seed=0) -> list:
    """Documents of paragraphs of 1..30 words (some non-ASCII), one with a word longer than any budget."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(documents):
        paras = [" ".join(rng.choice(WORDS, size=rng.integers(1, 30))) for _ in range(paragraphs)]
        paras[3] = "x" * 300  # no whitespace: cut at characters
        docs.append("\n\n".join(paras) + "\n")
    return docs


# --------------------------------------------------------------------------- the text split


def test_text_pieces_are_whole_paragraphs_packed_in_order_within_the_byte_budget():
    for text in corpus(documents=2, seed=1):
        for budget in (32, 45, 125):
            pieces = text_pieces(text, budget)
            ends = utf8_ends(text)
            assert all(ends[b] - ends[a] <= budget for a, b in pieces)
            assert all(b1 <= a2 for (_, b1), (a2, _) in zip(pieces, pieces[1:]))  # in order, never overlapping
            joined = "".join(text[a:b] for a, b in pieces).split()
            assert "".join(joined) == "".join(text.split())  # every character but whitespace is in one piece
            # a paragraph is cut only when it alone exceeds the budget: a piece never ends inside one that fits
            for start, end in paragraph_spans(text):
                if ends[end] - ends[start] <= budget:
                    assert any(a <= start and end <= b for a, b in pieces)


def test_a_long_paragraph_is_cut_at_its_last_whitespace_else_at_a_character():
    text = "aaa bbb ccc ddd"
    assert [text[a:b] for a, b in text_pieces(text, 9)] == ["aaa bbb", "ccc ddd"]
    accents = "é" * 5
    assert [accents[a:b] for a, b in text_pieces(accents, 4)] == ["éé", "éé", "é"]  # bytes, not characters
    assert utf8_ends("é😀").tolist() == [0, 2, 6] == [len("é😀"[:i].encode()) for i in range(3)]


def test_paragraph_passages_are_the_same_for_two_tokenizers_and_fit_seq_len():
    docs = corpus()
    byte, merging = byte_tokenizer(), merging_tokenizer()
    a = load_passages(docs, byte, max_len=48, num_passages=24, split="paragraphs")
    b = load_passages(docs, merging, max_len=48, num_passages=24, split="paragraphs", bos="always")
    assert a.ids.tolist() != b.ids.tolist() and a.sha256 != b.sha256  # other tokens...
    assert a.info["text_sha256"] == b.info["text_sha256"] == identity_sha256(a.identity)  # ...the same text
    for field in ("document", "start", "end", "text_sha256"):
        assert a.identity[field].tolist() == b.identity[field].tolist()
    assert a.info["passages_available"] == b.info["passages_available"]
    assert a.info["tokenizer_sha256"] != b.info["tokenizer_sha256"]
    assert int(a.lengths.max()) <= 48 and int(b.lengths.max()) <= 48
    assert int(b.lengths.sum()) < int(a.lengths.sum())  # the merges shorten the same text
    for i in range(a.num_passages):  # each passage is its span's text, tokenized alone
        d, s, e = (int(a.identity[k][i]) for k in ("document", "start", "end"))
        text = docs[d][s:e]
        assert bytes(a.passage(i).tolist()) == text.encode()
        assert a.identity["text_sha256"][i] == hashlib.sha256(text.encode()).hexdigest()
        assert len(text.encode()) >= MIN_PASSAGE_BYTES
    assert a.info["min_passage_bytes"] == MIN_PASSAGE_BYTES and a.info["text_budget_bytes"] == 48 - RESERVED_TOKENS


def test_windows_record_their_spans_and_differ_between_tokenizers():
    docs = corpus()
    a = load_passages(docs, byte_tokenizer(), max_len=32, num_passages=12, split="windows")
    for i in range(a.num_passages):
        d, s, e = (int(a.identity[k][i]) for k in ("document", "start", "end"))
        assert docs[d][s:e].encode().startswith(bytes(a.passage(i).tolist()[:1]))  # begins at its first token
        assert len(docs[d][s:e].encode()) >= 32  # covers the window's 32 bytes (whole characters)
    again = load_passages(docs, byte_tokenizer(), max_len=32, num_passages=12, split="windows")
    other = load_passages(docs, merging_tokenizer(), max_len=32, num_passages=12, split="windows")
    assert again.info["text_sha256"] == a.info["text_sha256"] != other.info["text_sha256"]
    document = load_passages(docs + docs[:1], byte_tokenizer(), max_len=32, num_passages=4, split="document")
    assert document.identity["document"].tolist() == [0, 1, 2, 3] and document.identity["start"].tolist() == [0] * 4
    for i, end in enumerate(document.identity["end"].tolist()):  # the first 32 bytes, in whole characters
        assert (docs + docs[:1])[i][:end].encode()[:32] == bytes(document.passage(i).tolist())


def test_the_identity_is_unknown_for_token_ids_and_a_slow_tokenizer_on_windows(monkeypatch):
    import torch

    assert load_passages(torch.randint(0, 9, (4, 6)), None).identity is None
    slow = byte_tokenizer()
    monkeypatch.setattr(type(slow), "is_fast", property(lambda self: False))
    windows = load_passages(corpus(), slow, max_len=32, num_passages=8)
    assert windows.identity is None and windows.info["text_sha256"] is None
    paragraphs = load_passages(corpus(), slow, max_len=48, num_passages=8, split="paragraphs")
    fast = load_passages(corpus(), byte_tokenizer(), max_len=48, num_passages=8, split="paragraphs")
    assert paragraphs.info["text_sha256"] == fast.info["text_sha256"] is not None


def test_a_passage_over_seq_len_is_refused_as_a_bug(monkeypatch):
    monkeypatch.setattr(passages_module, "text_budget", lambda max_len, special: 2 * max_len)
    with pytest.raises(EffdepthError, match=r"more than --seq-len 48: effdepth cut it wrongly \(a bug\)"):
        load_passages(corpus(), byte_tokenizer(), max_len=48, num_passages=8, split="paragraphs")


def test_a_seq_len_too_short_for_the_shortest_paragraph_passage_says_what_to_use():
    with pytest.raises(EffdepthError, match="--seq-len 24 leaves 21 bytes .* use --seq-len 35 or more") as err:
        load_passages(corpus(), byte_tokenizer(), max_len=24, num_passages=8, split="paragraphs")
    assert "\n" not in str(err.value)
    with pytest.raises(EffdepthError, match=r"gives \d+ passages of 32 to 45 bytes of text \(paragraphs split\)"):
        load_passages(corpus(documents=1), byte_tokenizer(), max_len=48, num_passages=4000, split="paragraphs")
