"""`effdepth claims`: the paper's five claims on a saved result, on a hand-made result whose
verdicts are known, on a sweep folder, and one-line errors for input it cannot check."""

import copy
import json
import re

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.results.result import Result, ViewResult
from effdepth.results.verdicts import CLAIM_NAMES, FAILS, HOLDS, NOT_MEASURED, check_claims, verdict_grid
from effdepth.scale.sweep import sweep
from effdepth.studies.claims import check_paths


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def verdict_table(text: str, sims: list) -> dict:
    """``{claim number: {similarity: verdict}}`` from the printed claims table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("#  claim"))
    grid = {}
    for line in lines[start + 2 : start + 2 + len(CLAIM_NAMES)]:
        cells = re.split(r"\s{2,}", line.strip())
        grid[int(cells[0])] = dict(zip(sims, cells[2:]))
    return grid


# ---------------------------------------------------------------- a real (tiny) result, every similarity


@pytest.fixture(scope="module")
def measured(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("claims") / "run"
    corpus = out.parent / "text.txt"
    corpus.write_text("Now is the winter of our discontent made glorious summer by this sun of York. " * 60)
    code = main(
        [
            "measure",
            "--pooling",
            "none",
            "--tokens-per-passage",
            "8",
            str(model_dir),
            "--corpus",
            str(corpus),
            "--seq-len",
            "16",
            "--num-seqs",
            "6",
            "--bootstrap",
            "50",
            "--views",
            "paper",
            "--similarity",
            "all",
            "--out",
            str(out),
            "--no-progress",
            "--no-figures",
        ]
    )
    assert code == 0
    return out


def test_claims_on_a_saved_result(measured, capsys):
    code, out, err = run(["claims", measured], capsys)
    assert code == 0 and err == ""
    result = effdepth.load(measured)
    similarities = ["cka", "cka-debiased", "cosine"]
    grid = verdict_table(out, similarities)
    expected = verdict_grid(check_claims(result))
    for i, name in enumerate(CLAIM_NAMES, start=1):
        assert grid[i] == {s: expected[name][s].status for s in similarities}
        assert set(grid[i].values()) <= {HOLDS, FAILS, NOT_MEASURED}
    # The numbers behind every verdict: 6 claims x 3 similarities, with intervals.
    evidence = [line for line in out.splitlines() if re.match(r"\(\d\) (cka|cka-debiased|cosine): ", line)]
    assert len(evidence) == 18
    v = result.default
    assert f"D_eff {v.deff:.3f} [{v.ci['deff'][0]:.3f}, {v.ci['deff'][1]:.3f}] below F_L {v.reference:.3f}" in out
    assert "R_matched_cal" in out


# ---------------------------------------------------------------- known verdicts


def _view(
    template: ViewResult,
    name: str,
    deff: float,
    ci=(0.0, 0.0),
    terms=(0.1, 0.1, 0.1),
    term_ci=None,
    cal=None,
    definition="frobenius",
) -> ViewResult:
    """``template`` with the numbers the claims read set by hand; ``ci=None``: no bootstrap."""
    v = copy.deepcopy(template)
    v.name, v.definition, v.deff, v.reference = name, definition, deff, 1.5
    v.ratio, v.gap_pct = deff / 1.5, 100 * (1 - deff / 1.5)
    v.attribution = dict(zip(("initial_state", "size_imbalance", "correlated_updates"), terms))
    v.references = {"init": 1.5 - terms[0], "size": 1.4, "matched": 1.5 - terms[0] - terms[1]}
    v.ci = None
    if ci is not None:
        v.ci = {
            "level": 0.95,
            "resamples": 100,
            "units": 4,
            "deff": list(ci),
            "correlated_updates": list(term_ci or (terms[2] - 0.05, terms[2] + 0.05)),
        }
    if cal is not None:
        v.references["matched_cal"] = cal[0]
        if v.ci is not None:
            v.ci["reference_matched_cal"] = list(cal[1])
    return v


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    """frobenius: 1 holds, 2 holds, 3 fails, 4 not measured (no interval), 5 not measured (no calibration).
    cka: 1 fails, 2 fails (initial state the largest term), 3 not measured (unavailable), 4 holds (top1pc;
    token-norm fails), 5 holds."""
    t = effdepth.from_states(torch.randn(4, 8, 8, 16)).default  # an old token-mode result: no pooling in its config
    frobenius = {
        "default": _view(t, "default", 1.0, (0.9, 1.1), terms=(0.1, 0.1, 0.3), term_ci=(0.2, 0.4)),
        "drop-pos0": _view(t, "drop-pos0", 1.6, (1.55, 1.7)),
        "token-norm": _view(t, "token-norm", 1.0, None),
    }
    cka = {
        "default": _view(
            t,
            "default",
            1.45,
            (1.2, 1.52),
            terms=(0.4, 0.0, 0.05),
            term_ci=(0.01, 0.09),
            cal=(1.6, (1.55, 1.65)),
            definition="cka",
        ),
        "token-norm": _view(t, "token-norm", 1.6, (1.55, 1.65), definition="cka"),
        "top1pc": _view(t, "top1pc", 1.2, (1.1, 1.3), definition="cka"),
    }
    config = {
        "similarity": "frobenius",
        "similarities": ["frobenius", "cka"],
        "views": ["default", "drop-pos0", "token-norm", "top1pc"],
        "seq_len": 8,
        "num_seqs": 4,
    }
    result = Result(
        views=frobenius,
        config=config,
        provenance={"model": {"id": "hand/made"}},
        others={"cka": cka},
        unavailable={"cka": {"drop-pos0": "made up: no value here"}},
    )
    return result.save(tmp_path_factory.mktemp("known") / "result.json")


EXPECTED = {
    1: {"frobenius": HOLDS, "cka": FAILS},
    2: {"frobenius": HOLDS, "cka": FAILS},
    3: {"frobenius": FAILS, "cka": NOT_MEASURED},
    4: {"frobenius": NOT_MEASURED, "cka": HOLDS},
    5: {"frobenius": NOT_MEASURED, "cka": HOLDS},
    6: {"frobenius": NOT_MEASURED, "cka": NOT_MEASURED},  # token mode: no passage lengths
}


def test_claims_with_known_verdicts(known, capsys):
    code, out, err = run(["claims", known], capsys)
    assert code == 0, err
    assert verdict_table(out, ["frobenius", "cka"]) == EXPECTED
    assert "(3) cka: not measured: drop-pos0 has no cka value: made up: no value here" in out
    assert "(2) cka: fails:" in out and "the largest term is initial state" in out
    assert "(4) frobenius: not measured: token-norm: D_eff 1.000 below F_N 1.500: undecided" in out
    assert "(4) cka: holds: token-norm: D_eff 1.600 [1.550, 1.650] below F_N 1.500: no; top1pc:" in out
    assert "(5) cka: holds: default: D_eff 1.450 [1.200, 1.520] below R_matched_cal 1.600 [1.550, 1.650]: yes" in out
    assert "no calibrated reference" in out
    assert "(6) cka: not measured: length has no cka value: an old token-mode result" in out


def test_the_report_has_the_claims_section(known, tmp_path, capsys):
    code, _, err = run(["report", known, "-o", tmp_path / "r.md"], capsys)
    assert code == 0, err
    text = (tmp_path / "r.md").read_text()
    section = text.split("### Does it reproduce the paper?", 1)[1].split("###", 1)[0]
    rows = [r for r in section.splitlines() if re.match(r"\| \d \|", r)]
    assert [r.split(" | ")[2:4] for r in rows] == [[EXPECTED[i]["frobenius"], EXPECTED[i]["cka"]] for i in range(1, 7)]
    assert "15 of 16 models, 23-44% below F_L" in section and "its Table 2" in section
    code, _, err = run(["report", known, "-o", tmp_path / "r.html"], capsys)
    assert code == 0 and "Does it reproduce the paper?</h3>" in (tmp_path / "r.html").read_text()


# ---------------------------------------------------------------- a sweep folder


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    broken = root / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{this is not json")
    out = root / "out"
    outcome = sweep(
        ["tiny:llama", "tiny:gpt2", str(broken)],
        out,
        corpus=["To be, or not to be, that is the question. " * 40],
        seq_len=16,
        num_seqs=4,
        bootstrap=20,
        views="paper",
        similarity="cka,cosine",
        figures=False,
        report=False,
        pooling="none",
    )
    assert outcome.counts == {"ok": 2, "error": 1}
    return out


def test_claims_on_a_sweep_folder(sweep_folder, capsys):
    code, out, err = run(["claims", sweep_folder], capsys)
    assert code == 0, err
    lines = [re.split(r"\s{2,}", line.strip()) for line in out.splitlines() if line.startswith("tiny:")]
    rows = [r for r in lines if len(r) > 1 and r[1] in ("cka", "cka-debiased", "cosine")]  # not Table 2's rows
    assert [(r[0], r[1]) for r in rows] == [
        ("tiny:gpt2", "cka"),
        ("tiny:gpt2", "cka-debiased"),
        ("tiny:gpt2", "cosine"),
        ("tiny:llama", "cka"),
        ("tiny:llama", "cka-debiased"),
        ("tiny:llama", "cosine"),
    ]
    assert all(len(r) == 8 and set(r[2:]) <= {HOLDS, FAILS, NOT_MEASURED} for r in rows)
    outcome = check_paths([sweep_folder])
    for label, sim, *verdicts in rows:
        checked = next(c for c in outcome.checked if c.label == label)
        grid = verdict_grid(checked.verdicts)
        assert verdicts == [grid[name][sim].status for name in CLAIM_NAMES]
    assert "of 2" in out and "15 of 16 models, 23-44% below F_L" in out and "all 16 models below F_L" in out
    assert "its Table 2" in out
    assert "not checked: 1 model(s)" in out and "broken" in out


# ---------------------------------------------------------------- input it cannot check


@pytest.fixture
def bad(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage.json").write_text("{not json")
    effdepth.from_states(torch.randn(3, 8, 8, 4), views="token-norm+top2pc").save(tmp_path / "centred")
    (tmp_path / "other.json").write_text(json.dumps({"schema": "effdepth.intervention/1"}))
    return tmp_path


@pytest.mark.parametrize(
    "arg, message",
    [
        ("empty", r"no result\.json under .*effdepth measure MODEL --views paper"),
        ("missing", r"no such file or folder.*--views paper"),
        ("garbage.json", r"garbage\.json is not a readable result file.*measure first.*--views paper"),
        (
            "centred",
            r"none of the views the claims need .*; it has token-norm\+top2pc; rerun effdepth measure with --views paper",
        ),
        ("other.json", r"other\.json: not an effdepth result.*--views paper"),
    ],
)
def test_bad_input_is_one_line_naming_what_to_rerun(bad, arg, message, capsys):
    code, out, err = run(["claims", bad / arg], capsys)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("effdepth: error: "), err
    assert re.search(message, lines[0]), lines[0]
