"""The paper's per-sublayer residual carry on every supported family: lam = 1 is exactly the plain model,
and with lam != 1 a block's output is lam^2 h + lam attn + mlp (lam h + attn + mlp for a parallel residual),
the branches as the model computed them."""

from __future__ import annotations

import pytest
import torch

from effdepth.errors import EffdepthError
from effdepth.models.hooks import hidden_from_input, hidden_from_output
from effdepth.models.registry import resolve_architecture
from effdepth.models.tiny import TINY_MODEL_TYPES, tiny_model
from effdepth.studies.intervene.hooks import ResidualCarry, SublayerCarry, carry_hooks, sublayer_branches


def ids():
    return torch.randint(0, 256, (2, 7), generator=torch.Generator().manual_seed(0))


def hook_count(arch) -> int:
    """Forward hooks and pre-hooks on the blocks and their children: what a carry registers."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for block in arch.blocks for m in block.modules())


def check_carry_one_is_exactly_the_plain_model(model, tokens) -> None:
    """lam = 1 with the per-sublayer hooks registered (they subtract 0 * h) gives the plain model's logits bit
    for bit, and the default lam = 1 registers no hook at all."""
    arch = resolve_architecture(model)
    before = hook_count(arch)
    with torch.no_grad():
        plain = model(tokens).logits
        with SublayerCarry(arch, 1.0, "all", hooks_at_one=True):
            assert hook_count(arch) >= before + 2 * arch.num_layers  # a block hook and a branch hook per block at least
            hooked = model(tokens).logits
        with SublayerCarry(arch, 1.0, "all"):
            assert hook_count(arch) == before
    assert hook_count(arch) == before and torch.equal(hooked, plain)


def check_carried_block_formula(model, tokens, lam: float, block_index: int, rtol: float = 1e-5) -> None:
    """With lam != 1, block ``block_index`` (0-based) outputs lam^2 h + lam attn + mlp (lam h + attn + mlp for a
    parallel residual), with h its input and attn, mlp the branches as the model computed them."""
    arch = resolve_architecture(model)
    block = arch.blocks[block_index]
    attention, mlp, parallel = sublayer_branches(block)
    seen, handles = {}, []
    with torch.no_grad(), SublayerCarry(arch, lam, [block_index + 1]):
        # Prepended after the carry's hooks, these run before them: the branches as the model computed them.
        handles.append(
            block.register_forward_pre_hook(
                lambda m, a, k: seen.__setitem__("h", hidden_from_input(a, k).clone()), with_kwargs=True
            )
        )
        handles.append(
            attention.register_forward_hook(
                lambda m, a, o: seen.__setitem__("attn", hidden_from_output(o, seen["h"]).clone()), prepend=True
            )
        )
        handles.append(
            mlp.register_forward_hook(
                lambda m, a, o: seen.__setitem__("mlp", hidden_from_output(o, seen["h"]).clone()), prepend=True
            )
        )
        handles.append(
            block.register_forward_hook(
                lambda m, a, o: seen.__setitem__("out", hidden_from_output(o, seen["h"]).clone())
            )
        )
        try:
            model(tokens)
        finally:
            for h in handles:
                h.remove()
    h, a, f = seen["h"], seen["attn"], seen["mlp"]
    expected = lam * h + a + f if parallel else lam * (lam * h + a) + f
    scale = float(expected.abs().max())
    torch.testing.assert_close(seen["out"], expected, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("family", TINY_MODEL_TYPES)
def test_carry_one_is_exactly_the_plain_model(family):
    check_carry_one_is_exactly_the_plain_model(tiny_model(family), ids())


@pytest.mark.parametrize("family", TINY_MODEL_TYPES)
def test_a_carried_block_outputs_lam_squared_h_plus_lam_attn_plus_mlp(family):
    check_carried_block_formula(tiny_model(family), ids(), 0.6, 1)


def test_every_registered_family_has_a_tiny_model():
    from effdepth.models.registry import ARCHITECTURES

    assert set(ARCHITECTURES) <= set(TINY_MODEL_TYPES)


def test_sublayer_and_block_carries_differ_and_cannot_nest():
    model = tiny_model("llama")
    arch = resolve_architecture(model)
    with torch.no_grad():
        with carry_hooks(arch, 0.5, "all", on="sublayers"):
            sub = model(ids()).logits
        with carry_hooks(arch, 0.5, "all", on="blocks"):
            per_block = model(ids()).logits
        assert not torch.allclose(sub, per_block)
        with ResidualCarry(arch, 0.5, [1]), pytest.raises(EffdepthError, match="already has a residual carry"):
            with SublayerCarry(arch, 0.5, [1]):
                pass
    with pytest.raises(EffdepthError, match="--carry-on 'layers'"):
        carry_hooks(arch, 0.5, "all", on="layers")


def test_gradients_flow_through_the_sublayer_carry():
    model = tiny_model("gpt2").train()
    with SublayerCarry(resolve_architecture(model), 0.5, "all"):
        model(ids(), labels=ids()).loss.backward()
    assert all(p.grad is not None for p in model.transformer.h[0].attn.parameters())


def test_intervene_on_sublayers_records_it_and_keeps_the_plain_model_at_one(tmp_path, capsys):
    import json

    from effdepth.cli import main
    from effdepth.data.tokenizers import byte_tokenizer

    folder = tmp_path / "tiny-qwen3"
    tiny_model("qwen3").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    common = [
        str(folder),
        "--pooling",
        "none",
        "--seq-len",
        "16",
        "--num-seqs",
        "4",
        "--bootstrap",
        "0",
        "--carry",
        "1,0.5",
        "--no-progress",
    ]
    assert main(["intervene", *common, "--carry-on", "sublayers", "--out", str(tmp_path / "sub")]) == 0
    assert main(["intervene", *common, "--out", str(tmp_path / "blocks")]) == 0
    out = capsys.readouterr().out
    sub = json.loads((tmp_path / "sub" / "intervention.json").read_text())
    blocks = json.loads((tmp_path / "blocks" / "intervention.json").read_text())
    assert sub["config"]["carry_on"] == "sublayers" and blocks["config"]["carry_on"] == "blocks"
    loss = {
        name: {r["lam"]: r["loss"] for r in record["table"]["default"]}
        for name, record in (("sub", sub), ("blocks", blocks))
    }
    assert loss["sub"][1.0] == loss["blocks"][1.0] and loss["sub"][0.5] != loss["blocks"][0.5]
    assert "every attention and MLP sublayer" in out
    assert main(["intervene", *common, "--carry-on", "layers", "--out", str(tmp_path / "bad")]) == 2
