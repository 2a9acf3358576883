"""The byte tokenizer: ids are UTF-8 bytes, three specials, save/load round trip."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from effdepth.data import byte_tokenizer


@pytest.fixture(scope="module")
def tok():
    return byte_tokenizer()


@pytest.fixture(scope="module")
def reloaded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("byte-tok")
    byte_tokenizer().save_pretrained(folder)
    return AutoTokenizer.from_pretrained(str(folder))


def test_vocabulary_is_256_bytes_then_three_specials(tok):
    assert len(tok) == 259
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (256, 257, 258)
    assert tok.convert_ids_to_tokens([256, 257, 258]) == ["<bos>", "<eos>", "<pad>"]


def test_adds_no_special_tokens_by_itself(tok):
    # Like SmolLM2's tokenizer: load_corpus prepends BOS explicitly.
    assert tok("ab")["input_ids"] == [97, 98]


def test_each_call_returns_an_independent_tokenizer():
    first, second = byte_tokenizer(), byte_tokenizer()
    first.bos_token = None
    assert second.bos_token_id == 256


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_ids_are_the_utf8_bytes_and_decode_back(tok, text):
    ids = tok(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]
    assert ids == list(text.encode("utf-8"))
    assert tok.decode(ids) == text


@settings(max_examples=30, deadline=None)
@given(st.text(max_size=100))
def test_save_pretrained_round_trip_encodes_identically(tok, reloaded, text):
    assert len(reloaded) == 259
    assert reloaded.bos_token_id == 256 and reloaded.eos_token_id == 257 and reloaded.pad_token_id == 258
    assert reloaded(text, add_special_tokens=False)["input_ids"] == tok(text, add_special_tokens=False)["input_ids"]


def test_padding_uses_pad_id(tok):
    batch = tok(["ab", "abcd"], padding=True)
    assert batch["input_ids"][0] == [97, 98, 258, 258]
    assert batch["attention_mask"][0] == [1, 1, 0, 0]
