"""The residual-carry intervention in a model: hooks, exactness, visibility, cleanup, outputs, CLI."""

import json

import pytest
import torch
from torch import nn

import effdepth
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.measurement import prepare
from effdepth.measurement.run import measure_passages, passage_loss
from effdepth.models.hooks import ResidualCapture
from effdepth.models.registry import resolve_architecture
from effdepth.models.tiny import tiny_model
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions
from effdepth.report.tables import save_study
from effdepth.studies.intervene import InterventionResult, measure_with_carry
from effdepth.studies.intervene.hooks import ResidualCarry, parse_carry, parse_layers, replace_hidden
from effdepth.studies.intervene.report import intervention_table

IDS = torch.tensor(
    [[256, 84, 111, 32, 98, 101, 32, 111, 114, 32, 110, 111], [256, 87, 104, 97, 116, 32, 105, 115, 32, 97, 32, 109]]
)


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", seed=1)


def capture_states(model, ids=IDS, lam=None, layers="all"):
    arch = resolve_architecture(model)
    with torch.no_grad(), ResidualCapture(arch) as cap:
        if lam is None:
            out = model(ids, output_hidden_states=True)
        else:
            with ResidualCarry(arch, lam, layers):
                out = model(ids, output_hidden_states=True)
    return cap.states.clone(), out


def our_hook_count(model):
    return sum(len(b._forward_hooks) for b in resolve_architecture(model).blocks)


# ---------------------------------------------------------------- exactness


def test_carry_one_reproduces_unmodified_result_exactly(llama):
    ids = torch.randint(0, 256, (6, 12), generator=torch.Generator().manual_seed(3))
    prepared = prepare(LoadOptions(model=llama, corpus=ids), progress=False)
    for pooling in ("mean", "none"):
        analysis = AnalysisOptions(pooling=pooling, views="default,drop-pos0", bootstrap=20)
        plain = measure_passages(prepared, analysis, run=RunOptions(progress=False))
        carried = measure_with_carry(prepared, 1.0, "all", analysis, progress=False)
        for name in plain.views:
            assert carried.to_dict()["views"][name] == plain.to_dict()["views"][name]
        assert carried.extras["loss"] == passage_loss(prepared, prepared.tokens, analysis.batch_size)
    assert carried.extras["intervention"] == {
        "carry": 1.0,
        "layers": [1, 2, 3],
        "carry_on": "blocks",
        "all_layers": True,
    }


@pytest.mark.parametrize("family", ["llama", "gpt2", "gpt_neox", "gemma3"])
@pytest.mark.parametrize("carry_on", ["blocks", "sublayers"])
def test_intervene_at_carry_one_gives_measures_number_exactly(family, carry_on):
    """One number per question: effdepth.intervene measures as effdepth.measure does (passage mode, the
    paper's), so the unmodified model gives measure's every number, the confounds included."""
    model = tiny_model(family, seed=1)
    ids = torch.randint(0, 256, (8, 12), generator=torch.Generator().manual_seed(2))
    plain = effdepth.measure(model, ids, views="default,drop-pos0,top1pc", bootstrap=20, progress=False)
    ir = effdepth.intervene(
        model, ids, carry=(1, 0.5), carry_on=carry_on, views="default,drop-pos0,top1pc", bootstrap=20, progress=False
    )
    carried = ir.results[1.0]
    assert carried.passages and plain.passages
    assert carried.to_dict()["views"] == plain.to_dict()["views"]
    assert carried.to_dict()["similarities"] == plain.to_dict()["similarities"]
    assert carried.extras["confounds"] == plain.extras["confounds"]
    assert (
        ir.results[0.5].default.deff != plain.default.deff and carried.extras["loss"]["tokens"] == 8 * 11
    )  # next-token predictions


def test_carry_zero_gives_the_block_functions_composed_without_skip(llama):
    arch = resolve_architecture(llama)
    calls = {}

    def remember(layer):
        def pre_hook(module, args, kwargs):
            calls.setdefault(layer, ({k: v for k, v in kwargs.items() if k != "hidden_states"}, args[1:]))

        return pre_hook

    handles = [b.register_forward_pre_hook(remember(i), with_kwargs=True) for i, b in enumerate(arch.blocks, start=1)]
    try:
        states, _ = capture_states(llama, lam=0.0)
    finally:
        for h in handles:
            h.remove()

    with torch.no_grad():
        for layer, block in enumerate(arch.blocks, start=1):
            kwargs, extra_args = calls[layer]
            h = states[layer - 1]
            out = block(h, *extra_args, **kwargs)
            update = (out if isinstance(out, torch.Tensor) else out[0]) - h  # f_l(h) = block(h) - h
            torch.testing.assert_close(states[layer], update, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["tensor", "tuple", "list", "dict", "positional", "keyword"])
def test_carry_on_blocks_with_other_output_and_input_forms(kind):
    torch.manual_seed(0)
    model = ToyStack(d=8, layers=3, kind=kind)
    arch = resolve_architecture(model, blocks_path="layers")
    x = torch.randn(2, 5, 8)
    expected = x
    with torch.no_grad():
        for block in model.layers:
            expected = 0.25 * expected + torch.tanh(block.lin(expected))
        with ResidualCarry(arch, 0.25, "all"):
            got = model(x)
    torch.testing.assert_close(got, expected)


class ToyBlock(nn.Module):
    def __init__(self, d, kind):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.kind = kind

    def forward(self, hidden_states, extra=None):
        out = hidden_states + torch.tanh(self.lin(hidden_states))
        side = torch.zeros(3)  # a tensor of another shape, passed through untouched
        return {
            "tensor": out,
            "positional": out,
            "keyword": out,
            "tuple": (out, side),
            "list": [side, out],
            "dict": {"attn": side, "hidden_states": out},
        }[self.kind]


class ToyStack(nn.Module):
    def __init__(self, d, layers, kind):
        super().__init__()
        self.kind = kind
        self.layers = nn.ModuleList(ToyBlock(d, kind) for _ in range(layers))

    def forward(self, x):
        for block in self.layers:
            out = block(hidden_states=x) if self.kind == "keyword" else block(x)
            x = {"tuple": lambda o: o[0], "list": lambda o: o[1], "dict": lambda o: o["hidden_states"]}.get(
                self.kind, lambda o: o
            )(out)
        return x


def test_replace_hidden_keeps_the_other_outputs():
    a, b, c = torch.zeros(2), torch.ones(3), torch.full((2,), 5.0)
    out = replace_hidden((a, b), a, c)
    assert out[0] is c and out[1] is b
    with pytest.raises(RuntimeError, match="could not replace"):
        replace_hidden(object(), a, c)


# ---------------------------------------------------------------- visibility


def test_intervention_is_seen_by_capture_downstream_blocks_and_hidden_states(llama):
    plain, plain_out = capture_states(llama)
    carried, carried_out = capture_states(llama, lam=0.5, layers="1")
    torch.testing.assert_close(carried[0], plain[0], rtol=0, atol=0)
    torch.testing.assert_close(carried[1], plain[1] - 0.5 * plain[0])
    for layer in (2, 3):  # later blocks received the modified stream
        assert not torch.allclose(carried[layer], plain[layer])
    # transformers' own hidden_states see it too (hooks are prepended)
    torch.testing.assert_close(carried_out.hidden_states[1], carried[1])
    assert not torch.allclose(carried_out.logits, plain_out.logits)


def test_hooks_run_first_and_are_removed_even_when_the_forward_fails(llama):
    arch = resolve_architecture(llama)
    before = our_hook_count(llama)

    def explode(module, args, output):
        raise RuntimeError("boom")

    bomb = arch.blocks[1].register_forward_hook(explode)
    try:
        with pytest.raises(RuntimeError, match="boom"):
            with ResidualCapture(arch), ResidualCarry(arch, 0.5, "all") as carry:
                first = list(arch.blocks[0]._forward_hooks.values())[0]
                assert first.__self__ is carry  # prepended: before capture and everything else
                llama(IDS)
    finally:
        bomb.remove()
    assert our_hook_count(llama) == before
    with ResidualCarry(arch, 0.5, "2"):  # the blocks are free again
        pass
    assert our_hook_count(llama) == before


def test_nested_carry_on_the_same_block_is_refused(llama):
    arch = resolve_architecture(llama)
    before = our_hook_count(llama)
    with ResidualCarry(arch, 0.5, "1-2"):
        with pytest.raises(EffdepthError, match="already has a residual carry"):
            with ResidualCarry(arch, 0.9, "2"):
                pass
        with ResidualCarry(arch, 0.9, "3"):  # a different block is fine
            pass
    assert our_hook_count(llama) == before


def test_gradients_flow_through_the_carry(llama):
    model = tiny_model("llama", seed=2).train()
    arch = resolve_architecture(model)
    grads = {}
    for lam in (1.0, 0.5):
        model.zero_grad()
        with ResidualCarry(arch, lam, "all"):
            model(IDS, labels=IDS).loss.backward()
        grads[lam] = model.model.embed_tokens.weight.grad.clone()
    assert grads[0.5].abs().sum() > 0
    assert not torch.allclose(grads[0.5], grads[1.0])


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "carry, message",
    [
        ("1.5", "outside"),
        ("-0.1", "outside"),
        ("nan", "outside"),
        ("", "at least one"),
        ("a", "not a number"),
        ("1,1", "twice"),
        ((), "at least one"),
    ],
)
def test_bad_carry_values(carry, message):
    with pytest.raises(EffdepthError, match=message):
        parse_carry(carry)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("0", "numbered 1..3"),
        ("4", "numbered 1..3"),
        ("1-5", "numbered 1..3"),
        ("3-1", "backwards"),
        ("x", "not a block"),
        ("1,,2", "not a block"),
        (",", "not a block"),
        ("", "not a block"),
        ([1.5], "whole block"),
        ([], "names no layer"),
    ],
)
def test_bad_layer_specs(spec, message):
    with pytest.raises(EffdepthError, match=message):
        parse_layers(spec, 3)


def test_layer_specs():
    assert parse_layers("all", 3) == (1, 2, 3)
    assert parse_layers(" 1-2 , 3 ", 3) == (1, 2, 3)
    assert parse_layers([3, 1], 3) == (1, 3)


def test_unknown_measurement_options_are_refused(llama):
    with pytest.raises(TypeError, match="bogus_option"):
        effdepth.intervene(llama, IDS, carry=(1,), bogus_option=3)


def test_intervene_checks_layers_against_the_model(llama):
    with pytest.raises(EffdepthError, match="numbered 1..3"):
        effdepth.intervene(llama, IDS.repeat(2, 1), carry=(1, 0.5), layers="2-4", bootstrap=0, progress=False)


# ---------------------------------------------------------------- results, files


def test_intervene_saves_results_table_and_figure(llama, tmp_path):
    # Four sequences: two pairs for cka's bootstrap.
    ids = torch.cat([IDS, IDS[:, [0, *range(11, 0, -1)]]])
    ir = effdepth.intervene(
        llama, ids, carry="1,0.5", layers="2-3", views="default,token-norm", bootstrap=20, progress=False
    )
    assert isinstance(ir, InterventionResult) and ir.carries == (1.0, 0.5) and ir.layers == (2, 3)
    rows = ir.rows()
    assert [r["lam"] for r in rows] == [1.0, 0.5]
    assert all(r["loss"] > 0 and r["perplexity"] > 1 and len(r["deff_ci"]) == 2 for r in rows)
    assert set(ir.results[0.5].views) == {"default", "token-norm"}
    assert "R_matched" in intervention_table(ir) and "perplexity" in intervention_table(ir, "token-norm")

    path = save_study(ir, tmp_path)
    for name in (
        "intervention.json",
        "intervention.png",
        "intervention.pdf",
        "carry-1/result.json",
        "carry-0.5/result.json",
    ):
        assert (tmp_path / name).is_file(), name
    assert not list(tmp_path.glob(".*tmp"))
    again = effdepth.load(path, expect=InterventionResult)
    assert again.rows() == rows
    saved = effdepth.load(tmp_path / "carry-0.5")
    assert saved.extras["intervention"]["layers"] == [2, 3]
    assert saved.default.deff == ir.results[0.5].default.deff
    with pytest.raises(EffdepthError, match="no intervention"):
        effdepth.load(tmp_path / "nothing", expect=InterventionResult)

    # effdepth report of the folder: the intervention's table per view and its figure, beside the carried results.
    from effdepth.report.build import write_report

    written = write_report([tmp_path], tmp_path / "report.md")
    page = written[0].read_text(encoding="utf-8")
    section = page.split("## Residual-carry intervention of ")[1].split("\n## ")[0]
    assert "### View default" in section and "### View token-norm" in section
    for r in rows:  # the same numbers as the table effdepth intervene prints
        assert f"| {r['lam']:g} | {r['deff']:.3f} | [{r['deff_ci'][0]:.3f}, {r['deff_ci'][1]:.3f}] |" in section
    assert "study-1-intervention.png" in section and (tmp_path / "report_files" / "study-1-intervention.png").is_file()
    assert page.count("carry 0.5") >= 1  # the carried results are reported too
    html = write_report([path], tmp_path / "alone.html")[0].read_text(encoding="utf-8")
    assert "Residual-carry intervention of" in html and "perplexity" in html and "data:image/png;base64," in html


# ---------------------------------------------------------------- CLI


def run(argv, capsys):
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_intervene_and_recompose(model_dir, tmp_path, capsys):
    corpus = tmp_path / "text.txt"
    corpus.write_text("Now is the winter of our discontent made glorious summer. " * 100)
    code, out, err = run(
        [
            "intervene",
            model_dir,
            "--corpus",
            corpus,
            "--carry",
            "1,0.75",
            "--layers",
            "1-2",
            "--seq-len",
            16,
            "--num-seqs",
            4,
            "--bootstrap",
            20,
            "--out",
            tmp_path / "iv",
            "--no-progress",
        ],
        capsys,
    )
    assert code == 0, err
    assert "R_matched" in out and "perplexity" in out and "0.75" in out
    data = json.loads((tmp_path / "iv" / "intervention.json").read_text())
    assert data["carries"] == [1.0, 0.75] and data["layers"] == [1, 2]

    code, out, err = run(
        ["recompose", tmp_path / "iv" / "carry-1", "--carry", "1,0.5,0", "--out", tmp_path / "rc"], capsys
    )
    assert code == 0, err
    assert "D_eff decorrelated" in out and "R_matched" in out
    rec = json.loads((tmp_path / "rc" / "recompose.json").read_text())
    measured = json.loads((tmp_path / "iv" / "carry-1" / "result.json").read_text())["views"]["default"]
    assert abs(rec["rows"][0]["deff"] - measured["deff"]) < 1e-9  # a carry-<lam>/ result keeps its pooled vectors
    assert rec["decorrelated"]["measured_reference_matched"] == measured["references"]["matched"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["intervene", "--carry", "1.5"], "outside [0, 1]"),
        (["intervene", "--carry", ","], "at least one value"),
        (["intervene", "--layers", "2-x"], "not a block number"),
        (
            ["intervene", "MODEL", "--corpus", "CORPUS", "--layers", "7", "--seq-len", "8", "--num-seqs", "4"],
            "numbered 1..3",
        ),
        (["recompose", "/no/such/result", "--carry", "1"], "no result at"),
        (["recompose", "RESULT", "--carry", "2"], "outside [0, 1]"),
        (["recompose", "RESULT", "--view", "bogus"], "no view 'bogus'"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(argv, message, model_dir, tmp_path, capsys):
    result_dir = tmp_path / "r"
    effdepth.from_states(torch.randn(4, 6, 8, 16)).save(result_dir)
    corpus = tmp_path / "text.txt"
    corpus.write_text("To be, or not to be, that is the question. " * 20)
    argv = [{"MODEL": model_dir, "RESULT": result_dir, "CORPUS": corpus}.get(a, a) for a in argv]
    code, out, err = run(argv + ["--out", tmp_path / "o", "--no-progress"] if argv[0] == "intervene" else argv, capsys)
    assert code == 2
    assert message in err and err.count("\n") == 1 and err.startswith("effdepth: error:")


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "gemma2", "qwen3_5_text", "gemma3"])
def test_carry_in_other_families(family):
    model = tiny_model(family)
    ids = IDS[:1, :8]
    plain, _ = capture_states(model, ids)
    carried, _ = capture_states(model, ids, lam=0.5, layers="1")
    torch.testing.assert_close(carried[1], plain[1] - 0.5 * plain[0], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(carried[-1], plain[-1])
