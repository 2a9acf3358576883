"""Passage-mode results in the HTML and Markdown reports: the same numbers as the terminal (each
estimator's null, the biased and debiased CKA side by side, R_corr, the paper's Table 2 row and, for
several results, the Table-2-style comparison), and F_L, never F_N, as their structural reference."""

import html
import re

import pytest

import effdepth
from effdepth.cli import main
from effdepth.report import figures, figures_ratios
from effdepth.report.build import write_report
from effdepth.report.numbers import fmt

PAPER_MODELS = {"pythia-70m": ("EleutherAI/pythia-70m", 1.23), "pythia-160m": ("EleutherAI/pythia-160m", 1.34)}


@pytest.fixture(scope="module")
def paper_results(saved, tmp_path_factory):
    """The tiny passage-mode result saved twice, as two of the paper's Table 2 models."""
    root = tmp_path_factory.mktemp("paper")
    folders = {}
    for name, (model_id, _) in PAPER_MODELS.items():
        r = effdepth.load(saved["tiny"])
        r.pooled = None  # the report reads result.json only
        r.provenance["model"] = {**r.provenance["model"], "id": model_id}
        folders[name] = r.save(root / name).parent
    return folders


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    return out.out


def html_text(path) -> str:
    """The page as text: symbols back to D_eff, F_L..., intervals after their values, one line per <br>."""
    page = path.read_text(encoding="utf-8")
    page = re.sub(r"<sub>(.*?)</sub>", r"_\1", page)
    page = page.replace('<span class="ci">', " ").replace("<br>", "\n")
    return html.unescape(re.sub(r"<[^>]+>", "", page))


def markdown_text(path) -> str:
    return re.sub(r"\\(.)", r"\1", path.read_text(encoding="utf-8"))


def squeeze(text: str) -> str:
    return " ".join(text.split())


def table_cells(terminal: str) -> set:
    """Every cell of the terminal's tables (columns are two or more spaces apart)."""
    cells = set()
    for line in terminal.splitlines():
        parts = re.split(r"\s{2,}", line.strip())
        if len(parts) > 2 and not set(line) <= {"-", " "}:
            cells |= {p for p in parts if p}
    return cells


@pytest.fixture(scope="module")
def one(paper_results, tmp_path_factory):
    folder = paper_results["pythia-70m"]
    out = tmp_path_factory.mktemp("one")
    return (
        folder,
        html_text(write_report([folder], out / "r.html")[0]),
        markdown_text(write_report([folder], out / "r.md")[0]),
    )


@pytest.mark.parametrize("fmt_index", [1, 2], ids=["html", "markdown"])
def test_a_passage_report_carries_every_number_the_terminal_shows(one, fmt_index, capsys):
    folder, report = one[0], one[fmt_index]
    terminal = run(["show", folder], capsys)
    flat = squeeze(report)
    missing = sorted(c for c in table_cells(terminal) if squeeze(c) not in flat)
    assert not missing, missing
    nulls = [line for line in terminal.splitlines() if line.startswith("estimator null")]
    assert [s for s in ("(cka,", "(cka-debiased,") if any(s in line for line in nulls)] == ["(cka,", "(cka-debiased,"]
    for line in nulls:  # the finite-sample null of each estimator, as the terminal states it
        assert squeeze(line) in flat, line


@pytest.mark.parametrize("fmt_index", [1, 2], ids=["html", "markdown"])
def test_a_passage_report_has_both_estimators_r_corr_and_the_table_2_row(one, fmt_index):
    folder, report = one[0], one[fmt_index]
    r = effdepth.load(folder)
    biased, debiased = r.similarities["cka"]["default"], r.similarities["cka-debiased"]["default"]
    for header in (
        "cka /F_L",
        "cka-debiased /F_L",
        "cka null/F_L",
        "cka-debiased null/F_L",
        "R_init",
        "R_size=F_norm",
        "R_matched=F_h0+norm",
        "R_corr=F_h0+corr",
        "structural_cal",
        "matched_cal",
    ):
        assert header in report, header
    for v in (biased, debiased):
        ratio = f"{fmt(v.ratio)} [{fmt(v.ci['ratio'][0])}, {fmt(v.ci['ratio'][1])}]"
        assert ratio in report and fmt(v.references["corr"]) in report
        assert fmt(v.references["structural_cal"] / v.reference) in report
    paper = PAPER_MODELS["pythia-70m"][1]
    assert "Table 2 (Pythia-70M; difference " + fmt(biased.deff - paper, 3, signed=True) in report
    assert fmt(debiased.deff - paper, 3, signed=True) in report and "paper (Table 2)" in report
    assert "D_eff / F_L" in report and "F_N" not in report.split("Does it reproduce the paper?")[0]


@pytest.mark.parametrize("suffix", ["html", "md"])
def test_a_report_of_two_passage_results_has_the_table_2_comparison(paper_results, tmp_path, suffix, capsys):
    terminal = run(["claims", *paper_results.values()], capsys)
    comparison = terminal.split("Beside the paper's Table 2", 1)[1].split("\n\n", 1)[0]
    out = write_report(list(paper_results.values()), tmp_path / f"r.{suffix}")[0]
    report = html_text(out) if suffix == "html" else markdown_text(out)
    section = squeeze(report.split("Beside the paper's Table 2 (similarity cka across passages)", 1)[1])
    rows = [line for line in comparison.splitlines() if "pythia-" in line]
    assert len(rows) == 2
    for row in rows:
        for cell in re.split(r"\s{2,}", row.strip()):
            assert cell in section, (row, cell)
    for _, deff in PAPER_MODELS.values():
        assert fmt(deff, 2) in section


def test_claims_on_one_passage_result_print_its_table_2_row_with_the_difference(paper_results, capsys):
    from effdepth.data.paper import table2_row

    terminal = run(["claims", paper_results["pythia-70m"]], capsys)
    comparison, verdicts = terminal.split("Beside the paper's Table 2", 1)[1].split("\n\n", 1)
    assert "sub-reference" in verdicts  # the claims follow the row
    header, row = comparison.splitlines()[1], next(line for line in comparison.splitlines() if "pythia-70m" in line)
    cells = dict(zip(re.split(r"\s{2,}", header.strip()), re.split(r"\s{2,}", row.strip())))
    ours = effdepth.load(paper_results["pythia-70m"]).similarities["cka"]["default"]
    paper = table2_row("EleutherAI/pythia-70m", None)
    assert cells["paper D_eff"] == fmt(paper.deff, 2) and cells["paper D_eff/L"] == fmt(paper.deff_per_layer)
    assert cells["paper gap %"] == fmt(paper.gap_pct, 1, signed=True)
    assert cells["D_eff"] == fmt(ours.deff) and cells["D_eff/L"] == fmt(ours.deff / ours.num_states)
    assert cells["diff"] == fmt(ours.deff - paper.deff, 3, signed=True)


def test_passage_figures_say_f_l_token_figures_f_n(tiny_result, tiny_token_result):
    assert figures_ratios.views_figure(tiny_result).axes[0].get_xlabel().endswith("$F_L$")
    assert figures_ratios.views_figure(tiny_token_result).axes[0].get_xlabel().endswith("$F_N$")
    names = [t.get_text() for t in figures.attribution_figure(tiny_result).axes[0].get_xticklabels()]
    assert names[0] == "$F_L$"
    assert "across passages" in figures.similarity_figure(tiny_result).axes[1].get_ylabel()
