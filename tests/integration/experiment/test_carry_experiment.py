"""The trained carry control: determinism, checkpoints, measurement with the carry, outputs, CLI."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.measurement import measure
from effdepth.results.loading import load
from effdepth.studies.experiment import (
    CarryExperiment,
    ExperimentResult,
    carry_experiment,
    checkpoint_carry,
    measure_checkpoint,
    split_corpus,
)
from effdepth.studies.experiment.report import experiment_final_table, experiment_headline, experiment_step_table
from effdepth.studies.experiment.training import batch_order, new_model

TEXT = [
    "Now is the winter of our discontent made glorious summer by this sun of York. " * 30,
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer. " * 30,
]
TINY = dict(
    carries=(1.0, 0.5),
    carry_layers="all",
    layers=2,
    d_model=16,
    heads=2,
    steps=3,
    save_every=2,
    batch_size=2,
    seq_len=16,
    eval_seqs=4,
    bootstrap=20,
    corpus=TEXT,
    device="cpu",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    a, b = tmp_path_factory.mktemp("a"), tmp_path_factory.mktemp("b")
    return (a, carry_experiment(out=a, progress=False, **TINY)), (b, carry_experiment(out=b, progress=False, **TINY))


def test_training_is_deterministic_under_a_seed(runs):
    (a, ra), (b, rb) = runs
    assert ra.records == rb.records  # every number, paths relative to the output folder
    for lam in ("1", "0.5"):
        wa = load_file(a / f"lam-{lam}/seed-0/step-3/model.safetensors")
        wb = load_file(b / f"lam-{lam}/seed-0/step-3/model.safetensors")
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_same_seed_same_start_and_carry_changes_training(runs):
    (a, _), _ = runs
    init = [load_file(a / f"lam-{lam}/seed-0/step-0/model.safetensors") for lam in ("1", "0.5")]
    assert all(torch.equal(init[0][k], init[1][k]) for k in init[0])  # identical but for the carry
    final = [load_file(a / f"lam-{lam}/seed-0/step-3/model.safetensors") for lam in ("1", "0.5")]
    assert any(not torch.equal(final[0][k], final[1][k]) for k in final[0])  # gradients went through the carry


def test_checkpoints_are_standard_and_remember_their_carry(runs):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    (a, result), _ = runs
    assert sorted(p.name for p in (a / "lam-0.5" / "seed-0").glob("step-*")) == ["step-0", "step-2", "step-3"]
    ckpt = a / "lam-0.5" / "seed-0" / "step-3"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert model.config.effdepth_carry == 0.5 and model.config.effdepth_carry_layers == [1, 2]
    assert len(AutoTokenizer.from_pretrained(ckpt)) == 259
    assert checkpoint_carry(ckpt) == (0.5, [1, 2])
    assert not list(a.rglob(".*partial*"))

    held_out = split_corpus(TEXT, seq_len=16, eval_seqs=4).held_out
    again = measure_checkpoint(ckpt, held_out, bootstrap=20, seed=0, batch_size=16, dtype="float32", progress=False)
    record = next(r for r in result.records if r["lam"] == 0.5 and r["step"] == 3)
    assert again.default.deff == record["deff"] and again.extras["loss"]["mean"] == record["loss"]
    # A plain measurement runs the checkpoint with lam = 1: a different model (documented).
    with pytest.warns(UserWarning, match="trained with residual carry 0.5"):
        plain = measure(str(ckpt), held_out, bootstrap=0, progress=False, dtype="float32", pooling="none")
    assert plain.default.deff != record["deff"]
    assert plain.extras["stored_carry"] == {"carry": 0.5, "layers": "1,2", "applied": False}


def test_experiment_outputs(runs):
    (a, result), _ = runs
    for name in ("experiment.json", "experiment.png", "experiment.pdf", "lam-1/seed-0/results/step-3.json"):
        assert (a / name).is_file(), name
    data = json.loads((a / "experiment.json").read_text())
    assert data["schema"] == "effdepth.experiment/1"
    assert {(s["lam"], s["step"]) for s in data["summary"]} == {(lam, s) for lam in (1.0, 0.5) for s in (0, 2, 3)}
    assert load(a, expect=ExperimentResult).records == result.records
    table = experiment_final_table(result)
    assert "bootstrap CI" in table and "R_matched" in table and "train loss" in table
    assert "D_eff lam=0.5" in experiment_step_table(result)
    # The headline names the similarity the records were measured under (the checkpoints' own results).
    measured = json.loads((a / "lam-1/seed-0/results/step-3.json").read_text())["config"]["similarity"]
    primary = measured[0] if isinstance(measured, list) else measured
    assert data["config"]["similarity"] == primary and f"({primary}, N = 2)" in experiment_headline(result)


def test_report_and_show_of_an_experiment_folder(runs, tmp_path, capsys):
    """effdepth report DIR of a carry experiment (no result.json in it): the experiment's tables and figure, and
    how the run differs from the paper's; effdepth show prints the same tables."""
    (a, result), _ = runs
    assert main(["report", str(a), "-o", str(tmp_path / "report.md")]) == 0
    page = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert page.startswith("# Carry experiment of a 2-layer Llama (d_model 16), carries 1, 0.5")
    assert "### After 3 steps" in page and "### Per training step" in page and "Table S14" not in page
    final = [s for s in result.summary() if s["step"] == 3]
    for s in final:
        assert f"| {s['lam']:g} | {s['deff']['mean']:.3f} |" in page
    assert "differs from the paper's S17 run: one carry per block" in page
    assert (tmp_path / "report_files" / "study-1-experiment.png").is_file()
    capsys.readouterr()
    assert main(["show", str(a)]) == 0
    shown = capsys.readouterr().out
    assert "after 3 steps:" in shown and "differs from the paper's S17 run: one carry per block" in shown


def test_intervals_over_seeds(tmp_path):
    result = carry_experiment(
        out=tmp_path, progress=False, **{**TINY, "carries": (0.5,), "steps": 1, "seeds": 2, "bootstrap": 0}
    )
    final = [s for s in result.summary() if s["step"] == 1][0]
    assert final["seeds"] == 2 and final["deff"]["min"] <= final["deff"]["mean"] <= final["deff"]["max"]
    assert "min-max over seeds" in experiment_final_table(result)
    assert (tmp_path / "lam-0.5" / "seed-1" / "step-1").is_dir()


def test_held_out_sequences_are_never_trained_on():
    split = split_corpus(TEXT, seq_len=16, eval_seqs=5, seed=0)
    assert split.held_out.shape == (5, 16)
    train, held = set(split.train_starts.tolist()), set(split.held_out_starts.tolist())
    assert not train & held and len(train) + 5 == split.info["chunks_available"] == split.info["train_seqs"] + 5
    order = batch_order(split.train.shape[0], 4, 10, seed=3)
    assert np.array_equal(order, batch_order(split.train.shape[0], 4, 10, seed=3))
    assert order.max() < split.train.shape[0]


def test_model_is_identical_across_carries_at_a_seed():
    spec = CarryExperiment(**{k: v for k, v in TINY.items() if k != "corpus"})
    a, b = new_model(spec, 1.0, 7), new_model(spec, 0.5, 7)
    assert all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))
    assert a.config.effdepth_carry == 1.0 and b.config.effdepth_carry == 0.5


@pytest.mark.parametrize(
    "override, message",
    [
        ({"carries": (1.2,)}, "outside"),
        ({"carries": ()}, "at least one"),
        ({"d_model": 30, "heads": 4}, "heads of even size"),
        ({"carry_layers": "3"}, "--carry-layers '3' names layer 3"),
        ({"steps": 0}, "--steps must be a positive"),
        ({"lr": -1.0}, "--lr"),
        ({"save_every": 0}, "--save-every"),
    ],
)
def test_bad_settings(override, message, tmp_path):
    with pytest.raises(EffdepthError, match=message):
        carry_experiment(out=tmp_path, progress=False, **{**TINY, **override})


def test_cli_experiment(tmp_path, capsys):
    corpus = tmp_path / "text.txt"
    corpus.write_text("\n".join(TEXT))
    code = main(
        [
            "experiment",
            "carry",
            "--corpus",
            str(corpus),
            "--carry",
            "1,0.5",
            "--layers",
            "2",
            "--d-model",
            "16",
            "--heads",
            "2",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--seq-len",
            "16",
            "--eval-seqs",
            "4",
            "--bootstrap",
            "10",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "run"),
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "R_matched" in out and "step" in out and (tmp_path / "run" / "experiment.json").is_file()
    # How this run differs from the paper's S17, difference by difference (and recorded in experiment.json).
    said = out.split("differs from the paper's S17 run")[1].splitlines()[0]
    for phrase in (
        "one carry per block (the paper: in every attention and MLP sublayer)",
        "gamma 1, 0.5 (the paper: 1, 0.75, 0.5, 0.25)",
        "1 seed per gamma (the paper: 3 for 1 and 0.75",
        "2 layers, d_model 16, 2 heads (the paper: 12 layers, n_embd 384, 6 heads)",
        "2 steps of 2 x 16 tokens at lr 0.003 (the paper: 5,000 iterations of 64 x 256 at lr 0.001)",
        "a Llama-architecture model",
    ):
        assert phrase in said, phrase
    config = json.loads((tmp_path / "run" / "experiment.json").read_text())["config"]
    assert "; ".join(config["paper_differences"]) == said.split(": ", 1)[1]

    code = main(["experiment", "carry", "--carry", "1,2", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "outside [0, 1]" in err and err.count("\n") == 1
    code = main(["experiment", "carry", "--steps", "x"])
    assert code == 2 and "expected an integer" in capsys.readouterr().err
    code = main(["experiment"])
    assert code == 2


def test_a_sublayer_carry_experiment_trains_and_measures_with_the_papers_carry(tmp_path):
    from effdepth.studies.experiment.checkpoints import checkpoint_carry_on

    record = carry_experiment(
        out=tmp_path, progress=False, **{**TINY, "carries": (0.5,), "steps": 2, "carry_on": "sublayers"}
    )
    checkpoint = tmp_path / "lam-0.5/seed-0/step-2"
    assert checkpoint_carry_on(checkpoint) == "sublayers" and record.config["carry_on"] == "sublayers"
    measured = measure_checkpoint(checkpoint, torch.randint(0, 256, (4, 12)), bootstrap=0, progress=False)
    assert measured.extras["intervention"]["carry_on"] == "sublayers"
    blocks = carry_experiment(out=tmp_path / "blocks", progress=False, **{**TINY, "carries": (0.5,), "steps": 2})
    assert blocks.records[-1]["loss"] != record.records[-1]["loss"]
    with pytest.raises(EffdepthError, match="--carry-on 'blocs'"):
        CarryExperiment(carry_on="blocs").checked()


def test_paper_setting_runs_as_passages_with_table_s14_beside_ours(tmp_path, capsys):
    spec = CarryExperiment.paper_setting()
    assert (spec.layers, spec.d_model, spec.heads, spec.seq_len, spec.batch_size, spec.lr, spec.steps) == (
        12,
        384,
        6,
        256,
        64,
        1e-3,
        5000,
    )
    assert spec.carries == (1.0, 0.75, 0.5, 0.25) and spec.carry_on == "sublayers" and spec.pooling == "mean"
    out = tmp_path / "paper"
    code = main(
        [
            "experiment",
            "carry",
            "--paper",
            "--layers",
            "2",
            "--d-model",
            "16",
            "--heads",
            "2",
            "--steps",
            "2",
            "--seq-len",
            "16",
            "--batch-size",
            "2",
            "--eval-seqs",
            "8",
            "--seeds",
            "1",
            "--carry",
            "1,0.5",
            "--bootstrap",
            "0",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    printed = capsys.readouterr()
    assert code == 0, printed.err
    config = json.loads((out / "experiment.json").read_text())["config"]
    assert config["paper"] and config["pooling"] == "mean" and config["carry_on"] == "sublayers"
    assert (
        config["lr"] == 1e-3 and config["warmup"] == 100 and config["layers"] == 2
    )  # the paper's, but for what was typed
    table = printed.out.split("beside the paper's Table S14:")[1]
    row = next(line.split() for line in table.splitlines() if line.startswith("1 "))
    assert row[2] == "0.094" and "3.46" in table and "Llama-architecture model" in printed.out
    result = json.loads((out / "lam-0.5/seed-0/results/step-2.json").read_text())
    assert result["config"]["pooling"] == "mean"
