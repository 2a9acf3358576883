"""Token-mode results written before the token reduction (statistics summed over tokens, no samples kept)
still load and show: the tables, the report, the figures and the claims read their saved fields."""

import shutil
from pathlib import Path

import pytest

import effdepth
from effdepth.cli import main
from effdepth.report.content import result_content
from effdepth.report.content.tokens import headline, references_table, sensitivity_table, views_table

OLD_TOKEN_RESULT = Path(__file__).parents[2] / "data" / "token-mode-result.json"


@pytest.fixture
def saved(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    shutil.copy(OLD_TOKEN_RESULT, folder / "result.json")
    return folder


def test_an_old_token_result_loads_as_it_was_saved():
    r = effdepth.load(OLD_TOKEN_RESULT)
    assert not r.passages and not r.token_samples
    assert r.config["pooling"] == "none" and list(r.similarities) == ["cka", "frobenius"]
    assert r.default.deff == pytest.approx(1.1214691273872783, abs=1e-12)


def test_its_report_content_reads_the_saved_fields(tiny_token_result):
    content = result_content(tiny_token_result)
    assert [s.heading for s in content.sections][:2] == ["Views", "References"]
    assert headline(tiny_token_result).startswith("D_eff = ")
    assert [row[0].text for row in views_table(tiny_token_result).rows] == ["default", "top1pc"]
    assert references_table(tiny_token_result).header[1] == "F_N"
    assert sensitivity_table(tiny_token_result).header[0] == "view"


def test_show_report_and_claims_run_on_it(saved, tmp_path, capsys):
    assert main(["show", str(saved)]) == 0
    assert "D_eff" in capsys.readouterr().out
    assert main(["report", str(saved), "--output", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").stat().st_size > 1000
    assert main(["claims", str(saved)]) in (0, 1)


def test_analyse_and_recompose_refuse_it_in_one_line(saved, capsys):
    assert main(["analyse", str(saved)]) == 2
    err = capsys.readouterr().err.strip()
    assert "old token-mode result" in err and "\n" not in err
