"""`effdepth report`, `effdepth show` and the figures of `effdepth measure`, called in-process."""

import json
import re

import pytest

import effdepth
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.models.tiny import tiny_model
from effdepth.report import figures


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code, err, message):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("effdepth: error: ") and re.search(message, lines[0]), err


# The loader's wording for a file that is JSON but not a (complete) result.
NOT_A_RESULT = "not an effdepth result|not a complete effdepth result|damaged effdepth result"


def test_report_html_of_one_result(saved, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    code, stdout, err = run(["report", saved["bare"] / "result.json", "-o", out], capsys)
    assert code == 0, err
    assert f"wrote {out}" in stdout
    text = out.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "Comparison" not in text and "Effective depth of states" in text


def copies(result, root, *folders):
    """The same result saved in several (nested) folders."""
    for folder in folders:
        result.save(root / folder)
    return root


def test_report_html_of_a_folder_compares_every_result(bare_result, tmp_path, capsys):
    root = copies(bare_result, tmp_path / "runs", "a", "b/c/d")
    (root / ".hidden").mkdir()
    (root / ".hidden" / "result.json").write_text("not even json")  # hidden folders are skipped
    out = tmp_path / "all.html"
    code, _, err = run(["report", root, "-o", out], capsys)
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    assert "comparison of 2 results" in text and text.count('<section id="result-') == 2
    assert "states (1)" in text and "states (2)" in text  # same model twice: told apart


def test_report_markdown(bare_result, tmp_path, capsys):
    root = copies(bare_result, tmp_path / "runs", "a", "b")
    out = tmp_path / "paper" / "report.md"
    code, stdout, err = run(["report", root / "a", root / "b" / "result.json", "--format", "md", "-o", out], capsys)
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    per_result = len(list(figures.standard_figures(bare_result)))
    assert images[0] == "report_files/comparison.png" and len(images) == 1 + 2 * per_result  # comparison, 2 results
    for rel in images:
        assert (out.parent / rel).read_bytes()[:4] == b"\x89PNG"
    assert "| view | D_eff |" in text and "| default |" in text and "### Provenance" in text
    assert "report_files" in stdout
    # The same report name again, of one result: the comparison's images go; nothing else of the folder.
    (out.parent / "report_files" / "notes.txt").write_text("mine")
    assert run(["report", root / "a", "-o", out], capsys)[0] == 0
    kept = sorted(p.name for p in (out.parent / "report_files").iterdir())
    used = sorted(
        rel.split("/", 1)[1] for rel in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", out.read_text(encoding="utf-8"))
    )
    assert kept == sorted(used + ["notes.txt"])


def test_markdown_follows_the_suffix(saved, tmp_path, capsys):
    code, _, err = run(["report", saved["bare"], "-o", tmp_path / "notes.md"], capsys)
    assert code == 0, err
    assert (tmp_path / "notes.md").read_text().startswith("# Effective depth of states")
    assert sorted(p.name for p in (tmp_path / "notes_files").iterdir()) == [
        "attribution.png",
        "confounds.png",
        "layers.png",
        "profile.png",
        "sample_size.png",
        "sensitivity.png",
        "similarity.png",
    ]


def test_show_prints_extras(gappy_result, tmp_path, capsys):
    path = gappy_result.save(tmp_path / "g")
    code, out, err = run(["show", path], capsys)
    assert code == 0, err
    assert "D_eff" in out and "loss.mean" in out and "2.250" in out and "loss.tokens" in out


def test_show_without_extras_is_unchanged(saved, capsys):
    code, out, _ = run(["show", saved["tiny"]], capsys)
    assert code == 0 and "R_matched" in out and "extra" not in out


@pytest.fixture
def not_results(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "other.json").write_text(json.dumps({"hello": "world"}))
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    (tmp_path / "old.json").write_text(json.dumps({"schema": "effdepth.result/1", "views": {"default": {"name": "x"}}}))
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "blocker").write_text("")
    return tmp_path


@pytest.mark.parametrize(
    "args, message",
    [
        (["empty"], "no result.json under"),
        (["missing"], "no such file or folder"),
        (["other.json"], "other.json: .*(" + NOT_A_RESULT + ")"),
        (["list.json"], "list.json.*(" + NOT_A_RESULT + ")"),
        (["old.json"], "old.json.*(" + NOT_A_RESULT + ")"),
        (["binary.json"], "binary.json is not a readable result file"),
    ],
)
def test_report_bad_input_is_one_line_error(not_results, args, message, capsys):
    code, _, err = run(["report", *(not_results / a for a in args), "-o", not_results / "out.html"], capsys)
    assert_one_line_error(code, err, message)
    assert not (not_results / "out.html").exists()


@pytest.mark.parametrize("output", ["blocker/sub/report.html", "blocker/sub/report.md"])
def test_report_unwritable_output_is_one_line_error(saved, not_results, output, capsys):
    code, _, err = run(["report", saved["bare"], "-o", not_results / output], capsys)
    assert_one_line_error(code, err, "cannot write to")


def test_report_needs_a_result_argument(capsys):
    code, _, err = run(["report"], capsys)
    assert_one_line_error(code, err, "the following arguments are required")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-llama")
    tiny_model("llama").save_pretrained(d)
    byte_tokenizer().save_pretrained(d)
    (d / "corpus.txt").write_text("Now is the winter of our discontent made glorious summer. " * 40)
    return d


@pytest.mark.parametrize("flag", [[], ["--no-figures"]])
def test_measure_writes_figures_next_to_the_result(model_dir, flag, tmp_path, capsys):
    out = tmp_path / "run"
    code, stdout, err = run(
        [
            "measure",
            "--pooling",
            "none",
            model_dir,
            "--corpus",
            model_dir / "corpus.txt",
            "--seq-len",
            16,
            "--num-seqs",
            4,
            "--bootstrap",
            20,
            "--views",
            "default,drop-pos0",
            "--out",
            out,
            "--no-progress",
            *flag,
        ],
        capsys,
    )
    assert code == 0, err
    names = sorted(p.name for p in out.iterdir())
    if flag:
        assert names == ["pooled", "result.json"] and "figures to" not in stdout
    else:
        stems = [stem for stem, _ in figures.standard_figures(effdepth.load(out))]
        assert names == sorted([f"{s}.{e}" for s in stems for e in ("pdf", "png")] + ["pooled", "result.json"])
        assert f"wrote {2 * len(stems)} figures to {out}" in stdout
