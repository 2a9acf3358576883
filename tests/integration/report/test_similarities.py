"""Similarities side by side: every similarity named, the calibrated references in the decay profile,
summary rows per view and similarity, and old token-mode results saved before similarities were a choice
still load, show and report."""

import json
from pathlib import Path

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.models.tiny import tiny_model
from effdepth.report import figures
from effdepth.scale.suites import SuiteModel
from effdepth.scale.sweep import COLUMNS, Job, result_rows, write_table
from effdepth.scale.trajectory import TRAJECTORY_COLUMNS

OLD_TOKEN_RESULT = Path(__file__).parents[2] / "data" / "token-mode-result.json"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def every_similarity(tmp_path_factory):
    """A tiny Llama, every paper view, every similarity (cka primary, cka-debiased, cosine), calibrated references."""
    torch.manual_seed(3)
    r = effdepth.measure(
        tiny_model("llama"),
        torch.randint(0, 256, (12, 16)),
        views="paper",
        similarity="all",
        bootstrap=50,
        progress=False,
    )
    return r, r.save(tmp_path_factory.mktemp("all") / "run")


def test_show_names_every_similarity(every_similarity, capsys):
    result, path = every_similarity
    code, out, err = run(["show", path], capsys)
    assert code == 0, err
    assert list(result.similarities) == ["cka", "cka-debiased", "cosine"]
    for name in result.similarities:
        assert name in out


def test_passage_mode_always_shows_both_estimators(saved, capsys):
    code, out, _ = run(["show", saved["tiny"]], capsys)
    assert code == 0 and "cka-debiased" in out and "null" in out


def test_the_decay_profile_draws_the_references(every_similarity):
    result, _ = every_similarity
    fig = figures.profile_figure(result)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("matched" in x for x in labels) and any("F_L" in x for x in labels), labels


def test_summary_rows_per_view_and_similarity(every_similarity, tmp_path):
    result, _ = every_similarity
    rows = result_rows(Job(SuiteModel("tiny:llama"), {}), result)
    views = result.config["views"]
    assert [(r["similarity"], r["view"]) for r in rows][: len(views)] == [("cka", v) for v in views]
    assert {r["similarity"] for r in rows} == {"cka", "cka-debiased", "cosine"}
    cosine = next(r for r in rows if r["similarity"] == "cosine" and r["view"] == "default")
    assert cosine["D_eff"] == pytest.approx(result.view("default", similarity="cosine").deff)
    write_table(tmp_path, "summary", rows, COLUMNS)
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("view") + 1] == "similarity"
    assert "similarity" in TRAJECTORY_COLUMNS


# ---------------------------------------------------------------- results saved before similarities were a choice


@pytest.fixture(scope="module")
def old_result(tmp_path_factory):
    """An old token-mode result.json as effdepth wrote it before cka: one similarity, named only in the
    config, no ``similarities``/``unavailable``, no per-view ``definition``, no calibrated references."""
    data = json.loads(OLD_TOKEN_RESULT.read_text())
    data.pop("similarities", None)
    data.pop("unavailable", None)
    for key in (
        "similarities",
        "surrogate_seqs",
        "cka",
        "max_memory",
        "zero_states",
        "bootstrap_fits",
        "cosine_summaries",
    ):
        data["config"].pop(key, None)
    for v in data["views"].values():
        for key in ("definition", "left_out", "calibrated_sequences"):
            v.pop(key, None)
        for key in ("structural_cal", "matched_cal"):
            v["references"].pop(key, None)
            v["reference_profiles"].pop(key, None)
            (v["ci"] or {}).pop(f"reference_{key}", None)
    data["provenance"].update(model={"id": "old/model"}, corpus={"name": "old-corpus", "sha256": "0" * 64})
    folder = tmp_path_factory.mktemp("old")
    (folder / "result.json").write_text(json.dumps(data))
    return data["config"]["similarity"], folder


def test_old_results_load_show_report_and_check(old_result, tmp_path, capsys):
    similarity, folder = old_result
    raw = json.loads((folder / "result.json").read_text())
    assert "similarities" not in raw and "similarities" not in raw["config"]  # the premise
    result = effdepth.load(folder)
    assert result.primary_similarity == similarity and list(result.similarities) == [similarity]
    assert result.default.definition == similarity

    code, out, err = run(["show", folder], capsys)
    assert code == 0, err
    assert f"similarity {similarity} (" in out and f"views, similarity {similarity}:" in out
    assert "R_matched_cal" not in out and "definition sensitivity" not in out

    for name in ("r.html", "r.md"):
        code, _, err = run(["report", folder, "-o", tmp_path / name], capsys)
        assert code == 0, err
        text = (tmp_path / name).read_text()
        assert f"Similarity {similarity}." in text and "Does it reproduce the paper?" in text

    code, out, err = run(["claims", folder], capsys)
    assert code == 0, err
    assert "no calibrated reference" in out and "(5) " + similarity + ": not measured" in out
    rows = result_rows(Job(SuiteModel("old/model"), {}), result)
    assert [r["similarity"] for r in rows] == [similarity, similarity]
