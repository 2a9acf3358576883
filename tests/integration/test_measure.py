"""measure() on tiny models: against a naive computation, invariances, bad input."""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.models.tiny import tiny_model


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", seed=0)


def ids(num=6, seq=12, seed=0):
    return torch.randint(0, 256, (num, seq), generator=torch.Generator().manual_seed(seed))


def naive_token_deff(model, input_ids, k=None, seed=0):
    """Independent: the blocks' outputs from hooks plus output_hidden_states[0]; every token (or the first k drawn
    positions of the reduction) of every passage as a sample, stored float32 as the store keeps them; linear CKA
    (biased HSIC) written out with numpy."""
    from effdepth.numerics.sampling import sample_positions

    outs = []
    hooks = [
        b.register_forward_hook(lambda m, a, o: outs.append(o if torch.is_tensor(o) else o[0]))
        for b in model.model.layers
    ]
    try:
        with torch.no_grad():
            first = model(input_ids=input_ids, output_hidden_states=True).hidden_states[0]
    finally:
        for h in hooks:
            h.remove()
    states = np.stack([s.double().numpy() for s in [first, *outs]])  # (L+1, B, T, d)
    rows = []
    for b in range(states.shape[1]):
        kept = np.ones(states.shape[2], dtype=bool)
        from effdepth.numerics.sampling import selection_key
        from effdepth.numerics.views import parse_view

        positions = sample_positions(kept, k, seed, b, selection_key(parse_view("default")))
        rows.append(states[:, b, positions])
    x = np.concatenate(rows, axis=1).astype(np.float32).astype(np.float64)[1:]
    centred = x - x.mean(axis=1, keepdims=True)
    h = np.array([[np.linalg.norm(a.T @ c) ** 2 for c in centred] for a in centred])
    sim = h / np.sqrt(np.outer(np.diag(h), np.diag(h)))
    return len(x) ** 2 / sim.sum()


@pytest.mark.parametrize("k", [None, 5])
def test_token_samples_equal_a_naive_computation(llama, k):
    x = ids()
    r = effdepth.measure(llama, x, bootstrap=0, progress=False, pooling="none", tokens_per_passage=k)
    assert r.default.deff == pytest.approx(naive_token_deff(llama, x, k), rel=1e-9)
    assert r.default.tokens == x.numel() and r.default.sequences == x.shape[0]
    assert r.config["reduction"]["per_variant"]["default"] == x.shape[0] * (k or x.shape[1])


@pytest.mark.parametrize("pooling", ["mean", "none"])
def test_batch_size_invariance(llama, pooling):
    x = ids(num=7)
    results = [
        effdepth.measure(llama, x, batch_size=b, bootstrap=200, progress=False, pooling=pooling) for b in (1, 3, 7)
    ]
    for r in results[1:]:
        assert r.default.deff == pytest.approx(results[0].default.deff, rel=1e-6)
        for k in ("deff", "ratio"):
            np.testing.assert_allclose(r.default.ci[k], results[0].default.ci[k], rtol=1e-6)


def test_determinism(llama):
    a = effdepth.measure(llama, ids(), bootstrap=100, seed=3, progress=False, pooling="none").to_dict()
    b = effdepth.measure(llama, ids(), bootstrap=100, seed=3, progress=False, pooling="none").to_dict()
    assert a["views"] == b["views"]


def test_views_in_one_pass_match_separate_runs(llama):
    x = ids()
    together = effdepth.measure(llama, x, views="paper", bootstrap=0, progress=False, pooling="none").views
    for name in ("drop-pos0", "token-norm"):
        alone = effdepth.measure(llama, x, views=[name], bootstrap=0, progress=False, pooling="none").views[name]
        assert together[name].deff == pytest.approx(alone.deff, rel=1e-12)


def test_text_corpus_with_tokenizer(llama):
    from effdepth.data import byte_tokenizer

    texts = ["To be, or not to be, that is the question. " * 20]
    r = effdepth.measure(
        llama, texts, tokenizer=byte_tokenizer(), seq_len=16, num_seqs=4, bootstrap=0, progress=False, pooling="none"
    )
    assert r.config["seq_len"] == 16 and r.default.sequences == 4
    assert r.provenance["corpus"]["sha256"]


def test_result_round_trip(llama, tmp_path):
    r = effdepth.measure(llama, ids(), views="paper", bootstrap=50, progress=False, pooling="none")
    p = r.save(tmp_path)
    back = effdepth.load(p)
    assert back.to_dict() == r.to_dict()
    prov = back.provenance
    for key in ("model", "corpus", "code", "libraries", "machine", "created", "elapsed_s"):
        assert key in prov
    assert prov["libraries"]["torch"] and prov["code"]["effdepth"] == effdepth.__version__
    assert sorted(f.name for f in tmp_path.iterdir()) == ["pooled", "result.json"]  # no temporary files left behind


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seq_len": 1}, "--seq-len must be at least 2"),
        ({"num_seqs": 0}, "--num-seqs must be at least 1"),
        ({"batch_size": 0}, "--batch-size"),
        ({"bootstrap": -1}, "--bootstrap"),
        ({"similarity": "cos"}, "--similarity must be one of"),
        ({"similarity": "frobenius"}, "gone with the old token-level statistics"),
        ({"views": "center"}, "gone with the old token-level statistics"),
        ({"views": "length"}, "keeps tokens, not means"),
        ({"tokens_per_passage": 0}, "--tokens-per-passage must be a whole number"),
        ({"views": "nonsense"}, "unknown view component"),
        ({"dtype": "float8"}, "unknown dtype"),
    ],
)
def test_bad_arguments(llama, kwargs, message):
    with pytest.raises(EffdepthError, match=message) as e:
        effdepth.measure(llama, ids(), progress=False, **kwargs, pooling="none")
    assert "\n" not in str(e.value)


def test_ids_out_of_vocabulary(llama):
    with pytest.raises(EffdepthError):
        effdepth.measure(llama, torch.tensor([[1, 2, 100_000]] * 4), progress=False, pooling="none")


def test_non_finite_activations_name_the_layer(llama):
    block = llama.model.layers[1]
    h = block.register_forward_hook(lambda m, a, o: o * float("inf"))
    try:
        with pytest.raises(
            EffdepthError, match=r"non-finite states at layer 2 \(S_2, model dtype float32\) in passages 0, 1, 2, 3"
        ):
            effdepth.measure(llama, ids(), bootstrap=0, progress=False, pooling="none")
    finally:
        h.remove()


def test_missing_paths_and_unknown_ids(tmp_path):
    with pytest.raises(EffdepthError, match="does not exist"):
        effdepth.measure(str(tmp_path / "nope.gguf"), progress=False, pooling="none")
    with pytest.raises(EffdepthError, match="not a model folder"):
        effdepth.measure(str(tmp_path), progress=False, pooling="none")
    with pytest.raises(EffdepthError, match="neither an existing path nor"):
        effdepth.measure("./no/such/model", progress=False, pooling="none")


def test_unknown_hub_id_offline(monkeypatch):
    import huggingface_hub.constants

    # The flag is read at import time; set it where the library looks, so the
    # test does not wait out network retries.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(EffdepthError, match="could not load model 'nobody/no-such-model'"):
        effdepth.measure("nobody/no-such-model", progress=False, pooling="none")


def test_local_folder_model(tmp_path, llama):
    from effdepth.data import byte_tokenizer

    llama.save_pretrained(tmp_path)
    byte_tokenizer().save_pretrained(tmp_path)
    r = effdepth.measure(
        str(tmp_path), ["Some text to read. " * 50], seq_len=16, num_seqs=4, bootstrap=0, progress=False, pooling="none"
    )
    direct = effdepth.measure(
        llama,
        ["Some text to read. " * 50],
        tokenizer=byte_tokenizer(),
        seq_len=16,
        num_seqs=4,
        bootstrap=0,
        progress=False,
        pooling="none",
    )
    assert r.default.deff == pytest.approx(direct.default.deff, rel=1e-6)
    assert r.provenance["model"]["source"] == "local"
