"""The random-weight null: the model's architecture from its config alone, one random initialisation per seed,
measured with the trained model's options, and summarised next to it."""

from __future__ import annotations

import json

import pytest

from effdepth import load
from effdepth.cli import main
from effdepth.options import Options, RunOptions
from effdepth.studies.null import config_sha256, random_model, random_weight_null, weights_sha256

SMALL = {"num_seqs": 16, "seq_len": 32, "bootstrap": 0}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import AutoModelForCausalLM

    from effdepth.data.tokenizers import byte_tokenizer
    from effdepth.models.tiny import tiny_config

    folder = tmp_path_factory.mktemp("null") / "tiny-llama"
    AutoModelForCausalLM.from_config(tiny_config("llama")).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def test_seeds_give_different_weights_and_the_same_config():
    from effdepth.models.tiny import tiny_config

    config = tiny_config("llama")
    a, b, again = random_model(config, 0), random_model(config, 1), random_model(config, 0)
    assert weights_sha256(a) != weights_sha256(b) and weights_sha256(a) == weights_sha256(again)
    assert config_sha256(a.config) == config_sha256(b.config) == config_sha256(config)


def test_the_null_measures_each_seed_with_the_trained_options(model_dir):
    null = random_weight_null(Options.build(model=str(model_dir), **SMALL), [0, 1, 2], run=RunOptions(progress=False))
    assert len(null.nulls) == 3 and null.seeds == [0, 1, 2]
    weights = {r.provenance["model"]["weights_sha256"] for r in null.nulls}
    assert len(weights) == 3  # three different initialisations
    assert all(
        r.config["num_seqs"] == null.trained.config["num_seqs"] and r.config["pooling"] == "mean" for r in null.nulls
    )
    assert all(r.provenance["model"]["id"] == null.trained.provenance["model"]["id"] for r in null.nulls)
    for sim in ("cka", "cka-debiased"):
        s = null.summary[sim]
        per_layer = [r.view("default", sim).deff / r.view("default", sim).num_states for r in null.nulls]
        assert s["null_deff_per_layer_mean"] == pytest.approx(sum(per_layer) / 3)
        assert s["null_deff_per_layer_sd"] > 0 and s["seeds"] == 3


def test_effdepth_null_writes_every_result_and_prints_the_comparison(model_dir, tmp_path, capsys):
    out = tmp_path / "null"
    assert (
        main(
            [
                "null",
                str(model_dir),
                "--seeds",
                "2",
                "--num-seqs",
                "16",
                "--seq-len",
                "32",
                "--bootstrap",
                "0",
                "--no-progress",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "random init D_eff/L" in text and "2 seed(s) (0, 1)" in text
    record = json.loads((out / "null.json").read_text())
    assert record["seeds"] == [0, 1] and set(record["summary"]) == {"cka", "cka-debiased"}
    assert load(out / "seed-1").provenance["model"]["init_seed"] == 1
    assert load(out / "trained").default.deff == pytest.approx(
        record["summary"]["cka"]["trained_deff_per_layer"] * load(out / "trained").default.num_states
    )
    assert type(load(out)).__name__ == "SavedStudy" and main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("random-weight null of ") and text.split("\n\nwrote")[0] in shown
    assert (out / "null.png").is_file()
    from effdepth.report.build import write_report

    page = write_report([out], tmp_path / "report.html")[0].read_text(encoding="utf-8")
    assert "andom-weight null of" in page and "random init" in page and page.count("data:image/png") >= 2


@pytest.mark.parametrize("seeds, message", [("x", "is not a count"), ("0", "measures no null"), ("1,1", "each once")])
def test_bad_seeds_are_one_line(model_dir, tmp_path, seeds, message, capsys):
    assert (
        main(
            [
                "null",
                str(model_dir),
                "--seeds",
                seeds,
                "--num-seqs",
                "16",
                "--seq-len",
                "32",
                "--bootstrap",
                "0",
                "--no-progress",
                "--out",
                str(tmp_path / "n"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "n").exists()
