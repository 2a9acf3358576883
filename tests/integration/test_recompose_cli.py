"""effdepth recompose on a measured tiny model: the carry sweep of its saved pooled vectors gives the
measured D_eff back at lam = 1, every other lam is the explicit sweep, and bad input ends in one line."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import effdepth
from effdepth.cli import main
from effdepth.numerics.recompose import carried, increments
from effdepth.results.store import PooledStore

VIEWS = "default,drop-bos,drop-pos0,length,drop-bos+length,top1pc,token-norm"
#: A token-mode result as an older effdepth wrote it (statistics summed over tokens, no pooled vectors).
OLD_TOKEN_MODE = Path(__file__).parents[1] / "data" / "token-mode-result.json"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def measured(model_dir, tmp_path_factory):
    """A passage-mode result of the tiny Llama, saved with its pooled vectors; passages of unequal length
    (paragraphs), so the length control regresses something out."""
    d = tmp_path_factory.mktemp("recompose")
    words = "now is the winter of our discontent made glorious summer by this sun of york".split()
    paragraphs = [" ".join(words[: 3 + (k * 5) % 12]) for k in range(40)]
    (d / "text.txt").write_text("\n\n".join(paragraphs))
    argv = ["measure", model_dir, "--corpus", d / "text.txt", "--passage-split", "paragraphs", "--seq-len", 48]
    argv += ["--num-seqs", 16, "--bootstrap", 0, "--surrogate-seqs", 0, "--views", VIEWS, "--out", d / "run"]
    argv += ["--no-progress", "--no-figures"]
    assert main([str(a) for a in argv]) == 0
    return d / "run"


def test_recompose_from_the_command_line(measured, tmp_path, capsys):
    code, out, err = run(
        ["recompose", measured, "--carry", "1,0.5,0", "--out", tmp_path / "rc", "--no-progress"], capsys
    )
    assert code == 0, err
    assert "D_eff decorrelated" in out and "R_matched" in out and "not an identity under CKA" in out
    data = json.loads((tmp_path / "rc" / "recompose.json").read_text())
    saved = json.loads((measured / "result.json").read_text())
    assert data["schema"] == "effdepth.recompose/2" and data["view"] == "default" and data["similarity"] == "cka"
    assert [row["lam"] for row in data["rows"]] == [1.0, 0.5, 0.0]
    assert data["model"] == saved["provenance"]["model"]

    # lam = 1 is the measurement, under every similarity the result holds
    default = saved["views"]["default"]
    assert abs(data["rows"][0]["deff"] - default["deff"]) < 1e-9
    assert abs(data["measured"]["difference"]) < 1e-9 and data["measured"]["deff"] == default["deff"]
    for sim, numbers in data["rows"][0]["similarities"].items():
        assert abs(numbers["deff"] - effdepth.load(measured).view("default", similarity=sim).deff) < 1e-9
    assert len(data["rows"][0]["similarities"]) == 2  # cka and cka-debiased

    # the decorrelated stream beside R_matched, with the difference (not claimed equal)
    d = data["decorrelated"]
    assert d["measured_reference_matched"] == default["references"]["matched"]
    assert d["difference"] == pytest.approx(d["deff"] - default["references"]["matched"], abs=1e-12)
    assert data["rows"][0]["deff_decorrelated"] == d["deff"]

    # every other lam is the explicit sweep of the saved pooled vectors
    pooled = np.asarray(PooledStore.open(measured / "pooled").arrays()["default"], dtype=np.float64)
    sweep = pooled.copy()
    for layer in range(1, len(pooled)):
        sweep[layer] = 0.5 * sweep[layer - 1] + (pooled[layer] - pooled[layer - 1])
    assert np.allclose(carried(increments(pooled), 0.5), sweep, rtol=1e-12, atol=1e-9)
    assert data["rows"][1]["deff"] == pytest.approx(effdepth.from_pooled(sweep, bootstrap=0).default.deff, rel=1e-9)
    assert 1.0 <= data["rows"][2]["deff"] <= data["num_states"]


@pytest.mark.parametrize("view", ["drop-pos0", "drop-bos+length"])  # both stored variants; the length stage
def test_carry_one_gives_each_linear_views_measured_deff(view, measured, tmp_path, capsys):
    code, out, err = run(["recompose", measured, "--carry", "1", "--view", view, "--out", tmp_path], capsys)
    assert code == 0, err
    data = json.loads((tmp_path / "recompose.json").read_text())
    saved = effdepth.load(measured)
    assert data["view"] == view and data["variant"] == view.split("+")[0].replace("length", "default")
    for sim, numbers in data["rows"][0]["similarities"].items():
        assert abs(numbers["deff"] - saved.view(view, similarity=sim).deff) < 1e-9


def test_the_length_control_regresses_something_out_here(measured):
    saved = effdepth.load(measured)
    assert saved.views["length"].deff != saved.views["default"].deff  # unequal passages: a real check above


def test_intervals_when_asked(measured, capsys):
    code, out, err = run(["recompose", measured, "--carry", "1", "--bootstrap", 20, "--no-progress"], capsys)
    assert code == 0, err
    assert "[" in out.split("D_eff recomposed")[1]  # the interval beside the value


def token_mode(measured, folder):
    """The result as an older effdepth's token mode wrote it: pooling none, statistics only."""
    folder.mkdir()
    data = json.loads((measured / "result.json").read_text())
    data["config"]["pooling"] = "none"
    (folder / "result.json").write_text(json.dumps(data))
    return folder


def token_samples(measured, folder):
    """The result of the token reduction (--pooling none): its samples are tokens, not passage means."""
    shutil.copytree(measured, folder)
    data = json.loads((folder / "result.json").read_text())
    data["config"]["reduction"] = {"samples": "tokens", "per_variant": {"default": 64}}
    (folder / "result.json").write_text(json.dumps(data))
    return folder


def without_store(measured, folder):
    folder.mkdir()
    shutil.copy(measured / "result.json", folder / "result.json")
    return folder


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--view", "token-norm"], "view token-norm cannot be recomposed: it pools each token state divided by"),
        (["--view", "top1pc"], "view top1pc cannot be recomposed: it removes the top principal directions"),
        (["--view", "bogus"], "no view 'bogus' in this result"),
        (["--carry", "1,1.5"], "outside [0, 1]"),
        (["--bootstrap", "1"], "--bootstrap must be 0 (off)"),
        (["RESULT=token-mode"], "token-mode result"),
        ([f"RESULT={OLD_TOKEN_MODE}"], "token-mode result (--pooling none, written by an older effdepth)"),
        (["RESULT=token-samples"], "tokens as samples (--pooling none)"),
        (["RESULT=without-store"], "has no pooled vectors beside its result.json"),
        (["RESULT=/no/such/result"], "no result at"),
    ],
)
def test_bad_input_ends_in_one_line(argv, message, measured, tmp_path, capsys):
    makers = {"token-mode": token_mode, "token-samples": token_samples, "without-store": without_store}
    result = measured
    if argv[0].startswith("RESULT="):
        name = argv.pop(0).split("=", 1)[1]
        result = makers[name](measured, tmp_path / name) if name in makers else name
    code, out, err = run(["recompose", result, "--carry", "1", *argv], capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("effdepth: error:")
