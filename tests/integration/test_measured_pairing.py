"""Measured results know their passages' text: two tiny models measured on the same paragraphs pair (also saved
and loaded, their pooled stores holding each passage's identity); other passages are refused in one line."""

import numpy as np

import effdepth
from effdepth.data.passages import load_passages
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.models.tiny import tiny_model
from effdepth.results.loading import load
from effdepth.results.pairing import pairing_problem
from effdepth.results.store import PooledStore

TEXT = ["\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(40))]


def measured(family: str, **options):
    options = {"seq_len": 48, "num_seqs": 8, "passage_split": "paragraphs", **options}
    return effdepth.measure(
        tiny_model(family), TEXT, tokenizer=byte_tokenizer(), bootstrap=0, progress=False, **options
    )


def test_two_models_measured_on_the_same_paragraphs_pair_and_their_stores_hold_the_identity(tmp_path):
    a, b = measured("llama"), measured("gpt2")
    assert pairing_problem(a, b) is None
    expected = load_passages(TEXT, byte_tokenizer(), max_len=48, num_passages=8, split="paragraphs")
    assert a.provenance["corpus"]["text_sha256"] == expected.info["text_sha256"]
    assert a.provenance["corpus"]["tokenizer_sha256"] == expected.info["tokenizer_sha256"]
    a.save(tmp_path / "a")
    b.save(tmp_path / "b")
    saved_a, saved_b = load(tmp_path / "a"), load(tmp_path / "b")
    stored = PooledStore.open(saved_a.pooled).identity
    for field, values in expected.identity.items():
        assert np.array_equal(stored[field], values), field
    assert pairing_problem(saved_a, saved_b) is None


def test_other_passages_are_refused_with_what_differs(tmp_path):
    a = measured("llama")
    a.save(tmp_path / "a")
    longer = measured("gpt2", seq_len=64)
    line = pairing_problem(load(tmp_path / "a"), longer, "base", "other")
    assert line.startswith("base and other hold different passages: --seq-len 48 (base) vs 64 (other); measure other")
    assert line.endswith("--passage-split paragraphs --seq-len 48 --num-seqs 8 --seed 0 --bos auto")
    windows = measured("llama", passage_split="windows", seq_len=32)
    assert pairing_problem(windows, measured("gpt2", passage_split="windows", seq_len=32)) is None  # one tokenizer
    assert "passage split paragraphs (A) vs windows (B)" in pairing_problem(a, windows)
