"""Similarities side by side: every table names its similarity, a definition-sensitivity table when
several were computed, unavailable views as words with their reason, the calibrated references in the
references table and the decay profile, summary rows per view and similarity, and results saved
before any of this still load, show and report."""

import json
import re

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.report import figures
from effdepth.report.build import write_report
from effdepth.report.markdown import render_markdown
from effdepth.report.sources import load_sources
from effdepth.suites import SuiteModel
from effdepth.sweep import COLUMNS, Job, result_rows, write_table
from effdepth.tiny import tiny_model
from effdepth.trajectory import TRAJECTORY_COLUMNS

REASON = "pos0-only keeps one token per sequence; cka needs at least 4"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def every_similarity(tmp_path_factory):
    """A tiny Llama, every paper view, cka (primary), frobenius and token, calibrated references."""
    torch.manual_seed(3)
    r = effdepth.measure(
        tiny_model("llama"),
        torch.randint(0, 256, (6, 16)),
        views="paper",
        similarity="all",
        bootstrap=50,
        progress=False,
        pooling="none",
    )
    return r, r.save(tmp_path_factory.mktemp("all") / "run")


def section(text: str, title: str) -> str:
    """The lines of the terminal block that starts with ``title``, up to the next blank line."""
    return text.split(title, 1)[1].split("\n\n", 1)[0]


def test_show_names_the_similarity_of_every_table(every_similarity, capsys):
    _, path = every_similarity
    code, out, err = run(["show", path], capsys)
    assert code == 0, err
    assert "similarity cka (cross-sequence linear CKA), also frobenius and token" in out.splitlines()[0]
    headline = out.splitlines()[1]
    assert "similarity cka; 16 tokens per sequence" in headline and headline.endswith("[view default].")
    assert "views, similarity cka:" in out and "references, similarity cka:" in out
    header = re.split(r"\s{2,}", section(out, "definition sensitivity").splitlines()[1].strip())
    assert header == ["view"] + [f"{s} D_eff / F_N" for s in ("cka", "frobenius", "token")] + [
        f"{s} D_eff" for s in ("cka", "frobenius", "token")
    ]


def test_unavailable_views_are_words_with_their_reason_never_numbers(every_similarity, capsys):
    result, path = every_similarity
    assert "pos0-only" in result.unavailable["cka"]
    _, out, _ = run(["show", path], capsys)
    for title in ("views, similarity cka:", "references, similarity cka:"):
        rows = [line for line in section(out, title).splitlines() if line.split()[:1] == ["pos0-only"]]
        assert len(rows) == 1 and rows[0].split() == ["pos0-only", "unavailable"], rows
        assert f"pos0-only: unavailable: {REASON}" in section(out, title)
    sensitivity = section(out, "definition sensitivity")
    row = next(line for line in sensitivity.splitlines() if line.startswith("pos0-only"))
    cells = re.split(r"\s{2,}", row.strip())
    frobenius = result.view("pos0-only", similarity="frobenius")
    assert cells[1] == "unavailable" and cells[2].startswith(f"{frobenius.ratio:.3f}")

    html = write_report([path], path.parent / "r.html")[0].read_text()
    for table in re.findall(r"<table>.*?</table>", html, flags=re.S):
        for tr in re.findall(r"<tr><td>pos0-only</td>(.*?)</tr>", table, flags=re.S):
            cka_cell = re.findall(r"<td[^>]*>(.*?)</td>", tr, flags=re.S)[0]
            if "unavailable" in cka_cell:
                assert REASON in cka_cell or cka_cell == "unavailable"
                assert not re.search(r"\d\.\d{3}", cka_cell)
    assert html.count(REASON) >= 3  # views, references, definition sensitivity


def test_references_show_the_calibrated_references_with_intervals(every_similarity, capsys):
    result, path = every_similarity
    _, out, _ = run(["show", path], capsys)
    refs = section(out, "references, similarity cka:")
    assert refs.splitlines()[1].split() == [
        "view",
        "F_N",
        "R_init",
        "R_size",
        "R_matched",
        "R_structural_cal",
        "R_matched_cal",
        "D_eff",
    ]
    v = result.default
    for key in ("structural_cal", "matched_cal"):
        lo, hi = v.ci[f"reference_{key}"]
        assert f"{v.references[key]:.3f} [{lo:.3f}, {hi:.3f}]" in refs
    text, _ = render_markdown(load_sources([path]))
    assert "| R_matched | R_structural_cal | R_matched_cal | D_eff |" in text
    assert f"{v.references['matched_cal']:.3f} [{v.ci['reference_matched_cal'][0]:.3f}," in text


def test_the_report_has_a_definition_sensitivity_table(every_similarity, tmp_path):
    _, path = every_similarity
    md = write_report([path], tmp_path / "r.md")[0].read_text()
    table = md.split("### Definition sensitivity", 1)[1].split("###", 1)[0]
    assert "| view | cka D_eff / F_N | frobenius D_eff / F_N | token D_eff / F_N |" in table
    assert f"| pos0-only | unavailable: {REASON} |" in table
    html = write_report([path], tmp_path / "r.html")[0].read_text()
    assert "Definition sensitivity</h3>" in html and "cross-sequence linear CKA" in html


def test_one_similarity_has_no_sensitivity_table(saved, capsys, tmp_path):
    code, out, _ = run(["show", saved["tiny-token"]], capsys)
    assert code == 0 and "definition sensitivity" not in out
    assert "Definition sensitivity" not in write_report([saved["tiny-token"]], tmp_path / "r.md")[0].read_text()


def test_passage_mode_always_shows_both_estimators(saved, capsys):
    code, out, _ = run(["show", saved["tiny"]], capsys)
    assert code == 0 and "cka-debiased" in out and "null" in out


def test_the_decay_profile_draws_the_calibrated_references(every_similarity):
    result, _ = every_similarity
    fig = figures.profile_figure(result)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    refs = result.default.references
    assert any("structural" in x and f"({refs['structural_cal']:.3f})" in x for x in labels), labels
    assert any("matched\\,cal" in x and f"({refs['matched_cal']:.3f})" in x for x in labels), labels
    assert "similarity cka" in fig.axes[0].get_title()


def test_summary_rows_per_view_and_similarity(every_similarity, tmp_path):
    result, _ = every_similarity
    rows = result_rows(Job(SuiteModel("tiny:llama"), {}), result)
    assert [(r["similarity"], r["view"]) for r in rows][:6] == [("cka", v) for v in result.config["views"]]
    assert len(rows) == 3 * 6 and {r["similarity"] for r in rows} == {"cka", "frobenius", "token"}
    gone = [r for r in rows if r["status"] == "unavailable"]
    assert [(r["similarity"], r["view"], r["error"]) for r in gone] == [("cka", "pos0-only", REASON)]
    assert gone[0]["D_eff"] is None and gone[0]["F_N"] is None
    token = next(r for r in rows if r["similarity"] == "token" and r["view"] == "default")
    assert token["D_eff"] == pytest.approx(result.view("default", similarity="token").deff)
    assert token["R_matched_cal"] == pytest.approx(result.view("default", similarity="token").references["matched_cal"])
    write_table(tmp_path, "summary", rows, COLUMNS)
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert header[header.index("view") + 1] == "similarity" and "F_N" in header and "F_L" not in header
    assert "similarity" in TRAJECTORY_COLUMNS and "F_N" in TRAJECTORY_COLUMNS and "F_L" not in TRAJECTORY_COLUMNS


# ---------------------------------------------------------------- results saved before similarities were a choice


@pytest.fixture(scope="module", params=["frobenius", "token"])
def old_result(request, tmp_path_factory):
    """A result.json as effdepth wrote it before cka: one similarity, named only in the config, no
    ``similarities``/``unavailable``, no per-view ``definition``, no calibrated references."""
    g = torch.Generator().manual_seed(4)
    states = torch.randn(5, 4, 8, 16, generator=g).cumsum(0)
    data = effdepth.from_states(states, views="default,drop-pos0", similarity=request.param, bootstrap=20).to_dict()
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
    folder = tmp_path_factory.mktemp(f"old-{request.param}")
    (folder / "result.json").write_text(json.dumps(data))
    return request.param, folder


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
