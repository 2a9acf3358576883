"""A corpus is tokenized once per process and tokenizer: the second load reads the kept tokens, and gives
the same passages; another tokenizer, other text or a slow tokenizer tokenize again."""

import pytest

from effdepth.data import byte_tokenizer
from effdepth.data import passages as passages_module
from effdepth.data.passages import load_passages

TEXT = ["\n\n".join(f"paragraph {i} of document {d} " + "x" * (10 + i) for i in range(30)) for d in range(3)]


@pytest.fixture
def tokenized(monkeypatch):
    """Counts the documents tokenized, with nothing kept from other tests."""
    calls = []
    document_tokens = passages_module._document_tokens

    def counted(tokenizer, text):
        calls.append(text)
        return document_tokens(tokenizer, text)

    monkeypatch.setattr(passages_module, "_document_tokens", counted)
    monkeypatch.setattr(passages_module, "_tokenized", {})
    return calls


def load(text, tokenizer, **kwargs):
    return load_passages(list(text), tokenizer, **{"max_len": 24, "num_passages": 6, **kwargs})


def test_the_same_tokenizer_reads_the_kept_tokens_and_gets_the_same_passages(tokenized):
    first = load(TEXT, byte_tokenizer())
    assert len(tokenized) == 3
    second = load(TEXT, byte_tokenizer(), seed=0)  # a fresh tokenizer object with the same definition
    third = load(TEXT, byte_tokenizer(), split="paragraphs", max_len=48)  # cut on the text: no tokens read
    assert len(tokenized) == 3
    assert first.ids.tolist() == second.ids.tolist() and first.info == second.info
    passages_module._tokenized.clear()
    fresh = load(TEXT, byte_tokenizer(), split="paragraphs", max_len=48)
    assert fresh.ids.tolist() == third.ids.tolist() and fresh.lengths.tolist() == third.lengths.tolist()


def test_other_text_or_another_tokenizer_is_tokenized_again(tokenized):
    load(TEXT, byte_tokenizer())
    load(TEXT[:2] + [TEXT[2] + " more"], byte_tokenizer())
    assert len(tokenized) == 6
    other = byte_tokenizer()
    other.add_special_tokens({"additional_special_tokens": ["<sep>"]})
    load(TEXT, other)
    assert len(tokenized) == 9
    assert len(passages_module._tokenized) == passages_module.TOKENIZED_CORPORA_KEPT


def test_a_slow_tokenizer_is_never_kept(tokenized, monkeypatch):
    tokenizer = byte_tokenizer()
    monkeypatch.setattr(type(tokenizer), "is_fast", property(lambda self: False))
    load(TEXT, tokenizer)
    load(TEXT, tokenizer)
    assert len(tokenized) == 6 and not passages_module._tokenized


def test_a_corpus_of_more_tokens_than_kept_is_tokenized_every_time(tokenized, monkeypatch):
    monkeypatch.setattr(passages_module, "KEPT_TOKENS", 100)
    load(TEXT, byte_tokenizer())
    load(TEXT, byte_tokenizer())
    assert len(tokenized) == 6 and not passages_module._tokenized
