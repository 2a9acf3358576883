"""A report over several results names every option that tells them apart, as the user typed it."""

import pytest

import effdepth
from effdepth.report.build import write_report
from effdepth.report.content import compare
from effdepth.report.sources import load_sources


def comparison(folders: list, tmp_path) -> tuple:
    """``(rows, legend)`` of the Markdown report's comparison: each row a ``{column: text}``, and each
    result's options that differ, ``{"#1": {"--flag": "value"}}``, from the legend under the table (its
    numbers alone make lines wider than ``markdown.LINE_WIDTH``)."""
    md = write_report(folders, tmp_path / "report.md")[0].read_text()
    lines = md.split("## Comparison", 1)[1].split("_Sorted by", 1)[0].strip().splitlines()
    table = [line for line in lines if line.startswith("|")]
    columns = [h.strip() for h in table[0].strip("|").split("|")]
    rows = [dict(zip(columns, (c.strip() for c in line.strip("|").split("|")))) for line in table[2:]]
    legend = {}
    for line in (line[2:] for line in lines if line.startswith("- #")):
        number, facts = line.split(": ", 1)
        legend[number] = dict(fact.split(" ", 1) for fact in facts.split("; "))
    assert not [c for c in columns if c.startswith("--")]  # the numbers alone are wider than LINE_WIDTH
    return rows, legend


def options_by_folder(rows: list, legend: dict) -> dict:
    """``{folder: {option: value}}``: each row's legend, its options starting with ``--``."""
    return {r["folder"]: {k: v for k, v in legend.get(f"#{r['#']}", {}).items() if k.startswith("--")} for r in rows}


def test_two_passage_splits_are_told_apart_by_the_flag(option_runs, tmp_path):
    rows, legend = comparison([option_runs["windows"], option_runs["paragraphs"]], tmp_path)
    assert options_by_folder(rows, legend) == {
        "windows": {"--passage-split": "windows"},
        "paragraphs": {"--passage-split": "paragraphs"},
    }
    html = write_report([option_runs["windows"], option_runs["paragraphs"]], tmp_path / "r.html")[0].read_text()
    comparison_html = html.split('<section id="comparison">', 1)[1].split("</table>", 1)[0]
    assert '<th scope="col">--passage-split</th>' in comparison_html
    assert "<td>windows</td>" in comparison_html and "<td>paragraphs</td>" in comparison_html


def test_seed_and_bootstrap_are_both_named(option_runs, tmp_path):
    rows, legend = comparison([option_runs["windows"], option_runs["seeded"]], tmp_path)
    assert options_by_folder(rows, legend) == {
        "windows": {"--seed": "0", "--bootstrap": "20"},
        "seeded": {"--seed": "3", "--bootstrap": "30"},
    }


def test_every_differing_option_is_named_and_nothing_that_never_changes_a_number(option_runs, tmp_path):
    header = compare.comparison_table(load_sources([option_runs["windows"], option_runs["many"]])).header
    flags = [h for h in header if h.startswith("--")]
    assert flags == [
        "--seed",
        "--bos",
        "--passage-split",
        "--views",
        "--similarity",
        "--include-embedding",
        "--bootstrap",
        "--bootstrap-units",
    ]
    assert "--max-memory" not in header and "--batch-size" not in header and "--device" not in header


def _variant(base, **config):
    r = effdepth.Result.from_dict(base.to_dict())
    r.config.update(config)
    return r


def test_comparison_shows_what_differs_and_always_tokens_per_sequence(bare_result, tmp_path):
    a = _variant(bare_result, seq_len=16, num_seqs=4, seed=0, add_bos=True).save(tmp_path / "short")
    b = _variant(bare_result, seq_len=64, num_seqs=4, seed=1, add_bos=True).save(tmp_path / "long")
    rows, legend = comparison([a, b], tmp_path)
    assert {"folder", "tokens/seq"} <= set(rows[0])
    assert sorted((r["folder"], r["tokens/seq"]) for r in rows) == [("long", "64"), ("short", "16")]
    assert options_by_folder(rows, legend) == {"long": {"--seed": "1"}, "short": {"--seed": "0"}}

    same = _variant(bare_result, seq_len=16).save(tmp_path / "same")
    again = _variant(bare_result, seq_len=16).save(tmp_path / "again")
    columns = compare.comparison_table(load_sources([same, again])).header
    assert "tokens/seq" in columns and "--seed" not in columns


@pytest.mark.parametrize("width", [None, 10_000])
def test_a_table_within_its_width_keeps_its_columns(option_runs, width):
    table = compare.comparison_table(load_sources([option_runs["windows"], option_runs["paragraphs"]]), width)
    assert "--passage-split" in table.header and not table.legend
