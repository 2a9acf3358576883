"""Calibrated references (docs/method.md#calibrated-references): surrogate streams and their accumulators."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from effdepth.errors import EffdepthError
from effdepth.numerics.metrics import full_metrics, similarity_matrix
from effdepth.numerics.references import reference_fl
from effdepth.numerics.similarity import deff
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.surrogate import (
    KINDS,
    CalibratedReferences,
    sequence_generator,
    surrogate_states,
    update_energies,
)


def real_states(L=6, B=4, T=64, d=256, seed=0):
    """Residual-like states: an initial state, growing and correlated updates."""
    g = torch.Generator().manual_seed(seed)
    s0 = 3.0 * torch.randn(1, B, T, d, generator=g, dtype=torch.float64)
    sizes = torch.linspace(0.5, 2.0, L, dtype=torch.float64)[:, None, None, None]
    common = torch.randn(1, B, T, d, generator=g, dtype=torch.float64)
    updates = sizes * (torch.randn(L, B, T, d, generator=g, dtype=torch.float64) + 0.7 * common)
    return torch.cat([s0, updates]).cumsum(0)


def a_mask(B, T, lengths):
    mask = torch.zeros(B, T, dtype=torch.bool)
    for b, n in enumerate(lengths):
        mask[b, :n] = True
    return mask


def deff_of(stats, similarity, include_embedding=False):
    # The surrogate streams keep only what D_eff needs (see test_surrogate_streams_keep_only_what_deff_needs).
    return float(deff(similarity_matrix(stats.total(), similarity, include_embedding)))


def gens(n, seed=0):
    return [sequence_generator(seed, i) for i in range(n)]


# -- the surrogate stream ----------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), include=st.booleans(), lengths=st.lists(st.integers(0, 7), min_size=1, max_size=3))
def test_surrogate_energies_are_exact_and_padding_stays_zero(seed, include, lengths):
    s = real_states(L=3, B=len(lengths), T=7, d=5, seed=seed)
    mask = a_mask(len(lengths), 7, lengths)
    measured = update_energies(s, mask)
    for kind in ("matched", "structural"):
        z = surrogate_states(s, mask, kind, gens(len(lengths), seed), include)
        assert bool((z[:, ~mask] == 0).all())
        got = update_energies(z, mask)
        want = measured if kind == "matched" else measured.mean(0, keepdim=True).expand_as(measured)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        initial = z[0].square().sum(dim=(1, 2))
        if kind == "matched":
            torch.testing.assert_close(z[0], s[0] * mask[:, :, None], rtol=0, atol=0)
        elif include:
            torch.testing.assert_close(initial, measured.mean(0), rtol=1e-12, atol=1e-12)
        else:
            assert bool((initial == 0).all())


def test_one_generator_or_one_per_sequence_and_padding_does_not_change_the_draws():
    s = real_states(L=2, B=2, T=6, d=3)
    short = a_mask(2, 6, [6, 4])
    a = surrogate_states(s, short, "matched", gens(2))
    # The same real tokens with more padding: same surrogate on the real tokens.
    wider = torch.cat([s, torch.zeros(3, 2, 3, 3, dtype=torch.float64)], dim=2)
    b = surrogate_states(wider, torch.cat([short, torch.zeros(2, 3, dtype=torch.bool)], dim=1), "matched", gens(2))
    torch.testing.assert_close(b[:, :, :6], a, rtol=0, atol=0)
    one = surrogate_states(s, None, "structural", torch.Generator().manual_seed(3))
    again = surrogate_states(s, None, "structural", torch.Generator().manual_seed(3))
    assert torch.equal(one, again)
    with pytest.raises(EffdepthError, match="surrogate kind"):
        surrogate_states(s, None, "random", gens(2))


# -- convergence to the closed forms (frobenius) -----------------------------------------


@pytest.mark.parametrize("include_embedding", [False, True])
def test_frobenius_calibrated_references_converge_to_fn_and_r_matched(include_embedding):
    s = real_states()
    real = ViewAccumulator(["default"], include_embedding=include_embedding, similarities=())
    real.update(s)
    measured = full_metrics(real.unit_statistics("default").total(), "frobenius", include_embedding)
    cal = CalibratedReferences(["default"], include_embedding=include_embedding, similarities=(), seed=4)
    cal.update(s)
    n = s.shape[0] if include_embedding else s.shape[0] - 1
    structural = deff_of(cal.unit_statistics("default", "frobenius", "structural"), "frobenius", include_embedding)
    matched = deff_of(cal.unit_statistics("default", "frobenius", "matched"), "frobenius", include_embedding)
    assert structural == pytest.approx(reference_fl(n), rel=0.01)
    assert matched == pytest.approx(float(measured["reference_matched"]), rel=0.01)
    if not include_embedding:  # (with it, the large S_0 dominates the comparison)
        # the real stream's correlated updates put it clearly below its calibrated reference
        assert measured["deff"] < 0.98 * matched


def test_cka_structural_surrogate_approaches_fn_when_tokens_dwarf_dimensions():
    s = real_states(L=5, B=2, T=512, d=4)
    cal = CalibratedReferences(["default", "drop-pos0"], similarities=("cka",), seed=2)
    cal.update(s)
    for view in ("default", "drop-pos0"):
        got = deff_of(cal.unit_statistics(view, "cka", "structural"), "cka")
        assert got == pytest.approx(reference_fl(5), rel=0.03)


# -- the accumulator pair ----------------------------------------------------------------


def totals(cal, view="default", similarity="cka"):
    return {kind: cal.unit_statistics(view, similarity, kind).total() for kind in ("structural", "matched")}


def assert_same(a, b, rtol=1e-12):
    for kind in a:
        for key in a[kind]:
            np.testing.assert_allclose(b[kind][key], a[kind][key], rtol=rtol, atol=1e-12, err_msg=f"{kind} {key}")


def test_batching_does_not_change_the_surrogates():
    s = real_states(L=3, B=4, T=9, d=6)
    mask = a_mask(4, 9, [9, 5, 9, 7])
    one = CalibratedReferences(["default", "drop-pos0"], similarities=("cka", "cka-full"), seed=7)
    one.update(s, mask)
    two = CalibratedReferences(["default", "drop-pos0"], similarities=("cka", "cka-full"), seed=7)
    two.update(s[:, :1], mask[:1])
    two.update(s[:, 1:], mask[1:])
    assert_same(totals(one), totals(two))
    assert_same(totals(one, "drop-pos0", "cka-full"), totals(two, "drop-pos0", "cka-full"), rtol=1e-10)
    other = CalibratedReferences(["default"], similarities=("cka",), seed=8)
    other.update(s, mask)
    assert not np.allclose(totals(other)["matched"]["hsic"], totals(one)["matched"]["hsic"])


def test_max_seqs_caps_the_sequences_used():
    s = real_states(L=2, B=3, T=6, d=4)
    cal = CalibratedReferences(["default"], seed=0, max_seqs=4)
    cal.update(s)
    cal.update(s)
    cal.update(s)
    assert cal.sequences == 4 and cal.unit_statistics("default", kind="matched").units == 4
    none = CalibratedReferences(["default"], max_seqs=0)
    none.update(s)
    assert none.sequences == 0


@pytest.mark.parametrize("garbage", [float("nan"), float("inf")])
def test_non_finite_padding_never_reaches_the_surrogates(garbage):
    # Fully masked attention rows can leave NaN or inf at padded positions; the real stream never
    # reads them, and neither may the surrogates' energies (NaN * 0 is NaN, so no multiplying by the mask).
    s = real_states(L=3, B=2, T=6, d=5)
    mask = a_mask(2, 6, [6, 4])
    clean = update_energies(s, mask)
    dirty = s.clone()
    dirty[:, 1, 4:] = garbage
    torch.testing.assert_close(update_energies(dirty, mask), clean, rtol=0, atol=0)
    for similarity in ("cka", "frobenius"):
        refs = {}
        for states in (s, dirty):
            cal = CalibratedReferences(["default"], similarities=(similarity,), seed=0)
            cal.update(states, mask)
            refs[len(refs)] = deff_of(cal.unit_statistics("default", similarity, kind="matched"), similarity)
        assert np.isfinite(refs[1]) and refs[1] == refs[0]


def test_all_padding_rows_are_not_reported_as_surrogate_sequences():
    # The cap and the noise's index count corpus rows (the same in every process of a distributed
    # run); what was measured counts sequences with a real token, as the real stream does.
    s = real_states(L=2, B=3, T=6, d=4)
    mask = a_mask(3, 6, [6, 0, 5])
    real = ViewAccumulator(["default"], similarities=("cka",))
    real.update(s, mask)
    cal = CalibratedReferences(["default"], similarities=("cka",), seed=0)
    cal.update(s, mask)
    assert (cal.sequences, cal.measured_sequences, real.sequences) == (3, 2, 2)
    assert cal.unit_statistics("default", "cka", kind="matched").units == 1  # the pair of the two


def test_state_round_trip_and_extend_across_ranks():
    s = real_states(L=3, B=4, T=8, d=5)
    views = ["default", "token-norm+drop-pos0"]
    whole = CalibratedReferences(views, seed=3)
    whole.update(s)
    first = CalibratedReferences(views, seed=3)
    first.update(s[:, :2])
    resumed = CalibratedReferences(views, seed=3)
    resumed.load_state_dict(*first.state_dict())
    resumed.update(s[:, 2:])
    assert_same(totals(whole), totals(resumed))
    rank1 = CalibratedReferences(views, seed=3, first_sequence=2)
    rank1.update(s[:, 2:])
    first.merge(rank1)
    assert_same(totals(whole, "token-norm+drop-pos0"), totals(first, "token-norm+drop-pos0"))
    with pytest.raises(EffdepthError, match="seed"):
        CalibratedReferences(views, seed=4).load_state_dict(*whole.state_dict())


def test_the_surrogates_fit_in_a_phase_of_their_own_whatever_the_batches():
    s = real_states(L=2, B=6, T=6, d=4)
    one = CalibratedReferences(["top1pc"], seed=1)
    one.fit_batch(s)
    one.finalize_fit()
    split = CalibratedReferences(["top1pc"], seed=1)
    for b in range(0, 6, 4):
        split.fit_batch(s[:, b : b + 4])
    split.finalize_fit()
    assert not CalibratedReferences(["top1pc"], seed=1).fitted and one.fitted
    for kind in KINDS:
        a, b = one.accumulators[kind], split.accumulators[kind]
        assert a.fit_info["calibration"] == b.fit_info["calibration"] == {"sequences": 6, "tokens": 36}
        assert a.fit_info["how"].startswith("on the surrogates: calibration on all 6 sequences")
        (pa,), (pb,) = [[f["pcs"] for f in acc.fits.values()] for acc in (a, b)]
        # the removed subspace (an eigenvector's sign is arbitrary)
        torch.testing.assert_close(pa @ pa.transpose(-1, -2), pb @ pb.transpose(-1, -2), rtol=1e-5, atol=1e-6)
    one.update(s)
    split.update(s)
    assert_same(totals(one, "top1pc"), totals(split, "top1pc"), rtol=1e-5)
    capped = CalibratedReferences(["top1pc"], seed=1, max_seqs=2)
    capped.fit_batch(s)
    capped.finalize_fit()
    assert capped.accumulators["matched"].fit_info["calibration"] == {"sequences": 2, "tokens": 12}


def test_every_rank_fits_the_surrogates_of_the_same_global_sequences():
    s = real_states(L=2, B=6, T=6, d=4)
    rank0, rank1 = CalibratedReferences(["center"], seed=2), CalibratedReferences(["center"], seed=2, first_sequence=4)
    for cal in (rank0, rank1):
        cal.fit_batch(s)  # the calibration set of the whole corpus, from global sequence 0
        cal.finalize_fit()
    for kind in KINDS:
        (m0,), (m1,) = [[f["mean"] for f in cal.accumulators[kind].fits.values()] for cal in (rank0, rank1)]
        torch.testing.assert_close(m0, m1, rtol=0, atol=0)
