"""Pure parts of the lens adapters and the notebook API: no TransformerLens or nnsight needed.

Objects of those libraries are recognised by their classes' modules, so
stand-ins with the same module names exercise the detection, the weight
processing check and its error without either library installed.
"""

import inspect
import types

import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.measurement.notebook import state_batch
from effdepth.models.external import _centred, adapt_external, library_of, weight_processing
from effdepth.models.tiny import tiny_model


def in_module(name, module, bases=(torch.nn.Module,), **attrs):
    return type(name, bases, {"__module__": module, **attrs})


class _Hooks:
    def __init__(self, log):
        self.log = log

    def __enter__(self):
        self.log.append("enter")

    def __exit__(self, *exc):
        self.log.append("exit")


def fake_hooked_transformer(*, centred, norm="LN", n_layers=2, d=16, vocab=40):
    """Looks like a HookedTransformer to effdepth: class name, module, cfg, blocks, hook points."""

    def init(self):
        torch.nn.Module.__init__(self)
        self.cfg = types.SimpleNamespace(
            normalization_type=norm, default_prepend_bos=True, d_model=d, d_vocab=vocab, model_name="fake"
        )
        self.embed = torch.nn.Module()
        w = torch.randn(vocab, d)
        self.embed.W_E = torch.nn.Parameter(w - w.mean(-1, keepdim=True) if centred else w)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(d, d) for _ in range(n_layers))
        self.hook_dict = {
            "blocks.0.hook_resid_pre": None,
            **{f"blocks.{i}.hook_resid_post": None for i in range(n_layers)},
        }
        self.tokenizer = None
        self.log = []

    cls = in_module(
        "HookedTransformer",
        "transformer_lens.HookedTransformer",
        __init__=init,
        W_E=property(lambda self: self.embed.W_E),
        hooks=lambda self, fwd_hooks=(): _Hooks(self.log),
    )
    return cls()


def test_objects_are_recognised_by_their_classes_modules():
    assert library_of(in_module("Anything", "transformer_lens.model_bridge.bridge")()) == "transformer_lens"
    sub = in_module(
        "Mine", "my.code", bases=(in_module("LanguageModel", "nnsight.modeling.language", bases=(object,)),)
    )
    assert library_of(sub()) == "nnsight"
    assert library_of(tiny_model("gpt2")) is None
    assert adapt_external(tiny_model("gpt2")) is None and adapt_external(None) is None


def test_centring_is_read_from_the_weights_in_every_dtype():
    g = torch.Generator().manual_seed(0)
    for d in (8, 64, 4096):
        w = torch.randn(300, d, generator=g) * 0.02 + 0.001
        c = w - w.mean(-1, keepdim=True)
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            assert _centred(w.to(dtype)) is False, (d, dtype)
            assert _centred(c.to(dtype)) is True, (d, dtype)
    assert _centred(torch.zeros(5, 8)) is None and _centred(None) is None
    big = torch.randn(50_000, 32, generator=g)
    assert _centred(big) is False and _centred(big - big.mean(-1, keepdim=True)) is True


def test_centred_hooked_transformer_is_refused_in_one_line_saying_what_to_do():
    model = fake_hooked_transformer(centred=True, norm="LNPre")
    with pytest.raises(EffdepthError) as info:
        adapt_external(model)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("this TransformerLens HookedTransformer has centred writing weights")
    assert "each token's mean across the residual dimensions" in message
    assert "HookedTransformer.from_pretrained_no_processing(...)" in message and "allow_processed=True" in message
    ext = adapt_external(model, allow_processed=True)
    record = ext.info["weight_processing"]
    assert record["fold_ln"] is True and record["center_writing_weights"] is True and record["stream_changed"] is True
    assert ext.architecture.num_layers == 2 and ext.architecture.hook_names[0] == "blocks.0.hook_resid_pre"


def test_stream_keeping_processing_is_recorded_not_refused():
    ext = adapt_external(fake_hooked_transformer(centred=False, norm="RMSPre"))
    record = ext.info["weight_processing"]
    assert record["fold_ln"] is True and record["center_writing_weights"] is False and record["stream_changed"] is False
    assert weight_processing(fake_hooked_transformer(centred=False))["fold_ln"] is False


def test_processing_recorded_but_embedding_unreadable_is_refused():
    model = fake_hooked_transformer(centred=False, norm="LNPre")
    model.embed.W_E = torch.nn.Parameter(torch.zeros(40, 16))  # cannot tell
    with pytest.raises(EffdepthError, match="could not be checked for centring"):
        adapt_external(model)


def test_missing_hook_points_and_interventions_are_refused():
    model = fake_hooked_transformer(centred=False)
    del model.hook_dict["blocks.1.hook_resid_post"]
    with pytest.raises(EffdepthError, match="no hook point blocks.1.hook_resid_post"):
        adapt_external(model)
    arch = adapt_external(fake_hooked_transformer(centred=False)).architecture
    with pytest.raises(EffdepthError, match="interventions are not supported"):
        arch.blocks[0]
    other = in_module(
        "HookedEncoder", "transformer_lens.HookedEncoder", __init__=lambda self: torch.nn.Module.__init__(self)
    )()
    with pytest.raises(EffdepthError, match="HookedTransformer or a TransformerBridge"):
        adapt_external(other)


def test_hook_context_is_closed_when_the_capture_ends():
    model = fake_hooked_transformer(centred=False)
    with effdepth.capture(model):
        assert model.log == ["enter"]
    assert model.log == ["enter", "exit"]


def test_nnsight_stand_in_is_unwrapped_and_dispatched():
    hf = tiny_model("llama")

    def init(self, module):
        self._module = torch.nn.Linear(1, 1)  # a meta stand-in until dispatch
        self._real = module
        self.tokenizer = "tok"
        self.dispatched = False

    def dispatch(self):
        self._module, self.dispatched = self._real, True

    lazy = in_module(
        "TransformersModel", "nnsight.modeling.transformers", bases=(object,), __init__=init, dispatch=dispatch
    )(hf)
    ext = adapt_external(lazy)
    assert ext.model is hf and ext.tokenizer == "tok" and ext.architecture is None
    assert ext.info["wrapper"] == "nnsight.TransformersModel" and ext.info["dispatched_by_effdepth"] is True
    empty = in_module("Envoy", "nnsight.intervention.envoy", bases=(object,))()
    with pytest.raises(EffdepthError, match="found no torch module inside this nnsight Envoy"):
        adapt_external(empty)


def test_state_batches_and_their_errors():
    assert tuple(state_batch(torch.zeros(3, 5, 4)).shape) == (3, 1, 5, 4)
    assert state_batch(torch.zeros(3, 2, 5, 4, dtype=torch.int64)).dtype == torch.float64
    x = torch.zeros(4, 5, 8, requires_grad=True)
    assert not state_batch([x, x, x]).requires_grad
    with pytest.raises(EffdepthError, match="same shape"):
        state_batch([torch.zeros(5, 4), torch.zeros(6, 4)])
    with pytest.raises(EffdepthError, match="at least two tensors"):
        state_batch([torch.zeros(5, 4)])
    with pytest.raises(EffdepthError, match="got str"):
        state_batch("states")
    with pytest.raises(EffdepthError, match=r"L >= 1"):
        state_batch(torch.zeros(1, 2, 5, 4))


def test_accumulator_default_similarity_follows_measure():
    from effdepth.options import AnalysisOptions

    assert inspect.signature(effdepth.Accumulator).parameters["similarity"].default is None  # measure's default
    for pooling in ("mean", "none"):
        assert effdepth.Accumulator(pooling=pooling).analysis.similarity == AnalysisOptions(pooling=pooling).similarity
    assert all(
        p.default is not inspect.Parameter.empty for p in inspect.signature(effdepth.Accumulator).parameters.values()
    )
