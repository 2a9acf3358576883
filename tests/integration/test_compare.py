"""effdepth compare end to end on tiny models: paired differences, the cross-model CKA, the record, the
command line, Python, the report, and every bad input in one line with nothing left in --out."""

import json
import shutil

import numpy as np
import pytest

import effdepth
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.studies.compare import Comparison

PARAGRAPH = (
    "Now is the winter of our discontent made glorious summer by this sun of York; and all the clouds that "
    "lour'd upon our house in the deep bosom of the ocean buried."
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "plays.txt"
    path.write_text("\n\n".join(f"{i}. {PARAGRAPH}" for i in range(120)))
    return path


def measure(model, corpus, out, *extra) -> int:
    argv = ["measure", str(model), "--corpus", str(corpus), "--seq-len", "32", "--num-seqs", "24"]
    return main([*argv, "--bootstrap", "50", "--views", "default,top1pc", "--out", str(out), "--no-progress", *extra])


@pytest.fixture(scope="module")
def runs(tmp_path_factory, saved_tiny_model, corpus):
    """A tiny Llama measured twice and a tiny GPT-2, all on the same passages (the byte tokenizer)."""
    root = tmp_path_factory.mktemp("runs")
    for name, model in (("llama", "llama"), ("llama-again", "llama"), ("gpt2", "gpt2")):
        assert measure(saved_tiny_model(model), corpus, root / name) == 0
    return root


def compare(*argv) -> int:
    return main(["compare", *map(str, argv), "--no-progress"])


def differences(comparison: Comparison, pair: int = 0):
    for views in comparison.pairs[pair].differences.values():
        for quantities in views.values():
            yield from quantities.values()


def test_one_model_measured_twice_differs_by_exactly_zero(runs, tmp_path, capsys):
    assert compare(runs / "llama", runs / "llama-again", "--out", tmp_path / "c") == 0
    comparison = effdepth.load(tmp_path / "c")
    assert isinstance(comparison, Comparison)
    found = list(differences(comparison))
    assert len(found) == 2 * 2 * 3  # two estimators, two views, three quantities
    for d in found:
        assert d["estimate"] == 0.0 and d["interval"] == [0.0, 0.0] and not d["resolved"]
    for sim in ("cka", "cka-debiased"):
        cross = np.array(comparison.pairs[0].cross[sim])
        assert cross.shape == (4, 4)  # S_0..S_3 of each
        np.testing.assert_allclose(np.diag(cross), 1.0, atol=1e-9)
    assert "no difference resolved at this N" in capsys.readouterr().out


def test_two_families_compare_through_the_cli_python_and_the_report(runs, tmp_path, capsys):
    out = tmp_path / "c"
    assert compare(runs / "llama", runs / "gpt2", "--out", out) == 0
    printed = capsys.readouterr().out
    assert "verdicts" in printed and "gpt2 against llama" in printed
    assert {p.name for p in out.iterdir()} >= {"comparison.json", "comparison.png", "comparison.pdf"}
    saved = effdepth.load(out)
    again = effdepth.compare(runs / "llama", runs / "gpt2", progress=False)
    assert again.pairs[0].differences == saved.pairs[0].differences  # one number from every entry point
    d = saved.pair("llama", "gpt2").difference("ratio")
    a, b = effdepth.load(runs / "llama"), effdepth.load(runs / "gpt2")
    assert d["a"] == pytest.approx(a.default.ratio, abs=1e-12) and d["b"] == pytest.approx(b.default.ratio, abs=1e-12)
    assert d["estimate"] == pytest.approx(b.default.ratio - a.default.ratio, abs=1e-12)
    assert d["interval"][0] <= d["estimate"] <= d["interval"][1]
    assert np.array(saved.pairs[0].cross["cka"]).shape == (4, 4)
    assert main(["show", str(out)]) == 0 and "gpt2 against llama" in capsys.readouterr().out
    assert main(["report", str(out), "-o", str(tmp_path / "r.html")]) == 0
    html = (tmp_path / "r.html").read_text()
    assert "Paired comparison" in html and "<img" in html


def test_a_model_is_measured_on_the_first_results_passages(runs, tmp_path, saved_tiny_model):
    out = tmp_path / "c"
    assert compare(runs / "llama", saved_tiny_model("gpt2"), "--out", out) == 0
    measured = [p for p in out.iterdir() if (p / "result.json").is_file()]
    assert len(measured) == 1 and not list(out.glob(".measuring-*"))
    fresh, saved = effdepth.load(measured[0]), effdepth.load(runs / "gpt2")
    assert fresh.default.deff == saved.default.deff  # the same passages and options give the same number


def test_three_results_compare_with_the_first_or_every_pair(runs, tmp_path):
    three = (runs / "llama", runs / "gpt2", runs / "llama-again")
    assert compare(*three, "--out", tmp_path / "base", "--bootstrap", "20") == 0
    assert [(p.a, p.b) for p in effdepth.load(tmp_path / "base").pairs] == [(0, 1), (0, 2)]
    assert compare(*three, "--out", tmp_path / "all", "--bootstrap", "20", "--pairs", "all") == 0
    assert [(p.a, p.b) for p in effdepth.load(tmp_path / "all").pairs] == [(0, 1), (0, 2), (1, 2)]


def refused(argv, out, capsys) -> str:
    assert compare(*argv, "--out", out) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert not out.exists() or not any(p.name != ".effdepth-writer" for p in out.iterdir())
    return err


@pytest.mark.parametrize(
    "flags, says",
    [
        (("--num-seqs", "16"), "passage"),
        (("--passage-split", "paragraphs", "--seq-len", "96"), "split"),
        (("--seed", "1"), "passage draw seed 0 (llama) vs 1 (other)"),
    ],
)
def test_results_on_other_passages_are_refused_in_one_line(
    runs, tmp_path, saved_tiny_model, corpus, capsys, flags, says
):
    other = tmp_path / "other"
    assert main(["measure", str(saved_tiny_model("gpt2")), "--corpus", str(corpus), "--seq-len", "32", "--num-seqs", "24",
                 "--bootstrap", "0", "--out", str(other), "--no-progress", *flags]) == 0  # fmt: skip
    capsys.readouterr()
    err = refused((runs / "llama", other), tmp_path / "c", capsys)
    assert says in err and "effdepth measure" in err


@pytest.fixture(scope="module")
def merging_model(tmp_path_factory):
    """A tiny GPT-2 with another tokenizer than the byte tokenizer of the ``runs``."""
    from merging_tokenizer import save_merging_model

    return save_merging_model(tmp_path_factory.mktemp("merging"))


def test_a_model_with_another_tokenizer_on_windows_is_refused_before_its_weights_load(
    runs, tmp_path, merging_model, capsys, monkeypatch
):
    import effdepth.models.loading

    def no_weights(*args, **kwargs):
        raise AssertionError("the weights loaded before the passages were checked")

    monkeypatch.setattr(effdepth.models.loading, "load_model", no_weights)
    err = refused((runs / "llama", merging_model), tmp_path / "c", capsys)
    assert "their tokenizers differ, and windows are cut on tokens" in err
    assert "--passage-split paragraphs --seq-len 35" in err  # the fix that pairs, runnable as said


def test_a_model_with_another_tokenizer_is_measured_on_the_same_paragraphs(
    saved_tiny_model, corpus, merging_model, tmp_path
):
    assert main(["measure", str(saved_tiny_model("llama")), "--corpus", str(corpus), "--passage-split", "paragraphs",
                 "--seq-len", "48", "--num-seqs", "12", "--bootstrap", "20", "--out", str(tmp_path / "a"),
                 "--no-progress", "--no-figures"]) == 0  # fmt: skip
    assert compare(tmp_path / "a", merging_model, "--out", tmp_path / "c") == 0
    (measured,) = [p for p in (tmp_path / "c").iterdir() if (p / "result.json").is_file()]
    a, b = effdepth.load(tmp_path / "a").provenance["corpus"], effdepth.load(measured).provenance["corpus"]
    assert a["tokenizer_sha256"] != b["tokenizer_sha256"] and a["sha256"] != b["sha256"]  # other tokens...
    assert a["text_sha256"] == b["text_sha256"]  # ...of the same texts


def test_another_corpus_is_refused_in_one_line(runs, tmp_path, saved_tiny_model, capsys):
    text = tmp_path / "other.txt"
    text.write_text("\n\n".join(f"{i}. To be, or not to be, that is the question of the day." for i in range(200)))
    assert measure(saved_tiny_model("gpt2"), text, tmp_path / "other") == 0
    capsys.readouterr()
    assert "corpus" in refused((runs / "llama", tmp_path / "other"), tmp_path / "c", capsys)


def test_bad_inputs_are_one_line_and_leave_nothing(runs, tmp_path, capsys):
    stripped = tmp_path / "stripped"
    shutil.copytree(runs / "gpt2", stripped)
    shutil.rmtree(stripped / "pooled")
    assert "pooled" in refused((runs / "llama", stripped), tmp_path / "c1", capsys)
    assert "not a saved result" in refused(("no-such-model-folder", runs / "llama"), tmp_path / "c2", capsys)
    assert "share" in refused((runs / "llama", runs / "gpt2", "--views", "drop-bos"), tmp_path / "c3", capsys)


def test_an_output_folder_holding_another_comparison_is_refused(runs, tmp_path, capsys):
    out = tmp_path / "c"
    assert compare(runs / "llama", runs / "gpt2", "--out", out, "--bootstrap", "20") == 0
    before = (out / "comparison.json").read_text()
    assert compare(runs / "llama", runs / "llama-again", "--out", out) == 2
    assert "already holds another comparison" in capsys.readouterr().err
    assert (out / "comparison.json").read_text() == before
    assert compare(runs / "llama", runs / "gpt2", "--out", out, "--bootstrap", "20") == 0  # the same inputs: replaced


def test_python_refuses_results_without_pooled_vectors():
    import torch

    r = effdepth.from_states(torch.randn(4, 8, 8, 16))
    r.pooled = None
    with pytest.raises(EffdepthError, match="no pooled vectors"):
        effdepth.compare(r, r)


def test_a_comparison_round_trips_through_json(runs, tmp_path):
    c = effdepth.compare(runs / "llama", runs / "gpt2", bootstrap=20, progress=False)
    path = c.save(tmp_path)
    assert json.loads(path.read_text())["schema"] == "effdepth.comparison/1"
    assert effdepth.load(path).to_dict() == c.to_dict()


def test_intervene_carries_each_carrys_paired_difference_to_carry_one(saved_tiny_model, corpus):
    ir = effdepth.intervene(
        str(saved_tiny_model("llama")), str(corpus), carry=(1, 0.5), seq_len=32, num_seqs=16, bootstrap=30,
        progress=False,
    )  # fmt: skip
    one, half = ir.rows()
    assert one["deff_vs_1"] == 0.0
    assert half["deff_vs_1"] == pytest.approx(half["deff"] - one["deff"], abs=1e-9)
    lo, hi = half["deff_vs_1_ci"]
    assert lo <= half["deff_vs_1"] <= hi
    assert "D_eff - carry 1" in effdepth.studies.intervene.report.intervention_table(ir)


def test_a_trajectory_folder_compares_each_checkpoint_with_the_one_before(tmp_path, corpus):
    import torch

    from effdepth.data import byte_tokenizer
    from effdepth.models.tiny import tiny_model
    from effdepth.scale.trajectory import trajectory

    for step, seed, shrink in ((0, 0, 1), (100, 1, 1), (200, 2, 20)):
        model = tiny_model("gpt2", seed=seed)
        with torch.no_grad():  # small embeddings: the blocks' updates weigh more, and D_eff moves up
            model.transformer.wte.weight /= shrink
            model.transformer.wpe.weight /= shrink
        model.save_pretrained(tmp_path / "ckpts" / f"step-{step}")
        byte_tokenizer().save_pretrained(tmp_path / "ckpts" / f"step-{step}")
    trajectory(tmp_path / "ckpts", tmp_path / "traj", corpus=str(corpus), seq_len=32, num_seqs=16, bootstrap=20)
    assert compare(tmp_path / "traj", "--out", tmp_path / "c") == 0
    c = effdepth.load(tmp_path / "c")
    assert [(c.label(p.a), c.label(p.b)) for p in c.pairs] == [("step-0", "step-100"), ("step-100", "step-200")]
    assert c.config["pairs"] == "consecutive"
    rows = [r for r in effdepth.load(tmp_path / "traj").rows if r["similarity"] == "cka" and r["view"] == "default"]
    assert rows[0]["dD_eff"] is None
    for before, row in zip(rows, rows[1:]):
        assert row["dD_eff"] == pytest.approx(row["D_eff"] - before["D_eff"], abs=1e-6)
        assert row["dD_eff_lo"] <= row["dD_eff"] <= row["dD_eff_hi"]
        assert row["moved"] == (row["dD_eff_lo"] > 0 or row["dD_eff_hi"] < 0)
    assert "D_eff - previous" in main_show(tmp_path / "traj")
    from effdepth.report.rows import lead_rows
    from effdepth.scale.trajectory.figures import MOVED_LABEL, trajectory_figure

    drawn = lead_rows(effdepth.load(tmp_path / "traj").rows, lambda r: r["revision"])
    rings = [line for line in trajectory_figure(drawn).axes[0].get_lines() if line.get_label() == MOVED_LABEL]
    ringed = [float(y) for line in rings for y in line.get_ydata()]
    assert [r["revision"] for r in drawn if r["moved"]] == ["step-200"]
    assert ringed == [drawn[-1]["D_eff"]]  # the saved rows' marks, as drawn


def main_show(folder) -> str:
    from effdepth.report.tables import show_text

    return show_text(effdepth.load(folder))
