"""The notebook API on Hugging Face models: capture, Accumulator, from_hidden_states, for a passage's mean and
for its tokens as samples (--pooling none).

Everything here needs only transformers (no TransformerLens, no nnsight):
tests/integration/test_transformer_lens.py and test_nnsight.py cover those.
"""

import subprocess
import sys

import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.models.registry import resolve_architecture
from effdepth.models.tiny import TINY_HIDDEN, TINY_LAYERS, tiny_model

FAMILIES = ("gpt2", "llama")
BATCH = 3
TOKENS = {"pooling": "none", "tokens_per_passage": 5}


def token_ids(rows=6, cols=12, seed=0):
    return torch.randint(0, 256, (rows, cols), generator=torch.Generator().manual_seed(seed))


def measured(model, ids, **options):
    options = {"bootstrap": 0, "batch_size": BATCH, "progress": False, **options}
    return effdepth.measure(model, ids, **options)


def accumulated(model, ids, views=("default",), **options):
    acc = effdepth.Accumulator(views, **{"bootstrap": 0, **options})
    with effdepth.capture(model) as states, torch.no_grad():
        for i in range(0, ids.shape[0], BATCH):
            model(ids[i : i + BATCH])
            acc.update(states)
    return acc


def assert_same_numbers(a, b, tol):
    assert set(a.views) == set(b.views)
    for name, va in a.views.items():
        vb = b.views[name]
        assert va.sequences == vb.sequences and va.tokens == vb.tokens
        assert va.deff == pytest.approx(vb.deff, abs=tol), name
        assert va.reference == vb.reference
        torch.testing.assert_close(torch.tensor(va.profile), torch.tensor(vb.profile), rtol=0, atol=tol)
        torch.testing.assert_close(torch.tensor(va.similarity), torch.tensor(vb.similarity), rtol=0, atol=tol)
        for key in va.references:
            assert va.references[key] == pytest.approx(vb.references[key], abs=tol)
        if va.ci is not None or vb.ci is not None:
            for key in va.ci:
                torch.testing.assert_close(torch.tensor(va.ci[key]), torch.tensor(vb.ci[key]), rtol=0, atol=tol)


@pytest.fixture(scope="module", params=FAMILIES)
def family_model(request):
    return request.param, tiny_model(request.param)


def test_capture_yields_the_pre_norm_stream_one_tensor_per_state(family_model):
    family, model = family_model
    ids = token_ids(2, 10)
    with effdepth.capture(model) as states, torch.no_grad():
        out = model(ids, output_hidden_states=True)
    assert len(states) == TINY_LAYERS + 1 and states.num_layers == TINY_LAYERS
    assert tuple(states.tensor.shape) == (TINY_LAYERS + 1, 2, 10, TINY_HIDDEN)
    for i in range(TINY_LAYERS):
        torch.testing.assert_close(states[i], out.hidden_states[i], rtol=1e-5, atol=1e-5)
    # S_L is before the final norm; hidden_states[-1] is after it.
    final_norm = resolve_architecture(model).final_norm
    with torch.no_grad():
        torch.testing.assert_close(final_norm(states[-1]), out.hidden_states[-1], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(states[-1], out.hidden_states[-1], atol=1e-3)
    assert "S_0..S_3" in repr(states)


def test_capture_refuses_to_be_read_before_a_forward_pass():
    with effdepth.capture(tiny_model("llama")) as states:
        with pytest.raises(EffdepthError, match="no forward pass"):
            states.tensor


@pytest.mark.parametrize("views", [("default",), ("default", "drop-pos0", "token-norm", "top1pc")])
def test_token_samples_accumulated_in_a_loop_equal_one_measure(family_model, views):
    family, model = family_model
    ids = token_ids()
    one = measured(model, ids, views=views, **TOKENS)
    loop = accumulated(model, ids, views, **TOKENS).result()
    assert_same_numbers(loop, one, tol=1e-9)
    assert loop.config["reduction"] == one.config["reduction"]
    assert loop.provenance["model"]["source"] == "capture" and loop.provenance["model"]["model_type"] == family


def test_accumulator_bootstrap_and_similarity_pass_through_like_measure():
    model = tiny_model("gpt2")
    ids = token_ids()
    one = measured(model, ids, bootstrap=50, seed=3, similarity="cosine", **TOKENS)
    acc = accumulated(model, ids, bootstrap=50, seed=3, similarity="cosine", **TOKENS)
    assert_same_numbers(acc.result(), one, tol=1e-9)
    # result() may ask for another similarity: every one comes from the same samples.
    assert_same_numbers(
        acc.result(similarity="cka", bootstrap=0), measured(model, ids, similarity="cka", seed=3, **TOKENS), tol=1e-9
    )


def test_accumulator_result_views_subset_reset_and_errors():
    model = tiny_model("llama")
    ids = token_ids()
    acc = accumulated(model, ids, ("default", "token-norm"), **TOKENS)
    assert list(acc.result(views="token-norm").views) == ["token-norm"]
    assert list(acc.result().views) == ["default", "token-norm"]
    assert acc.sequences == 6 and acc.tokens == 6 * 12
    with pytest.raises(EffdepthError, match=r"not accumulated.*Accumulator\(views=\.\.\.\)"):
        acc.result(views="drop-pos0")
    with pytest.raises(EffdepthError, match="similarity"):
        acc.result(similarity="cosine-ish")
    with pytest.raises(EffdepthError, match="states"):
        acc.update(torch.randn(2 + TINY_LAYERS, 1, 4, 8))  # another model's depth
    acc.reset()
    with pytest.raises(EffdepthError, match="no states yet"):
        acc.result()
    with pytest.raises(EffdepthError, match="similarity"):
        effdepth.Accumulator(similarity="nope", pooling="none")
    with pytest.raises(EffdepthError, match="keeps tokens, not means"):
        effdepth.Accumulator(views="length", pooling="none")


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_accumulator_takes_a_list_of_tensors_or_one_tensor(pooling):
    s = torch.randn(4, 5, 6, 8, dtype=torch.float64)
    a, b, c = (effdepth.Accumulator(pooling=pooling, bootstrap=0) for _ in range(3))
    a.update(s)
    b.update(list(s))
    for p in range(5):
        c.update(tuple(s[:, p]))  # (seq, d) states: one passage each
    assert_same_numbers(a.result(), b.result(), tol=0)
    assert_same_numbers(a.result(), c.result(), tol=1e-12)
    assert_same_numbers(a.result(), effdepth.from_states(s, pooling=pooling), tol=1e-12)


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_padding_from_the_mask_never_enters_a_sample(pooling):
    g = torch.Generator().manual_seed(1)
    s = torch.randn(4, 4, 9, 8, dtype=torch.float64, generator=g)
    mask = torch.ones(4, 9, dtype=torch.long)
    mask[1, 6:] = 0  # right padding
    mask[0, :2] = 0  # left padding
    garbage = s.clone()
    garbage[:, 1, 6:] = 1e6
    garbage[:, 0, :2] = -1e6
    padded = effdepth.Accumulator(pooling=pooling, bootstrap=0)
    padded.update(garbage, mask=mask)
    trimmed = effdepth.Accumulator(pooling=pooling, bootstrap=0)
    trimmed.update(s[:, 0, 2:])
    trimmed.update(s[:, 1, :6])
    trimmed.update(s[:, 2:])
    assert_same_numbers(padded.result(), trimmed.result(), tol=1e-12)
    with pytest.raises(EffdepthError, match="mask must be"):
        padded.update(s, mask=mask[:, :5])


def test_a_training_loop_measures_every_n_steps_without_changing_training():
    torch.manual_seed(0)
    ids = token_ids(4, 16)

    def train(with_capture):
        model = tiny_model("llama", seed=1).train()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        acc, results = effdepth.Accumulator(bootstrap=0), []
        context = effdepth.capture(model) if with_capture else None
        states = context.__enter__() if context else None
        try:
            for step in range(4):
                loss = model(ids, labels=ids).loss
                loss.backward()
                opt.step()
                opt.zero_grad()
                if states is not None:
                    assert not states.tensor.requires_grad
                    acc.update(states)
                    if step % 2 == 1:
                        results.append(acc.result())
                        acc.reset()
        finally:
            if context:
                context.__exit__(None, None, None)
        return model, results

    plain, _ = train(False)
    captured, results = train(True)
    for p, q in zip(plain.parameters(), captured.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert len(results) == 2 and all(r.default.sequences == 8 for r in results)
    assert results[0].default.deff != results[1].default.deff  # the model moved between measurements


def test_from_hidden_states_refuses_what_is_not_the_tuple():
    model = tiny_model("llama")
    with torch.no_grad():
        out = model(token_ids(4, 8), output_hidden_states=True)
    with pytest.raises(EffdepthError, match="tuple of L\\+1 tensors"):
        effdepth.from_hidden_states(torch.stack(out.hidden_states), model=model)


@pytest.mark.parametrize("family", FAMILIES)
def test_from_hidden_states_with_token_samples_takes_the_whole_tuple(family):
    model = tiny_model(family)
    ids = token_ids(4, 10)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding, with positions that skip it
    with torch.no_grad():
        out = model(
            ids, attention_mask=mask, position_ids=(mask.cumsum(-1) - 1).clamp_min(0), output_hidden_states=True
        )
    r = effdepth.from_hidden_states(out, attention_mask=mask, model=model, views=("default", "token-norm"), **TOKENS)
    assert r.config["num_layers"] == TINY_LAYERS and r.config["states"] == "hidden"
    assert r.provenance["model"]["source"] == "hidden_states" and r.provenance["model"]["model_type"] == family
    expected = effdepth.from_states(
        torch.stack(out.hidden_states), mask=mask, views=("default", "token-norm"), bootstrap=1000, **TOKENS
    )
    assert_same_numbers(r, expected, tol=1e-12)
    assert r.default.tokens == int(mask.sum())
    # The padded positions' activations do not matter.
    garbage = [h.clone() for h in out.hidden_states]
    for h in garbage:
        h[0, :3] = 1e4
    again = effdepth.from_hidden_states(
        tuple(garbage), attention_mask=mask, model=model, views=("default", "token-norm"), **TOKENS
    )
    assert_same_numbers(again, r, tol=1e-12)


def test_from_hidden_states_checks_the_tuple_against_the_model():
    model = tiny_model("gpt2")
    with torch.no_grad():
        out = model(token_ids(4, 8), output_hidden_states=True)
    for pooling in ("mean", "none"):
        with pytest.raises(EffdepthError, match="got 3 hidden states, but this gpt2 model has 3 blocks"):
            effdepth.from_hidden_states(out.hidden_states[:3], model=model, pooling=pooling)


def test_hugging_face_paths_never_import_transformer_lens_or_nnsight():
    code = (
        "import sys, torch, effdepth\n"
        "from effdepth.models.tiny import tiny_model\n"
        "m = tiny_model('gpt2')\n"
        "effdepth.measure(m, torch.randint(0, 256, (4, 6)), bootstrap=0, progress=False, pooling='none')\n"
        "with effdepth.capture(m) as s:\n"
        "    m(torch.randint(0, 256, (1, 4)))\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('transformer_lens', 'nnsight')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ---------------------------------------------------------------- passage mode (the default): measure's numbers


def passage_numbers(result) -> dict:
    """Every view's D_eff, references and intervals under every similarity, and the confounds table."""
    out = {
        sim: {name: (v.deff, v.ci["deff"] if v.ci else None, dict(v.references)) for name, v in views.items()}
        for sim, views in result.similarities.items()
    }
    return {"views": out, "confounds": {k: v for k, v in result.extras["confounds"].items() if k != "notes"}}


def assert_close_numbers(a: dict, b: dict, tol: float) -> None:
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            assert_close_numbers(a[key], b[key], tol)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_close_numbers(x, y, tol)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=tol, abs=tol)
    else:
        assert a == b


@pytest.mark.parametrize("family", FAMILIES)
def test_capture_and_accumulator_in_your_own_loop_give_measures_number(family):
    """One number per question: the notebook loop over measure's passages gives measure's numbers."""
    model = tiny_model(family)
    ids = token_ids(8, 12)
    views = ("default", "drop-pos0", "token-norm", "top1pc")
    one = effdepth.measure(model, ids, views=views, bootstrap=30, progress=False)
    acc = effdepth.Accumulator(views, bootstrap=30)
    with effdepth.capture(model) as states, torch.no_grad():
        for i in range(0, ids.shape[0], BATCH):
            model(ids[i : i + BATCH])
            acc.update(states)
    loop = acc.result()
    assert loop.passages and loop.default.sequences == 8 and acc.tokens == 8 * 12
    assert_close_numbers(passage_numbers(loop), passage_numbers(one), tol=1e-6)
    with pytest.raises(EffdepthError, match="which passages start with BOS"):
        effdepth.Accumulator("drop-bos")


def test_from_hidden_states_gives_measures_number_under_the_papers_convention():
    model = tiny_model("llama")
    ids = token_ids(8, 10)
    one = effdepth.measure(model, ids, states="hidden", bootstrap=30, progress=False)
    with torch.no_grad():
        out = model(ids, output_hidden_states=True)
    r = effdepth.from_hidden_states(out.hidden_states, bootstrap=30)
    assert r.passages and r.config["states"] == "hidden" and "paper's convention" in r.config["hidden_states"]["states"]
    assert_close_numbers(passage_numbers(r), passage_numbers(one), tol=1e-6)


def test_padding_never_enters_a_pooled_vector():
    g = torch.Generator().manual_seed(1)
    s = torch.randn(4, 8, 9, 8, dtype=torch.float64, generator=g)
    mask = torch.ones(8, 9, dtype=torch.long)
    mask[1, 6:] = 0
    garbage = s.clone()
    garbage[:, 1, 6:] = 1e6
    padded, clean = effdepth.Accumulator(bootstrap=0), effdepth.Accumulator(bootstrap=0)
    padded.update(garbage, mask=mask)
    clean.update(s, mask=mask)
    assert passage_numbers(padded.result()) == passage_numbers(clean.result())
    assert padded.result().extras["passage_lengths"]["min"] == 6
    mask[2] = 0
    with pytest.raises(EffdepthError, match="passage 2 of this batch has no real token"):
        padded.update(s, mask=mask)
