"""nnsight wrappers are unwrapped to the Hugging Face module they hold: the same numbers, exactly.

Offline: ``LanguageModel(hf_model, tokenizer=tok)`` wraps a loaded module;
``TransformersModel(folder, task="text-generation", tokenizer=tok)`` builds
on the meta device and loads the folder's weights on dispatch.
"""

import warnings

import pytest
import torch

import effdepth
from effdepth.data import byte_tokenizer
from effdepth.models.tiny import TINY_LAYERS, tiny_model

VIEWS = ("default", "drop-pos0", "token-norm", "top1pc")


@pytest.fixture(scope="module", autouse=True)
def nnsight():
    # Imported when these tests run, not at collection: importing nnsight patches
    # torch (Tensor.backward) and mounts .save on every object, process-wide.
    return pytest.importorskip("nnsight")


def token_ids(rows=6, cols=12, seed=0):
    return torch.randint(0, 256, (rows, cols), generator=torch.Generator().manual_seed(seed))


def measured(model, corpus, **options):
    options = {"bootstrap": 20, "batch_size": 3, "progress": False, "views": VIEWS, **options}
    return effdepth.measure(model, corpus, **options, pooling="none")


def numbers(result):
    return {
        name: (v.deff, v.profile, v.similarity, v.references, v.attribution, v.ci, v.tokens)
        for name, v in result.views.items()
    }


def wrap(kind, model):
    from nnsight import LanguageModel
    from nnsight.modeling.transformers import TransformersModel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LanguageModel is deprecated in nnsight 0.8
        if kind == "LanguageModel":
            return LanguageModel(model, tokenizer=byte_tokenizer())
        return TransformersModel(model, tokenizer=byte_tokenizer(), task="text-generation")


@pytest.mark.parametrize("kind", ["LanguageModel", "TransformersModel"])
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_nnsight_model_gives_identical_numbers_to_its_hugging_face_model(kind, family):
    hf = tiny_model(family)
    ids = token_ids()
    direct = measured(hf, ids)
    wrapped = measured(wrap(kind, hf), ids)
    assert numbers(wrapped) == numbers(direct)
    assert wrapped.provenance["model"]["wrapper"] == f"nnsight.{kind}"
    assert wrapped.provenance["model"]["model_type"] == family


def test_nnsight_tokenizer_is_the_default_for_text():
    hf = tiny_model("llama")
    texts = ["Now is the winter of our discontent. " * 10]
    wrapped = measured(wrap("TransformersModel", hf), texts, seq_len=16, num_seqs=4)
    direct = measured(hf, texts, seq_len=16, num_seqs=4, tokenizer=byte_tokenizer())
    assert numbers(wrapped) == numbers(direct)


def test_undispatched_nnsight_model_is_dispatched_first(saved_tiny_model):
    from nnsight.modeling.transformers import TransformersModel
    from transformers import AutoTokenizer

    folder = saved_tiny_model("llama")
    lazy = TransformersModel(str(folder), task="text-generation", tokenizer=AutoTokenizer.from_pretrained(folder))
    assert lazy.dispatched is False  # meta tensors until dispatched
    r = measured(lazy, token_ids())
    assert r.provenance["model"]["dispatched_by_effdepth"] is True
    assert numbers(r) == numbers(measured(str(folder), token_ids()))


def test_capture_and_hidden_states_through_nnsight():
    hf = tiny_model("gpt2")
    lm = wrap("TransformersModel", hf)
    ids = token_ids(4, 10)
    with effdepth.capture(lm) as states, torch.no_grad():
        out = lm._module(ids, output_hidden_states=True)
    assert len(states) == TINY_LAYERS + 1
    with effdepth.capture(hf) as direct, torch.no_grad():
        hf(ids)
    torch.testing.assert_close(states.tensor, direct.tensor, rtol=0, atol=0)
    with effdepth.capture(lm) as traced:
        with lm.trace(ids):  # nnsight's own tracing: the hooks still read the stream
            pass
    torch.testing.assert_close(traced.tensor, direct.tensor, rtol=0, atol=0)
    r = effdepth.from_hidden_states(out.hidden_states, model=lm, pooling="none")
    assert r.provenance["model"]["wrapper"] == "nnsight.TransformersModel"
