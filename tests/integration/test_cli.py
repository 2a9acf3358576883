"""The CLI, called in-process."""

import json

import pytest

from effdepth.cli import default_out, main
from effdepth.data import byte_tokenizer


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "text.txt"
    p.write_text("Now is the winter of our discontent made glorious summer. " * 200)
    return p


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_measure_writes_result_and_prints_table(model_dir, corpus_file, tmp_path, capsys):
    code, out, err = run(
        [
            "measure",
            "--pooling",
            "none",
            model_dir,
            "--corpus",
            corpus_file,
            "--seq-len",
            16,
            "--num-seqs",
            6,
            "--batch-size",
            4,
            "--bootstrap",
            100,
            "--views",
            "default,drop-pos0",
            "--out",
            tmp_path / "r",
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    assert "D_eff" in out and "drop-pos0" in out  # the references table (R_matched) is show's: below
    data = json.loads((tmp_path / "r" / "result.json").read_text())
    assert data["config"]["num_seqs"] == 6 and set(data["views"]) == {"default", "drop-pos0"}
    assert data["provenance"]["corpus"]["sha256"]

    code, shown, _ = run(["show", tmp_path / "r"], capsys)
    assert code == 0 and "drop-pos0" in shown and "R_matched" in shown


@pytest.mark.parametrize(
    "argv, message",
    [
        (["measure", "--pooling", "none", "--seq-len", "1"], "--seq-len must be at least 2"),
        (["measure", "--pooling", "none", "--seq-len", "abc"], "expected an integer"),
        (["measure", "--pooling", "none", "--similarity", "cos"], "--similarity must be one of"),
        (["measure", "--pooling", "none", "--views", "bogus"], "unknown view component"),
        (["measure", "--pooling", "none", "/no/such/model.gguf"], "does not exist"),
        (["show", "/no/such/result"], "no result at"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_input_gives_one_line_error(argv, message, capsys, tmp_path):
    code, out, err = run(argv + (["--out", str(tmp_path)] if argv[0] == "measure" else []), capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("effdepth") and message in lines[0], err


def test_corpus_too_small(model_dir, tmp_path, capsys):
    small = tmp_path / "small.txt"
    small.write_text("tiny")
    code, _, err = run(
        ["measure", "--pooling", "none", model_dir, "--corpus", small, "--out", tmp_path / "o", "--no-progress"], capsys
    )
    assert code == 2 and "tokens" in err and len(err.strip().splitlines()) == 1


def test_unwritable_output_folder(model_dir, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = run(["measure", "--pooling", "none", model_dir, "--out", blocker / "sub", "--no-progress"], capsys)
    assert code == 2 and "cannot write to output folder" in err


def test_unsupported_architecture(tmp_path, capsys):
    from transformers import AutoConfig, AutoModelForCausalLM

    AutoModelForCausalLM.from_config(
        AutoConfig.for_model("mamba", num_hidden_layers=2, hidden_size=16, vocab_size=300, state_size=4)
    ).save_pretrained(tmp_path / "mamba")
    byte_tokenizer().save_pretrained(tmp_path / "mamba")
    code, _, err = run(
        ["measure", "--pooling", "none", tmp_path / "mamba", "--out", tmp_path / "o", "--no-progress"], capsys
    )
    assert code == 2 and "supported:" in err and "gpt_neox" in err


def test_default_out_stays_under_runs():
    assert default_out("../../etc/passwd").parts[0] == "runs"
    assert ".." not in default_out("../../etc/passwd").parts
    assert default_out(None).name == "smollm2-135m-instruct"


def test_a_failed_run_removes_the_output_folder_it_created(tmp_path, capsys):
    out = tmp_path / "new" / "run"
    code, _, err = run(["measure", "--pooling", "none", tmp_path / "nope.gguf", "--out", out, "--no-progress"], capsys)
    assert code == 2 and "does not exist" in err
    assert not out.exists() and not out.parent.exists() and tmp_path.is_dir()


def test_a_failed_run_keeps_a_folder_it_did_not_create_or_that_holds_something(tmp_path, capsys):
    existing = tmp_path / "existing"
    existing.mkdir()
    assert (
        run(["measure", "--pooling", "none", tmp_path / "nope.gguf", "--out", existing, "--no-progress"], capsys)[0]
        == 2
    )
    assert existing.is_dir()
    kept = tmp_path / "kept"
    (kept / "notes").mkdir(parents=True)
    assert run(["measure", "--pooling", "none", tmp_path / "nope.gguf", "--out", kept, "--no-progress"], capsys)[0] == 2
    assert (kept / "notes").is_dir()


def test_measure_prints_the_first_tables_and_show_the_rest(model_dir, corpus_file, tmp_path, capsys):
    """A terminal gets the headline, the views, the confounds and the sample size (the README's block);
    ``show`` prints every table with its notes, ``show --all`` the options and provenance too."""
    flags = ["--corpus", corpus_file, "--seq-len", 16, "--num-seqs", 32, "--bootstrap", 50, "--views", "paper"]
    code, out, err = run(
        ["measure", model_dir, *flags, "--out", tmp_path / "r", "--no-progress", "--no-figures"], capsys
    )
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert lines[2].startswith("D_eff = ") and lines[3].startswith("estimator null (cka, ")
    for title in ("views:", "confounds: first position and passage length:", "sample size:"):
        assert title in lines
    assert "references:" not in lines and "R_matched" not in out
    assert f"effdepth show {tmp_path / 'r'} prints these tables with their notes and 5 more" in out

    code, shown, _ = run(["show", tmp_path / "r"], capsys)
    assert code == 0 and "references:" in shown and "R_matched" in shown
    assert all(line in shown.splitlines() for line in lines[:16])  # the same headline and views
    code, everything, _ = run(["show", tmp_path / "r", "--all"], capsys)
    assert everything.startswith(shown.rstrip("\n")) and "configuration:" in everything and "num_seqs" in everything
