"""``--tokenizer PATH_OR_ID`` / ``tokenizer=``: a tokenizer for checkpoints saved without one, and the hint
that names it in the user's own terms (the flag on the command line, the argument in Python)."""

import json

import pytest

import effdepth
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models.tiny import tiny_model

TEXT = "Out, out, brief candle! Life's but a walking shadow, a poor player. " * 40


@pytest.fixture(scope="module")
def bare(tmp_path_factory):
    """A tiny checkpoint saved without its tokenizer, its tokenizer in a folder of its own, and a text corpus."""
    root = tmp_path_factory.mktemp("bare")
    tiny_model("llama").save_pretrained(root / "model")
    byte_tokenizer().save_pretrained(root / "tokenizer")
    (root / "text.txt").write_text(TEXT)
    return root


def cli(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_hint_names_the_flag_and_the_flag_works(bare, tmp_path, capsys):
    base = [
        "measure",
        bare / "model",
        "--corpus",
        bare / "text.txt",
        "--seq-len",
        16,
        "--num-seqs",
        4,
        "--bootstrap",
        0,
        "--no-progress",
        "--no-figures",
    ]
    code, _, err = cli([*base, "--out", tmp_path / "no"], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1, err
    assert "has no tokenizer" in lines[0] and "--tokenizer PATH_OR_ID" in lines[0] and "tokenizer=" not in lines[0]
    assert not (tmp_path / "no").exists()

    code, out, err = cli([*base, "--tokenizer", bare / "tokenizer", "--out", tmp_path / "yes"], capsys)
    assert code == 0, err
    data = json.loads((tmp_path / "yes" / "result.json").read_text())
    assert data["provenance"]["corpus"]["tokenizer"].endswith(f"({bare / 'tokenizer'})")


def test_the_python_hint_names_the_argument_and_a_path_works(bare):
    with pytest.raises(EffdepthError, match="has no tokenizer") as caught:
        effdepth.measure(str(bare / "model"), [TEXT], seq_len=16, num_seqs=4, bootstrap=0, progress=False)
    assert "tokenizer= a tokenizer object, or the folder" in str(caught.value) and "--tokenizer" not in str(
        caught.value
    )

    by_path = effdepth.measure(
        str(bare / "model"),
        [TEXT],
        tokenizer=str(bare / "tokenizer"),
        seq_len=16,
        num_seqs=4,
        bootstrap=0,
        progress=False,
    )
    by_object = effdepth.measure(
        str(bare / "model"), [TEXT], tokenizer=byte_tokenizer(), seq_len=16, num_seqs=4, bootstrap=0, progress=False
    )
    assert by_path.provenance["corpus"]["sha256"] == by_object.provenance["corpus"]["sha256"]
    assert by_path.default.deff == by_object.default.deff


def test_the_corpus_hint_follows_the_interface_too():
    from effdepth.data import load_corpus
    from effdepth.errors import command_line

    with pytest.raises(EffdepthError, match="tokenizer= a tokenizer object"):
        load_corpus(["some text"], None, seq_len=4, num_seqs=1)
    with command_line(), pytest.raises(EffdepthError, match="--tokenizer PATH_OR_ID"):
        load_corpus(["some text"], None, seq_len=4, num_seqs=1)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("./no/such/tokenizer", "tokenizer ./no/such/tokenizer does not exist"),
        ("/no/such/tok.gguf", "tokenizer /no/such/tok.gguf does not exist"),
    ],
)
def test_a_missing_tokenizer_path_fails_before_anything_loads(bare, tmp_path, capsys, spec, message):
    code, _, err = cli(["measure", bare / "model", "--tokenizer", spec, "--out", tmp_path / "o"], capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_tokenizer_that_does_not_load_is_one_line(bare, tmp_path, capsys):
    code, _, err = cli(
        [
            "measure",
            bare / "model",
            "--corpus",
            bare / "text.txt",
            "--tokenizer",
            bare / "model",
            "--out",
            tmp_path / "o",
            "--no-progress",
        ],
        capsys,
    )
    assert code == 2 and f"cannot load tokenizer {bare / 'model'}" in err and len(err.strip().splitlines()) == 1
