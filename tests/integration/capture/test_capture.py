"""Capture per architecture: hooks give S_0..S_L before the final norm."""

import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.measurement.forward import decoder_forward
from effdepth.models.hooks import ResidualCapture
from effdepth.models.registry import resolve_architecture
from effdepth.models.tiny import TINY_HIDDEN, TINY_LAYERS, TINY_MODEL_TYPES, tiny_model


@pytest.fixture(scope="module", params=TINY_MODEL_TYPES)
def tiny(request):
    return request.param, tiny_model(request.param)


def test_tiny_sizes_took_effect(tiny):
    model_type, model = tiny
    text = model.config.get_text_config()
    assert text.num_hidden_layers == TINY_LAYERS
    assert text.hidden_size == TINY_HIDDEN
    assert sum(p.numel() for p in model.parameters()) < 3_000_000
    assert resolve_architecture(model).num_layers == TINY_LAYERS


def test_hooks_match_hidden_states_and_last_state_is_pre_norm(tiny):
    model_type, model = tiny
    arch = resolve_architecture(model)
    ids = torch.randint(0, 250, (2, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), ResidualCapture(arch) as cap:
        out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    states = cap.states
    assert states.shape == (TINY_LAYERS + 1, 2, 10, TINY_HIDDEN)
    for i in range(TINY_LAYERS):  # S_0 .. S_{L-1}
        torch.testing.assert_close(states[i], hs[i], rtol=1e-5, atol=1e-5)
    # hidden_states[-1] is the final norm's output, not a residual state...
    assert not torch.allclose(states[-1], hs[-1], rtol=1e-3, atol=1e-3)
    # ...and the final norm applied to our S_L reproduces it.
    with torch.no_grad():
        torch.testing.assert_close(arch.final_norm(states[-1]), hs[-1], rtol=1e-5, atol=1e-5)
    assert not cap._handles  # hooks removed


def test_decoder_only_forward_gives_the_same_states(tiny):
    model_type, model = tiny
    arch = resolve_architecture(model)
    ids = torch.randint(0, 250, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), ResidualCapture(arch) as cap:
        model(input_ids=ids)
    full = cap.states.clone()
    with ResidualCapture(arch) as cap:
        decoder_forward(model, arch, ids, None)
    torch.testing.assert_close(cap.states, full, rtol=0, atol=0)


def test_hooks_removed_when_forward_fails():
    model = tiny_model("llama")
    arch = resolve_architecture(model)
    with pytest.raises(IndexError):
        with ResidualCapture(arch):
            model(input_ids=torch.tensor([[10_000]]))
    assert all(not b._forward_hooks and not b._forward_pre_hooks for b in arch.blocks)


def test_gpt2_s0_includes_position_embeddings():
    model = tiny_model("gpt2")
    arch = resolve_architecture(model)
    ids = torch.tensor([[5, 5, 5]])
    with torch.no_grad(), ResidualCapture(arch) as cap:
        model(input_ids=ids)
    wte = model.transformer.wte(ids)
    assert not torch.allclose(cap.states[0], wte)
    torch.testing.assert_close(cap.states[0], wte + model.transformer.wpe(torch.arange(3))[None])


def test_left_padding_is_masked_and_positions_shift():
    model = tiny_model("gpt2")
    ids = torch.randint(0, 250, (4, 8), generator=torch.Generator().manual_seed(2))
    plain = effdepth.measure(model, ids, bootstrap=0, progress=False, pooling="none").default
    padded_ids = torch.cat([torch.full((4, 3), 258), ids], dim=1)
    mask = torch.cat([torch.zeros(4, 3), torch.ones(4, 8)], dim=1).long()
    padded = effdepth.measure(
        model, {"input_ids": padded_ids, "attention_mask": mask}, bootstrap=0, progress=False, pooling="none"
    ).default
    assert padded.tokens == 32
    assert padded.deff == pytest.approx(plain.deff, rel=1e-4)


def test_unsupported_architectures_get_a_clear_error():
    from transformers import AutoConfig, AutoModelForCausalLM

    mamba = AutoModelForCausalLM.from_config(
        AutoConfig.for_model("mamba", num_hidden_layers=2, hidden_size=16, vocab_size=50, state_size=4)
    )
    with pytest.raises(EffdepthError, match="not a transformer with a residual stream.*supported: .*gpt2"):
        resolve_architecture(mamba)


def test_unknown_architecture_points_to_overrides():
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)

        def forward(self, x):
            return x + self.lin(x)

    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(20, 8)
            self.stack = torch.nn.ModuleList([Block(), Block()])

        def forward(self, input_ids, **kw):
            h = self.emb(input_ids)
            for b in self.stack:
                h = b(h)
            return h

    odd = Odd()
    with pytest.raises(EffdepthError, match="blocks_path="):
        resolve_architecture(odd)
    arch = resolve_architecture(odd, blocks_path="stack", embedding_path="emb")
    assert arch.num_layers == 2
    with pytest.raises(EffdepthError, match="does not name a module"):
        resolve_architecture(odd, blocks_path="nope")
    with pytest.raises(EffdepthError, match="not a non-empty list"):
        resolve_architecture(odd, blocks_path="emb")


def test_base_model_class_resolves():
    model = tiny_model("llama").model  # LlamaModel, no LM head
    arch = resolve_architecture(model)
    assert arch.paths["blocks"] == "layers" and arch.num_layers == TINY_LAYERS
