"""Passage mode end to end on tiny models: a naive numpy computation, resume, re-analysis, old results,
and bad input (one line, non-zero exit, nothing half-written)."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_debiased

import effdepth
from effdepth.cli import main
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.measurement import prepare
from effdepth.measurement import run as passage_measure
from effdepth.measurement.checkpoint import MeasurementInterrupted
from effdepth.measurement.run import analyse_saved, measure_passages
from effdepth.models.tiny import tiny_model
from effdepth.options import Options, RunOptions

VIEWS = (
    "default,drop-pos0,drop-bos,token-norm,top1pc,top3pc,length,drop-bos+token-norm,drop-pos0+token-norm,"
    "token-norm+top1pc,drop-pos0+length,length+top1pc"
)


# --------------------------------------------------------------------------- naive computation


OLD_TOKEN_RESULT = Path(__file__).parent.parent / "data" / "token-mode-result.json"


def naive_pooled(model, passages, *, states: str, bos: bool) -> dict:
    """{variant: (L+1, N, d)} float64, each passage run alone (no padding) through output_hidden_states."""
    out = {
        "default": [],
        "drop-bos": [],
        "drop-pos0": [],
        "token-norm": [],
        "drop-bos+token-norm": [],
        "drop-pos0+token-norm": [],
    }
    with torch.no_grad():
        for i in range(passages.num_passages):
            ids = torch.as_tensor(passages.passage(i), dtype=torch.long)[None]
            hidden = model(ids, output_hidden_states=True).hidden_states
            layers = [h[0].double().numpy() for h in hidden]
            if states == "blocks":  # before the final norm: the last block's output itself
                layers[-1] = None
            stack = [h for h in layers if h is not None]
            first = 1 if bos and passages.starts_with_bos[i] else 0
            out["default"].append([h.mean(0) for h in stack])
            out["drop-bos"].append([h[first:].mean(0) for h in stack])
            out["drop-pos0"].append([h[1:].mean(0) for h in stack])
            out["drop-pos0+token-norm"].append(
                [(h[1:] / np.linalg.norm(h[1:], axis=1, keepdims=True)).mean(0) for h in stack]
            )
            out["token-norm"].append([(h / np.linalg.norm(h, axis=1, keepdims=True)).mean(0) for h in stack])
            out["drop-bos+token-norm"].append(
                [(h[first:] / np.linalg.norm(h[first:], axis=1, keepdims=True)).mean(0) for h in stack]
            )
    return {k: np.transpose(np.asarray(v), (1, 0, 2)) for k, v in out.items()}


def remove_top_pcs(layer: np.ndarray, k: int) -> np.ndarray:
    centred = layer - layer.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    return centred - centred @ vt[:k].T @ vt[:k]


def naive_hsic(x, y, debiased: bool) -> float:
    return naive_debiased(x - x.mean(0), y - y.mean(0)) if debiased else naive_biased(x, y)


def naive_deff(stack: np.ndarray, debiased: bool) -> float:
    """D_eff = N^2 / sum_ij CKA_ij over S_1..S_L."""
    layers = stack[1:]
    h = np.zeros((len(layers), len(layers)))
    for i, j in zip(*np.triu_indices(len(layers))):  # HSIC is symmetric: each pair once
        h[i, j] = h[j, i] = naive_hsic(layers[i], layers[j], debiased)
    sim = h / np.sqrt(np.outer(np.diag(h), np.diag(h)))
    return float(len(layers) ** 2 / sim.sum())


def regress_length(layer: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The least-squares residual on 1, 1/n and log n, the column mean kept (the length view)."""
    x = np.stack([np.ones(len(lengths)), 1.0 / lengths, np.log(lengths)], axis=1)
    return layer - x @ np.linalg.lstsq(x, layer, rcond=None)[0] + layer.mean(0)


def naive_view(pooled: dict, view: str, lengths: np.ndarray) -> np.ndarray:
    """A view's pooled stack: its pooled variant, then the length regression, then the top-k removal."""
    parts = view.split("+")
    pooling = [p for p in parts if p in ("drop-bos", "drop-pos0", "token-norm")]
    stack = pooled["+".join(pooling) or "default"]
    if "length" in parts and len(set(lengths.tolist())) > 1:
        stack = np.stack([regress_length(layer, lengths) for layer in stack])
    for part in parts:
        if part.startswith("top"):
            stack = np.stack([remove_top_pcs(layer, int(part[3:-2])) for layer in stack])
    return stack


def check_against_naive(prepared, result, states: str, tol: float, views: str = VIEWS) -> None:
    pooled = naive_pooled(prepared.lm.model, prepared.tokens, states=states, bos=True)
    for similarity, debiased in (("cka", False), ("cka-debiased", True)):
        for view in views.split(","):
            expected = naive_deff(naive_view(pooled, view, prepared.tokens.lengths.astype(np.float64)), debiased)
            got = result.similarities[similarity][view].deff
            assert got == pytest.approx(expected, rel=tol, abs=tol), (similarity, view)


def measured(model, corpus, **options):
    opts = Options.build(model=model, corpus=corpus, **{"bootstrap": 0, "views": VIEWS, **options})
    prepared = prepare(opts.load, progress=False)
    return prepared, measure_passages(prepared, opts.analysis, run=RunOptions(progress=False))


TEXT = ["\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(40))]


@pytest.mark.parametrize("family", ["llama", "gpt2", "gemma2"])
def test_every_view_and_estimator_equals_a_naive_numpy_computation(family):
    """The paper's convention (--states hidden): hidden_states as transformers returns them, each passage alone."""
    from effdepth.data.tokenizers import byte_tokenizer

    model = tiny_model(family)
    prepared, result = measured(
        model,
        TEXT,
        tokenizer=byte_tokenizer(),
        seq_len=48,
        num_seqs=24,
        states="hidden",
        batch_size=5,
        bos="always",
        passage_split="paragraphs",
    )
    assert result.passages and prepared.tokens.starts_with_bos.all() and len(set(prepared.tokens.lengths)) > 1
    check_against_naive(prepared, result, "hidden", tol=1e-6)


def test_block_states_differ_from_hidden_states_only_in_the_final_norm():
    from effdepth.data.tokenizers import byte_tokenizer
    from effdepth.results.store import PooledStore

    model = tiny_model("llama")
    arrays = {}
    for states in ("blocks", "hidden"):
        _, result = measured(
            model, TEXT, tokenizer=byte_tokenizer(), seq_len=32, num_seqs=8, states=states, views="default"
        )
        arrays[states] = np.asarray(PooledStore.open(result.pooled).arrays()["default"])
        assert result.config["states"] == states
    np.testing.assert_allclose(arrays["blocks"][:-1], arrays["hidden"][:-1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(arrays["blocks"][-1], arrays["hidden"][-1], atol=1e-3)


# --------------------------------------------------------------------------- resume and re-analysis


def ids(rows=12, cols=16, seed=0):
    return torch.randint(0, 256, (rows, cols), generator=torch.Generator().manual_seed(seed))


def test_a_stopped_run_resumes_to_identical_numbers(tmp_path, monkeypatch):
    model = tiny_model("llama")
    options = {"bootstrap": 50, "views": "default,top1pc", "batch_size": 4, "progress": False}
    whole = effdepth.measure(model, ids(), **options)

    real = passage_measure.pooled_batches

    def stops_after_one_batch(*args, **kwargs):
        for i, item in enumerate(real(*args, **kwargs)):
            if i == 1 and kwargs.get("start", 0) == 0:
                raise KeyboardInterrupt
            yield item

    monkeypatch.setattr(passage_measure, "pooled_batches", stops_after_one_batch)
    checkpoint = tmp_path / "checkpoint"
    with pytest.raises(MeasurementInterrupted, match="after 4 of 12 passages"):
        effdepth.measure(model, ids(), checkpoint=checkpoint, **options)
    resumed = effdepth.measure(model, ids(), checkpoint=checkpoint, resume=True, **options)
    for sim in ("cka", "cka-debiased"):
        for view in ("default", "top1pc"):
            a, b = whole.similarities[sim][view], resumed.similarities[sim][view]
            assert a.deff == b.deff and a.ci["deff"] == b.ci["deff"], (sim, view)


def test_re_analysis_gives_the_saved_numbers_and_applies_new_options(tmp_path, capsys):
    r = effdepth.measure(tiny_model("gpt2"), ids(), bootstrap=40, views="default,drop-bos,top1pc", progress=False)
    folder = r.save(tmp_path / "run").parent
    assert (folder / "pooled" / "default.npy").is_file()
    same = analyse_saved(folder, progress=False)
    assert same.to_dict()["views"] == r.to_dict()["views"]
    fewer = analyse_saved(folder, progress=False, views="top1pc", bootstrap=10, seed=3)
    assert list(fewer.views) == ["top1pc"] and fewer.views["top1pc"].deff == r.views["top1pc"].deff
    assert fewer.views["top1pc"].ci["deff"] != r.views["top1pc"].ci["deff"]
    assert (
        main(
            [
                "analyse",
                str(folder),
                "--views",
                "top3pc",
                "--out",
                str(tmp_path / "again"),
                "--no-progress",
                "--no-figures",
            ]
        )
        == 0
    )
    again = effdepth.load(tmp_path / "again")
    assert list(again.views) == ["top3pc"] and again.passages
    capsys.readouterr()
    # token-norm pools differently: that needs a forward pass, and the error says which --views store it
    assert (
        main(
            [
                "analyse",
                str(folder),
                "--views",
                "token-norm+top1pc",
                "--out",
                str(tmp_path / "never"),
                "--no-progress",
                "--no-figures",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "stored only default, drop-pos0, drop-bos" in err, err
    assert "--views default,drop-bos,top1pc,token-norm+top1pc to store it" in err, err
    assert not (tmp_path / "never").exists()


def test_the_analysis_progress_bar_counts_each_view_as_it_finishes(tmp_path, capsys):
    r = effdepth.measure(tiny_model("gpt2"), ids(), bootstrap=0, views="default,drop-bos,top1pc", progress=False)
    folder = r.save(tmp_path / "run").parent
    capsys.readouterr()
    analyse_saved(folder, progress=True)
    shown = capsys.readouterr().err.replace("\r", "\n")
    assert "1/3" in shown and "drop-bos" in shown and "2/3" in shown and "top1pc" in shown, shown


def test_passage_results_from_before_the_confound_controls_load_show_and_gain_them_by_re_analysis(tmp_path, capsys):
    from effdepth.report.tables import result_summary_text
    from effdepth.studies.claims import check_paths

    r = effdepth.measure(tiny_model("llama"), ids(16, 12), bootstrap=20, views="default,top1pc", progress=False)
    path = r.save(tmp_path / "old")
    data = json.loads(path.read_text())
    for key in ("passage_lengths", "confounds", "sample_size"):  # written before effdepth measured them
        data["extras"].pop(key)
    path.write_text(json.dumps(data))
    store = path.parent / "pooled"
    (store / "drop-pos0.npy").unlink()
    meta = json.loads((store / "store.json").read_text())
    meta["variants"].remove("drop-pos0")
    (store / "store.json").write_text(json.dumps(meta))
    old = effdepth.load(path)
    assert old.default.deff == r.default.deff
    text = result_summary_text(old)
    assert "note: measured before the confound controls" in text and "confounds:" not in text
    verdicts = {(v.claim, v.similarity): v for v in check_paths([path]).checked[0].verdicts}
    assert verdicts[("not-pos0", "cka")].status == "not measured"
    assert "measured before effdepth measured the confound controls" in verdicts[("not-pos0", "cka")].reason
    again = analyse_saved(path.parent, progress=False)
    assert again.default.deff == r.default.deff
    confounds = again.extras["confounds"]
    assert "no drop-pos0 variant" in confounds["notes"]["drop-pos0"] and "length" in confounds["cka"]
    assert again.extras["sample_size"]["cka"]["points"][-1]["deff"] == pytest.approx(r.default.deff, abs=1e-6)
    assert main(["show", str(path.parent)]) == 0 and "note: measured before" in capsys.readouterr().out


def test_a_control_outside_defaults_interval_warns_in_measure_show_report_and_claims(tmp_path, capsys):
    r = effdepth.measure(
        tiny_model("llama"),
        TEXT,
        tokenizer=byte_tokenizer(),
        seq_len=48,
        num_seqs=32,
        bootstrap=30,
        passage_split="paragraphs",
        progress=False,
    )
    table = r.extras["confounds"]
    assert r.extras["passage_lengths"]["distinct"] > 1 and set(table["cka"]) == {"default", "drop-pos0", "length"}
    for sim in ("cka", "cka-debiased"):  # made to move: the plumbing of the warning is what is tested
        table[sim]["length"].update(deff=table[sim]["default"]["ci"][1] + 0.5, outside=True)
    r.extras["sample_size"]["cka"]["last_doubling"] = {"moved": 0.2, "half_width": 0.1, "exceeds_half_width": True}
    folder = r.save(tmp_path / "run").parent
    warning = "warning: length moves D_eff (cka, cka-debiased)"
    assert main(["show", str(folder)]) == 0
    shown = capsys.readouterr().out
    assert warning in shown and "warning: D_eff (cka) moved by 0.200 between N/2 and N passages" in shown
    assert main(["claims", str(folder)]) == 0 and warning in capsys.readouterr().out
    assert main(["report", str(folder), "-o", str(tmp_path / "r.md")]) == 0
    report = (tmp_path / "r.md").read_text()
    assert warning in report and "Confounds: first position and passage length" in report and "Sample size" in report


def test_the_result_records_the_protocol_and_shows_table_2_for_a_paper_model(tmp_path):
    from effdepth.report.tables import result_summary_text

    r = effdepth.measure(tiny_model("gpt_neox"), ids(8, 12), bootstrap=0, progress=False)
    assert r.config["pooling"] == "mean" and r.config["similarities"] == ["cka", "cka-debiased"]
    r.provenance["model"] = {**r.provenance.get("model", {}), "id": "EleutherAI/pythia-70m"}
    text = result_summary_text(r)
    assert "Table 2" in text and "Pythia-70M" in text
    assert "null" in text  # every report says where the estimator alone sits


# --------------------------------------------------------------------------- bad input


def saved_model(folder, layers: int = 3):
    from transformers import AutoModelForCausalLM

    from effdepth.data.tokenizers import byte_tokenizer
    from effdepth.models.tiny import tiny_config

    config = tiny_config("llama")
    config.num_hidden_layers = layers
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("tiny") / "tiny-llama")


@pytest.fixture(scope="module")
def one_layer_dir(tmp_path_factory):
    return saved_model(tmp_path_factory.mktemp("tiny") / "one-layer", layers=1)


def corpus(tmp_path, text):
    path = tmp_path / "c.txt"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--num-seqs", "3"], "below 4"),
        (["--views", "top9pc", "--num-seqs", "8"], "top9pc"),
        (["--protocol", "papr"], "invalid choice: 'papr'"),
        (["--views", "center"], "gone with the old token-level statistics"),
        (["--similarity", "frobenius"], "gone with the old token-level statistics"),
        (["--pooling", "none", "--views", "length"], "keeps tokens, not means"),
        (["--tokens-per-passage", "4"], "add --pooling none"),
    ],
)
def test_bad_options_fail_in_one_line_before_the_model_loads(extra, message, tmp_path, capsys):
    out = tmp_path / "out"
    code = main(["measure", "/no/such/model", "--out", str(out), "--no-progress", *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and len(err.splitlines()) == 1, err
    assert not out.exists() or not any(out.iterdir())


def no_forward_pass(monkeypatch):
    """Make any forward pass over passages fail the test: what is refused must be refused before one."""

    def forward(*args, **kwargs):
        raise AssertionError("a forward pass ran")
        yield

    monkeypatch.setattr(passage_measure, "pooled_batches", forward)


def test_a_one_layer_model_and_a_corpus_of_nothing_fail_in_one_line(
    one_layer_dir, model_dir, tmp_path, capsys, monkeypatch
):
    text = corpus(tmp_path, "\n\n".join("a paragraph of text, long enough " * 3 for _ in range(10)))
    with monkeypatch.context() as m:
        no_forward_pass(m)
        code = main(
            [
                "measure",
                str(one_layer_dir),
                "--corpus",
                text,
                "--num-seqs",
                "8",
                "--seq-len",
                "32",
                "--out",
                str(tmp_path / "o1"),
                "--no-progress",
                "--no-figures",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert code == 2 and "one layer" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o1").exists()  # no checkpoint, no pooled vectors, no folder
    empty = corpus(tmp_path, "\n\n\n   \n\n")
    code = main(
        [
            "measure",
            str(model_dir),
            "--corpus",
            empty,
            "--num-seqs",
            "8",
            "--out",
            str(tmp_path / "o2"),
            "--no-progress",
            "--no-figures",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no text" in err, err
    assert not (tmp_path / "o2" / "result.json").exists()
    scraps = corpus(tmp_path, "\n\n".join(["a", "b c", "d"] * 20))  # every passage shorter than a real one
    code = main(
        [
            "measure",
            str(model_dir),
            "--corpus",
            scraps,
            "--num-seqs",
            "8",
            "--passage-split",
            "document",
            "--seq-len",
            "4",
            "--out",
            str(tmp_path / "o3"),
            "--no-progress",
            "--no-figures",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "passages" in err, err
    assert not (tmp_path / "o3" / "result.json").exists()


@pytest.mark.parametrize(
    "corpus_, message",
    [
        (ids(3, 8), "3 row(s) of token ids given: similarity across passages needs at least 4"),
        (
            {"input_ids": ids(6, 8), "attention_mask": torch.tensor([[1] * 8] * 4 + [[0] * 8] * 2)},
            "row 4 of the token ids has 0 real token(s)",
        ),
    ],
)
def test_token_ids_from_python_are_checked_before_the_forward_pass(corpus_, message, tmp_path, monkeypatch):
    no_forward_pass(monkeypatch)
    with pytest.raises(EffdepthError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        effdepth.measure(tiny_model("llama"), corpus_, checkpoint=tmp_path / "checkpoint", bootstrap=0, progress=False)
    assert len(str(caught.value).splitlines()) == 1
    assert not (tmp_path / "checkpoint").exists()


def test_a_passage_that_is_bos_alone_is_refused_under_drop_bos():
    from effdepth.data.passages import Passages
    from effdepth.measurement.run import measurement_plan
    from effdepth.options import AnalysisOptions

    passages = Passages.from_rows([[5, 6, 7]] * 4 + [[5]], bos_token_id=5)
    measurement_plan(passages, 3, 16, AnalysisOptions(views="default", bootstrap=0))
    with pytest.raises(EffdepthError, match=r"passage\(s\) 4 hold BOS alone"):
        measurement_plan(passages, 3, 16, AnalysisOptions(views="drop-bos", bootstrap=0))


def test_one_token_passages_and_seq_len_1_refuse_drop_pos0_in_one_line(tmp_path, capsys):
    from effdepth.data.passages import Passages
    from effdepth.measurement.run import measurement_plan
    from effdepth.options import AnalysisOptions

    passages = Passages.from_rows([[5, 6, 7]] * 4 + [[8]])
    with pytest.raises(EffdepthError, match=r"passage\(s\) 4 hold one token") as caught:
        measurement_plan(passages, 3, 16, AnalysisOptions(views="drop-pos0", bootstrap=0))
    assert len(str(caught.value).splitlines()) == 1
    assert main(["measure", "tiny:llama", "--seq-len", "1", "--out", str(tmp_path / "x"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "drop-pos0" in err and not (tmp_path / "x").exists(), err


def failing_forward(monkeypatch, after: int = 1):
    """The forward passes fail after ``after`` batches, as a damaged model or a full disk would."""
    real = passage_measure.pooled_batches

    def forward(*args, **kwargs):
        for i, item in enumerate(real(*args, **kwargs)):
            if i == after:
                raise EffdepthError("the forward pass failed")
            yield item

    monkeypatch.setattr(passage_measure, "pooled_batches", forward)


def test_a_run_that_fails_leaves_no_pooled_vectors_but_a_saved_checkpoint_stays(
    model_dir, tmp_path, capsys, monkeypatch
):
    failing_forward(monkeypatch)
    text = corpus(tmp_path, "\n\n".join(f"paragraph {i}: " + "some words of text " * 3 for i in range(30)))
    argv = [
        "measure",
        str(model_dir),
        "--corpus",
        text,
        "--num-seqs",
        "12",
        "--seq-len",
        "32",
        "--batch-size",
        "4",
        "--bootstrap",
        "0",
        "--no-progress",
        "--no-figures",
    ]
    code = main([*argv, "--out", str(tmp_path / "failed")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and err.endswith("the forward pass failed") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "failed").exists()
    # without a checkpoint the pooled vectors lived in a temporary folder: gone as well (a temporary folder of
    # this test's own: other test processes make theirs meanwhile)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    before = set(Path(tempfile.gettempdir()).glob("effdepth-pooled-*"))
    with pytest.raises(EffdepthError, match="the forward pass failed"):
        effdepth.measure(tiny_model("llama"), ids(12, 8), batch_size=4, bootstrap=0, progress=False)
    assert set(Path(tempfile.gettempdir()).glob("effdepth-pooled-*")) == before
    # a checkpoint saved before the failure is a run to resume: it stays, and resuming finishes it
    code = main([*argv, "--checkpoint-every", "0", "--out", str(tmp_path / "saved")])
    assert code != 0 and (tmp_path / "saved" / "checkpoint" / "state.json").is_file()
    assert (tmp_path / "saved" / "checkpoint" / "pooled" / "default.npy").is_file()
    monkeypatch.undo()
    assert main(["measure", "--resume", str(tmp_path / "saved"), "--no-progress", "--no-figures"]) == 0
    assert effdepth.load(tmp_path / "saved").config["num_passages"] == 12


def test_top_k_at_least_the_width_is_refused_before_any_forward_pass():
    with pytest.raises(EffdepthError, match="top64pc"):
        effdepth.measure(tiny_model("llama"), ids(70, 8), views="top64pc", bootstrap=0, progress=False)
    assert math.isfinite(
        effdepth.measure(tiny_model("llama"), ids(70, 8), views="top3pc", bootstrap=0, progress=False).default.deff
    )


def test_the_claims_name_the_structural_reference_f_l_across_passages():
    from effdepth.report.content.claims import claims_table
    from effdepth.studies.claims.report import claims_text

    passages = effdepth.measure(tiny_model("llama"), ids(16, 12), views="paper", bootstrap=20, progress=False)
    text = claims_text(passages) + claims_table(passages).note
    assert "F_L" in text and "F_N" not in text
    tokens = effdepth.load(OLD_TOKEN_RESULT)
    assert "F_N" in claims_text(tokens)  # an old token-mode result keeps its N analysed states
