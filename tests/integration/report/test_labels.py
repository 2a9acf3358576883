"""Labels and output edges (issue "a new user's afternoon"): intervened results say their carry,
comparisons show what differs (test_compare_options.py), F_L (never F_N) as the one name of the structural reference, one attribution sign, report suffixes,
every saved kind loads and shows, stale figures go, unreadable result.json is a one-line error."""

import json
import re

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.models.tiny import tiny_model
from effdepth.report import figures
from effdepth.report.build import write_report
from effdepth.report.content import captions, tokens
from effdepth.report.numbers import fmt
from effdepth.report.plain import write_result
from effdepth.report.tables import result_summary_text
from effdepth.report.wording import ATTRIBUTION
from effdepth.scale.sweep import sweep
from effdepth.scale.sweep.report import suite_summary_text
from effdepth.studies.experiment import ExperimentResult
from effdepth.studies.experiment.report import experiment_final_table
from effdepth.studies.intervene import InterventionResult
from effdepth.studies.intervene.report import intervention_table


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_line_error(code, err, pattern):
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("effdepth: error: "), err
    assert re.search(pattern, lines[0]), lines[0]


# ---------------------------------------------------------------- 2. intervened results say their carry


@pytest.fixture(scope="module")
def carried(tmp_path_factory):
    torch.manual_seed(5)
    ir = effdepth.intervene(
        tiny_model("llama"),
        torch.randint(0, 256, (4, 12)),
        carry=(1, 0.5),
        layers="1-2",
        views="default,drop-pos0",
        bootstrap=20,
        progress=False,
        pooling="none",
    )
    out = tmp_path_factory.mktemp("carry")
    ir.save(out)
    return ir, out


def test_show_and_report_say_the_carry(carried, tmp_path, capsys):
    _, out = carried
    code, shown, err = run(["show", out / "carry-0.5"], capsys)
    assert code == 0, err
    assert "intervened model: residual carry 0.5 on blocks 1,2" in shown

    html = write_report([out / "carry-0.5"], tmp_path / "one.html")[0].read_text()
    assert re.search(r"<title>Effective depth of [^<]* carry 0\.5</title>", html)
    assert "residual carry 0.5 on blocks 1,2" in html
    assert html.count("residual carry 0.5 on blocks 1,2") >= 2  # the title and the headline


def test_a_report_over_carry_results_has_a_carry_column(carried, tmp_path):
    _, out = carried
    text = write_report([out], tmp_path / "all.md")[0].read_text()
    table = text.split("## Comparison", 1)[1].split("\n\n", 2)[1]
    header = [h.strip() for h in table.splitlines()[0].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]
    col = header.index("carry")
    assert len(rows) == 2 and sorted(r[col] for r in rows) == ["0.5", "1"]


# ---------------------------------------------------------------- 4. F_L, one name, also over N = L + 1 states


def test_embedding_included_says_f_l_with_n(tmp_path):
    outcome = sweep(
        ["tiny:gpt2"],
        tmp_path,
        corpus=["To be, or not to be, that is the question. " * 30],
        seq_len=8,
        num_seqs=4,
        bootstrap=0,
        include_embedding=True,
        figures=False,
        report=False,
        pooling="none",
    )
    row = outcome.rows[0]
    assert row["L"] == 3 and row["N"] == 4 and row["F_L"] == pytest.approx(2 * 4 / 5)
    header = (tmp_path / "summary.csv").read_text().splitlines()[0].split(",")
    assert "F_L" in header and "F_N" not in header
    text = suite_summary_text(outcome.rows)
    head, _, line = text.splitlines()[:3]
    assert "F_L" in head.split() and "F_N" not in text
    assert line.split()[4] == "4" and "1.600" in line

    r = effdepth.from_states(torch.randn(4, 8, 8, 16), include_embedding=True)
    ir = InterventionResult((1.0,), (1, 2, 3), {1.0: r})
    assert "F_L" in intervention_table(ir).splitlines()[0].split() and "F_N" not in intervention_table(ir)
    rec = {
        "lam": 1.0,
        "seed": 0,
        "step": 3,
        "deff": 1.2,
        "deff_ci": None,
        "reference": 1.6,
        "ratio": 0.75,
        "loss": 2.0,
        "reference_init": 1.5,
        "reference_size": 1.6,
        "reference_matched": 1.4,
        "train_loss": 2.1,
    }
    assert "F_L" in experiment_final_table(ExperimentResult({}, [rec])).splitlines()[0].split()


# ---------------------------------------------------------------- 5. one attribution sign


def test_attribution_has_one_sign_in_table_figure_caption_and_note(tiny_token_result):
    tiny_result = tiny_token_result
    v = tiny_result.default
    text = result_summary_text(tiny_result)
    row = next(line for line in text.splitlines() if line.startswith("default "))
    shown = [cell.split()[0] for cell in re.split(r"\s{2,}", row.strip())[-3:]]  # each value before its interval
    terms = [v.attribution[k] for k in ("initial_state", "size_imbalance", "correlated_updates")]
    assert shown == [fmt(t, signed=True) for t in terms]

    fig = figures.attribution_figure(tiny_result)
    labels = [t.get_text() for t in fig.axes[0].texts]
    assert [x for x in labels if x.startswith(("+", "-"))] == shown  # the bars say what the table says
    ax = fig.axes[0]
    steps = [p for p in ax.patches if p.get_width() > 0][1:4]
    for bar, term in zip(steps, terms):
        assert bar.get_height() == pytest.approx(-term)  # positive term: the bar goes down, below F_N
    assert "positive (hatched red) pushes" in fig.get_supxlabel()

    assert ATTRIBUTION in text
    assert ATTRIBUTION in tokens.views_table(tiny_result).note
    assert ATTRIBUTION in captions.FIGURES["attribution"][1]
    assert "positive term pushes D_eff below F_N" in ATTRIBUTION and "docs/method.md#attribution" in ATTRIBUTION


# ---------------------------------------------------------------- 11. report suffixes


@pytest.mark.parametrize(
    "name, extra, pattern",
    [
        (
            "x.pdf",
            [],
            r"cannot write a report to .*x\.pdf: effdepth writes HTML \(\.html, \.htm\) or Markdown \(\.md, \.markdown\)",
        ),
        ("x.txt", [], r"\.html, \.htm.*\.md, \.markdown"),
        ("x", [], r"\.html, \.htm.*\.md, \.markdown"),
        ("x.html", ["--format", "md"], r"--format md writes \.md or \.markdown"),
    ],
)
def test_report_refuses_suffixes_it_cannot_write(saved, tmp_path, name, extra, pattern, capsys):
    code, out, err = run(["report", saved["bare"], "-o", tmp_path / name, *extra], capsys)
    assert_one_line_error(code, err, pattern)
    assert not (tmp_path / name).exists() and out == ""


def test_report_writes_htm(saved, tmp_path, capsys):
    code, _, err = run(["report", saved["bare"], "-o", tmp_path / "x.htm"], capsys)
    assert code == 0, err
    assert (tmp_path / "x.htm").read_text().startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------- 12. every saved kind loads and shows


@pytest.fixture(scope="module")
def trajectory_folder(tmp_path_factory):
    from effdepth.data import byte_tokenizer
    from effdepth.scale.trajectory import trajectory

    d = tmp_path_factory.mktemp("traj")
    for step, seed in ((0, 0), (100, 1)):
        tiny_model("gpt2", seed=seed).save_pretrained(d / "ckpts" / f"step-{step}")
        byte_tokenizer().save_pretrained(d / "ckpts" / f"step-{step}")
    trajectory(
        d / "ckpts",
        d / "out",
        corpus=["To be, or not to be. " * 20],
        seq_len=8,
        num_seqs=4,
        bootstrap=0,
        figures=False,
        pooling="none",
    )
    return d / "out"


def test_load_and_show_an_intervention(carried, capsys):
    ir, out = carried
    for path in (out, out / "intervention.json"):
        loaded = effdepth.load(path)
        assert isinstance(loaded, InterventionResult) and loaded.carries == (1.0, 0.5)
        code, shown, err = run(["show", path], capsys)
        assert code == 0, err
        assert "carry on blocks 1,2" in shown and "view drop-pos0:" in shown
        assert shown.count("F_L") == 2 and "0.5" in shown


def test_load_and_show_an_experiment(tmp_path, capsys):
    cfg = {
        "layers": 2,
        "d_model": 8,
        "steps": 3,
        "batch_size": 2,
        "seq_len": 8,
        "seed_list": [0],
        "eval_seqs": 2,
        "similarity": "cka",
    }
    rec = {
        "lam": 0.5,
        "seed": 0,
        "step": 3,
        "deff": 1.2,
        "deff_ci": [1.1, 1.3],
        "reference": 1.333,
        "ratio": 0.9,
        "loss": 2.0,
        "reference_init": 1.3,
        "reference_size": 1.3,
        "reference_matched": 1.2,
        "train_loss": 2.1,
    }
    path = ExperimentResult(cfg, [rec]).save(tmp_path)
    loaded = effdepth.load(path)
    assert isinstance(loaded, ExperimentResult) and loaded.records == [rec]
    code, shown, err = run(["show", tmp_path], capsys)
    assert code == 0, err
    assert "carry experiment: 2-layer Llama" in shown and "[1.100, 1.300]" in shown and "D_eff lam=0.5" in shown
    assert "(cka, N = 2)" in shown


def test_load_and_show_a_trajectory(trajectory_folder, capsys):
    loaded = effdepth.load(trajectory_folder / "trajectory.json")
    assert isinstance(loaded, effdepth.SavedTrajectory)
    assert [(r["revision"], r["step"], r["similarity"]) for r in loaded.rows] == [
        ("step-0", 0, "cka"),
        ("step-0", 0, "cka-debiased"),
        ("step-100", 100, "cka"),
        ("step-100", 100, "cka-debiased"),
    ]
    assert isinstance(loaded.rows[0]["D_eff"], float) and loaded.rows[0]["F_L"] == pytest.approx(1.5)
    code, shown, err = run(["show", trajectory_folder], capsys)
    assert code == 0, err
    assert "trajectory of" in shown and "step-100" in shown and "F_L" in shown

    # A trajectory.json without its schema is not taken for one: one line that says what can be read.
    data = json.loads((trajectory_folder / "trajectory.json").read_text())
    data.pop("schema")
    old = trajectory_folder / "old"
    old.mkdir()
    (old / "trajectory.json").write_text(json.dumps(data))
    with pytest.raises(effdepth.EffdepthError, match="is not an effdepth file"):
        effdepth.load(old)


@pytest.mark.parametrize(
    "content_, pattern",
    [
        ("{not json", r"is not a readable result file \(JSONDecodeError\)"),
        (
            json.dumps({"schema": "something/else"}),
            r"is not an effdepth file \(schema 'something/else'\).*intervention\.json",
        ),
    ],
)
def test_show_refuses_what_it_cannot_read_in_one_line(tmp_path, content_, pattern, capsys):
    (tmp_path / "result.json").write_text(content_)
    code, _, err = run(["show", tmp_path], capsys)
    assert_one_line_error(code, err, pattern)
    with pytest.raises(effdepth.EffdepthError, match=pattern):
        effdepth.load(tmp_path)


def test_report_refuses_a_result_json_that_is_not_json(tmp_path, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "result.json").write_text('{"schema": "effdepth.result/1", "views": ')
    code, _, err = run(["report", tmp_path / "run", "-o", tmp_path / "r.html"], capsys)
    assert_one_line_error(code, err, r"result\.json is not a readable result file")
    assert not (tmp_path / "r.html").exists()


def test_an_empty_folder_names_what_can_be_shown(tmp_path, capsys):
    code, _, err = run(["show", tmp_path], capsys)
    assert_one_line_error(
        code, err, r"no result at .*result\.json, intervention\.json, experiment\.json, trajectory\.json"
    )


# ---------------------------------------------------------------- 13b. no stale figures


def test_rewriting_figures_removes_those_of_views_no_longer_measured(tmp_path, capsys):
    two_views = effdepth.from_states(torch.randn(4, 8, 8, 8).cumsum(0), views="default,drop-pos0")
    figures.write_figures(two_views, tmp_path)
    (tmp_path / "notes.png").write_bytes(b"mine")  # not effdepth's: left alone
    assert (tmp_path / "views.png").is_file()
    one_view = effdepth.Result.from_dict(two_views.to_dict())
    one_view.views = {"default": one_view.views["default"]}
    figures.write_figures(one_view, tmp_path)
    assert not (tmp_path / "views.png").exists() and not (tmp_path / "views.pdf").exists()
    assert (tmp_path / "profile.png").is_file() and (tmp_path / "notes.png").read_bytes() == b"mine"

    write_result(one_view, tmp_path, figures=False)  # a re-measure with --no-figures
    out = capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.png", "result.json"]
    assert "removed 14 figures of an earlier result" in out
