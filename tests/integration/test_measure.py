"""measure() on tiny models: against a naive computation, invariances, bad input."""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.errors import EffdepthError
from effdepth.tiny import tiny_model


@pytest.fixture(scope="module")
def llama():
    return tiny_model("llama", seed=0)


def ids(num=6, seq=12, seed=0):
    return torch.randint(0, 256, (num, seq), generator=torch.Generator().manual_seed(seed))


def naive_deff_from_hidden_states(model, input_ids, similarity="frobenius"):
    """Independent: output_hidden_states for S_0..S_{L-1}, the final norm undone by
    a hook-free second route (run the blocks by hand is model-specific), so use
    hidden_states[:-1] plus the last block's output taken from a plain forward hook.
    cka: cross-sequence linear CKA over the pairs (0, 1), (2, 3), ..., in feature space."""
    last = {}
    block = model.model.layers[-1]
    h = block.register_forward_hook(lambda m, a, o: last.__setitem__("s", o if torch.is_tensor(o) else o[0]))
    try:
        with torch.no_grad():
            out = model(input_ids=input_ids, output_hidden_states=True)
    finally:
        h.remove()
    states = list(out.hidden_states[:-1]) + [last["s"]]
    if similarity == "cka":
        X = np.stack([s.double().numpy() for s in states])[1:]  # (N, B, T, d)
        Y = X - X.mean(axis=2, keepdims=True)
        n = X.shape[2]
        H = np.zeros((X.shape[0], X.shape[0]))
        p, q = Y[:, 0::2], Y[:, 1::2]  # every sequence in one pair (an even count)
        for i in range(X.shape[0]):
            for j in range(X.shape[0]):
                # <Y_p^i Y_q^iT, Y_p^j Y_q^jT> = <Y_p^jT Y_p^i, Y_q^jT Y_q^i>, the d-space route
                H[i, j] = (
                    np.einsum("bde,bde->", np.einsum("btd,bte->bde", p[j], p[i]), np.einsum("btd,bte->bde", q[j], q[i]))
                    / n**2
                )
        sim = H / np.sqrt(np.outer(np.diag(H), np.diag(H)))
        return X.shape[0] ** 2 / sim.sum()
    S = np.stack([s.double().numpy().reshape(-1) for s in states])[1:]
    G = S @ S.T
    sim = G**2 / np.outer(np.diag(G), np.diag(G))
    return S.shape[0] ** 2 / sim.sum()


@pytest.mark.parametrize("similarity", ["frobenius", "cka"])
def test_measure_equals_naive_computation(llama, similarity):
    x = ids()
    r = effdepth.measure(llama, x, bootstrap=0, similarity=similarity, progress=False, pooling="none")
    assert r.default.deff == pytest.approx(naive_deff_from_hidden_states(llama, x, similarity), rel=1e-6)
    assert r.default.tokens == x.numel() and r.default.sequences == x.shape[0]


def test_batch_size_invariance(llama):
    x = ids(num=7)
    results = [
        effdepth.measure(llama, x, batch_size=b, bootstrap=200, progress=False, pooling="none") for b in (1, 3, 7)
    ]
    for r in results[1:]:
        assert r.default.deff == pytest.approx(results[0].default.deff, rel=1e-6)
        for k in ("deff", "ratio"):
            np.testing.assert_allclose(r.default.ci[k], results[0].default.ci[k], rtol=1e-6)


def test_accumulators_accumulate_every_batch(llama):
    # The classic bug: running sums that keep only the last batch.
    x = ids(num=6)
    whole = effdepth.measure(llama, x, batch_size=2, bootstrap=0, progress=False, pooling="none").default
    parts = [
        effdepth.measure(llama, x[i : i + 2], bootstrap=0, progress=False, pooling="none").default for i in (0, 2, 4)
    ]
    g = sum(np.array(p.statistics["gram_states"]) for p in parts)
    np.testing.assert_allclose(whole.statistics["gram_states"], g, rtol=1e-9)
    assert whole.tokens == sum(p.tokens for p in parts)


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


def test_the_fit_phase_and_every_number_do_not_depend_on_the_batch_size(llama):
    # 24 x 128 tokens: the calibration set is the first 16 sequences (2,048 tokens), whatever the batch.
    x = ids(num=24, seq=128)
    runs = [
        effdepth.measure(
            llama, x, views=["default", "top1pc"], batch_size=b, bootstrap=50, progress=False, pooling="none"
        )
        for b in (3, 16)
    ]
    for r in runs:
        assert r.config["pc_estimate"]["calibration"] == {"sequences": 16, "tokens": 2048}
        assert r.config["pc_estimate"]["how"] == "calibration on the first 16 sequences (2048 tokens)"
    a, b = (r.views["top1pc"] for r in runs)
    assert a.deff == pytest.approx(b.deff, rel=1e-5) and a.ci["deff"] == pytest.approx(b.ci["deff"], rel=1e-5)
    assert a.references["matched_cal"] == pytest.approx(b.references["matched_cal"], rel=1e-5)


def test_the_calibration_set_passes_through_the_model_once(llama, monkeypatch):
    # The fit phase's batches are measured from its copies: one forward pass per batch in all
    # (the exact estimate passes every sequence twice, by definition).
    from effdepth.capture import batches

    real, passes = batches.decoder_forward, []
    monkeypatch.setattr(batches, "decoder_forward", lambda *a, **k: passes.append(1) or real(*a, **k))
    x = ids(num=24, seq=128)
    r = effdepth.measure(
        llama, x, views=["default", "top1pc"], batch_size=4, bootstrap=0, progress=False, pooling="none"
    )
    assert len(passes) == 24 // 4
    assert r.config["pc_estimate"]["calibration"] == {"sequences": 16, "tokens": 2048}
    passes.clear()
    exact = effdepth.measure(
        llama, x, views=["top1pc"], batch_size=4, pc_estimate="exact", bootstrap=0, progress=False, pooling="none"
    )
    assert len(passes) == 2 * 24 // 4 and exact.views["top1pc"].deff == pytest.approx(r.views["top1pc"].deff, rel=0.05)


def test_calibration_pcs_match_exact_on_a_small_model(llama):
    # Calibration vs exact (every sequence) top-1 PC estimates. 16 x 32 tokens is less than a
    # calibration set (8 sequences and 2,048 tokens), so calibration fits on all of them too.
    x = ids(num=16, seq=32)
    exact = effdepth.measure(
        llama, x, views=["top1pc"], batch_size=8, pc_estimate="exact", bootstrap=0, progress=False, pooling="none"
    )
    calib = effdepth.measure(
        llama, x, views=["top1pc"], batch_size=8, pc_estimate="calibration", bootstrap=0, progress=False, pooling="none"
    )
    assert exact.config["pc_estimate"]["estimate"] == "exact"
    assert exact.config["pc_estimate"]["calibration"] == {"sequences": 16, "tokens": 512}
    assert calib.config["pc_estimate"]["calibration"] == {"sequences": 16, "tokens": 512}
    assert "all 16 sequences" in calib.config["pc_estimate"]["how"]
    assert len(calib.config["pc_estimate"]["eigengap"]["top1pc"]) == 4  # S_0..S_3
    assert calib.views["top1pc"].deff == pytest.approx(exact.views["top1pc"].deff, rel=0.02)


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
    assert list(tmp_path.iterdir()) == [p]  # no temporary files left behind


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seq_len": 1}, "--seq-len must be at least 2"),
        ({"num_seqs": 0}, "--num-seqs must be at least 1"),
        ({"batch_size": 0}, "--batch-size"),
        ({"bootstrap": -1}, "--bootstrap"),
        ({"similarity": "cosine"}, "--similarity must be one of"),
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
        effdepth.measure(llama, torch.tensor([[1, 2, 100_000]]), progress=False, pooling="none")


def test_non_finite_activations_name_the_layer(llama):
    block = llama.model.layers[1]
    h = block.register_forward_hook(lambda m, a, o: o * float("inf"))
    try:
        with pytest.raises(EffdepthError, match=r"block 2 \(S_2\).*--dtype"):
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
        str(tmp_path), ["Some text to read. " * 50], seq_len=16, num_seqs=3, bootstrap=0, progress=False, pooling="none"
    )
    direct = effdepth.measure(
        llama,
        ["Some text to read. " * 50],
        tokenizer=byte_tokenizer(),
        seq_len=16,
        num_seqs=3,
        bootstrap=0,
        progress=False,
        pooling="none",
    )
    assert r.default.deff == pytest.approx(direct.default.deff, rel=1e-6)
    assert r.provenance["model"]["source"] == "local"
