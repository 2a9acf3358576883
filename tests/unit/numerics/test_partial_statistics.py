"""Statistics computed only where needed: the keys a surrogate stream keeps, the fit fed by
parts and layers, the update energies one layer at a time; each equals the full computation.
Transformed streams under kernel similarities alone keep token counts only; no kernel number moves."""

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from effdepth.errors import EffdepthError
from effdepth.numerics.accumulate import STAT_KEYS, chunk_statistics, deff_statistics
from effdepth.numerics.fits import FitAccumulator
from effdepth.numerics.metrics import similarity_matrix
from effdepth.numerics.similarity import deff
from effdepth.numerics.streams import ViewAccumulator
from effdepth.numerics.surrogate import _Source, update_energies
from effdepth.numerics.views import parse_view


def states(L=4, B=3, T=11, d=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.randn(L + 1, B, T, d, generator=g, dtype=torch.float64).cumsum(0) + 2.0
    s[:, :, 0] *= 5.0
    return s


@pytest.mark.parametrize(
    "keys",
    [
        ("n",),
        ("n", "gram_states"),
        ("n", "cos2_sum"),
        ("n", "update_state_dot"),
        ("n", "ref_matched", "angle_sum"),
        STAT_KEYS,
    ],
)
def test_a_subset_of_keys_equals_those_keys_of_the_full_statistics(keys):
    z = states()[:, 0]
    full = chunk_statistics(z, False)
    part = chunk_statistics(z, False, keys)
    assert set(part) == set(keys) | {"n"}
    for key in part:
        np.testing.assert_allclose(part[key], full[key], rtol=1e-12, atol=1e-9)


def test_update_state_dot_equals_the_explicit_per_token_products():
    z = states()[:, 0]
    updates = z[1:] - z[:-1]
    want = (updates * z[:-1]).sum(dim=(1, 2)).numpy()
    np.testing.assert_allclose(chunk_statistics(z, False)["update_state_dot"], want, rtol=1e-12)
    np.testing.assert_allclose(
        chunk_statistics(z, False, ("n", "update_state_dot"))["update_state_dot"], want, rtol=1e-12
    )


def test_deff_statistics_name_what_each_similarity_needs():
    assert deff_statistics(["cka"]) == ("n",)
    assert deff_statistics(["cka", "token"]) == ("n", "cos2_sum")
    assert deff_statistics(["frobenius", "token", "cka"]) == ("n", "gram_states", "cos2_sum")


@pytest.mark.parametrize("similarity", ["frobenius", "token", "cka"])
def test_an_accumulator_keeping_only_deff_statistics_gives_the_same_deff(similarity):
    s = states()
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[2, 5:] = False
    views = ["default", "drop-pos0", "token-norm"]
    kernel = ("cka",) if similarity == "cka" else ()
    lean = ViewAccumulator(views, similarities=kernel, statistics=deff_statistics([similarity]))
    # With a cosine similarity beside it, every stream keeps every additive statistic.
    full = ViewAccumulator(views, similarities=kernel + ("frobenius",))
    for acc in (lean, full):
        acc.update(s, mask)
    for view in views:
        got, want = lean.unit_statistics(view, similarity), full.unit_statistics(view, similarity)
        assert set(got.arrays) < set(want.arrays)
        assert deff(similarity_matrix(got.total(), similarity, False)) == pytest.approx(
            deff(similarity_matrix(want.total(), similarity, False)), rel=1e-12
        )
        assert lean.left_out(view, similarity) == full.left_out(view, similarity)


def test_a_lean_accumulator_resumes_from_the_state_of_a_full_one():
    s = states()
    full = ViewAccumulator(["default"], similarities=("cka",))
    full.update(s)
    lean = ViewAccumulator(["default"], similarities=("cka",), statistics=("n",))
    lean.load_state_dict(*full.state_dict())
    lean.update(s)
    assert lean.unit_statistics("default", "cka").units == 3  # pairs of the six sequences
    assert set(lean.unit_statistics("default").arrays) == {"n"}


def test_unknown_statistics_are_refused():
    with pytest.raises(ValueError, match="unknown statistics"):
        ViewAccumulator(["default"], statistics=("n", "gram"))


@pytest.mark.parametrize("view", ["top1pc", "token-norm+top2pc"])
def test_the_fit_fed_parts_layer_by_layer_equals_one_concatenated_update(view):
    spec = parse_view(view)
    s = states(B=3, T=9)
    parts = [s[:, b] for b in range(3)]
    by_parts, joined, streamed = FitAccumulator(), FitAccumulator(), FitAccumulator()
    by_parts.update(parts, spec.before_fit)
    joined.update(spec.before_fit(torch.cat(parts, dim=1)))
    for p in parts:  # Chan's merge, one sequence at a time
        streamed.update(spec.before_fit(p))
    for other in (joined, streamed):
        np.testing.assert_allclose(by_parts.mean.numpy(), other.mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(by_parts.scatter.numpy(), other.scatter.numpy(), rtol=1e-10, atol=1e-9)
    assert by_parts.count == joined.count == 27


def test_update_energies_layer_by_layer_equal_the_naive_sums():
    s = states().float()
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[1, 4:] = False
    x = s.double()
    updates = (x[1:] - x[:-1]) * mask[None, :, :, None]
    np.testing.assert_allclose(update_energies(s, mask).numpy(), updates.square().sum(dim=(2, 3)).numpy(), rtol=1e-12)


class _LargestFloat64(TorchDispatchMode):
    """Records the most elements of any float64 tensor an operation returns."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                self.largest = max(self.largest, t.numel())
        return out


def test_the_surrogate_source_holds_no_float64_copy_of_the_batch():
    # A float64 copy of a whole batch doubles a float32 batch's memory (on a GPU too): the
    # energies are taken one layer at a time, in a layer's worth of float64 arrays.
    s = states(L=6, B=3, T=11, d=7).float()
    mask = torch.ones(3, 11, dtype=torch.bool)
    mask[2, 5:] = False
    with _LargestFloat64() as spy:
        source = _Source.of(s, mask)
    assert 0 < spy.largest <= s[0].numel()
    np.testing.assert_array_equal(source.measured.numpy(), update_energies(s.double(), mask).numpy())


@pytest.mark.parametrize("chunk_tokens", [1, 5, 64, None])
def test_the_chunk_size_does_not_change_the_statistics(chunk_tokens):
    # Chunks add up exactly; only the device picks their size (a GPU takes far larger ones).
    states = torch.randn(4, 3, 23, 8, generator=torch.Generator().manual_seed(5)).cumsum(0)
    views = "default,token-norm,top1pc,drop-pos0"
    whole = ViewAccumulator(views, chunk_tokens=1000, similarities=("frobenius", "token"))
    chunked = ViewAccumulator(views, chunk_tokens=chunk_tokens, similarities=("frobenius", "token"))
    whole.update(states)
    chunked.update(states)
    for view in views.split(","):
        a, b = whole.unit_statistics(view).arrays, chunked.unit_statistics(view).arrays
        for key in STAT_KEYS:
            np.testing.assert_allclose(b[key], a[key], rtol=1e-12, atol=1e-12, err_msg=f"{view} {key}")


def test_a_device_chunk_holds_its_byte_budget_of_float64_states():
    from effdepth.numerics.accumulate import DEFAULT_CHUNK_TOKENS, DEVICE_CHUNK_BYTES, chunk_tokens_for

    assert chunk_tokens_for(torch.empty(25, 8, 2048)) == DEFAULT_CHUNK_TOKENS
    on_device = torch.empty(25, 8, 2048, device="meta")  # any non-CPU device
    assert chunk_tokens_for(on_device) == DEVICE_CHUNK_BYTES // (8 * 25 * 2048) > 600
    assert chunk_tokens_for(torch.empty(33, 1, 1 << 20, device="meta")) == DEFAULT_CHUNK_TOKENS  # never fewer


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_a_chunk_size_that_is_not_a_whole_number_of_tokens_is_refused(bad):
    with pytest.raises(ValueError, match="chunk_tokens must be a whole number >= 1"):
        ViewAccumulator("default", chunk_tokens=bad)


def _direct_state_statistics(z):
    """The states' per-token Gram and cosine sums formed from the states themselves."""
    per_token = z.transpose(0, 1)
    gram = per_token @ per_token.transpose(1, 2)
    norms = gram.diagonal(dim1=1, dim2=2).sqrt()
    cos = (gram / (norms[:, :, None] * norms[:, None, :])).clamp(-1, 1)
    cos.diagonal(dim1=1, dim2=2).fill_(1.0)  # a state compared with itself
    return gram.sum(0).numpy(), cos.sum(0).numpy(), torch.arccos(cos).sum(0).numpy() / np.pi


def test_state_statistics_summed_from_increments_equal_the_direct_ones():
    z = states(L=12, T=9, d=16)[:, 0]
    got = chunk_statistics(z, False)
    gram, cos, angle = _direct_state_statistics(z)
    np.testing.assert_allclose(got["gram_states"], gram, rtol=1e-13)
    np.testing.assert_allclose(got["cos_sum"], cos, rtol=1e-13)
    np.testing.assert_allclose(got["angle_sum"], angle, rtol=1e-10, atol=1e-12)


def test_a_state_its_update_nearly_erases_is_formed_directly():
    # S_2 = S_1 + U_2 with U_2 = -S_1 up to 1e-7: summing increments would cancel about 14
    # digits of <S_2, S_j>; the cancellation check forms those Grams from the states.
    g = torch.Generator().manual_seed(3)
    z = torch.randn(4, 6, 8, generator=g, dtype=torch.float64)
    z[2] = 1e-7 * torch.randn(6, 8, generator=g, dtype=torch.float64)
    z[3] = z[2] + torch.randn(6, 8, generator=g, dtype=torch.float64)
    got = chunk_statistics(z, False)
    gram, cos, _ = _direct_state_statistics(z)
    np.testing.assert_allclose(got["gram_states"], gram, rtol=1e-12, atol=1e-24)
    np.testing.assert_allclose(got["cos_sum"], cos, rtol=1e-12)
    # The check is what saves it: the summed-up Gram is far off for that state.
    increments = torch.cat([z[:1], z[1:] - z[:-1]]).transpose(0, 1)
    summed = (increments @ increments.transpose(1, 2)).cumsum(1).cumsum(2).sum(0).numpy()
    assert abs(summed[2, 2] - gram[2, 2]) > 1e-6 * gram[2, 2]


@pytest.mark.parametrize("chunk_tokens,group_tokens", [(1, 1), (1, 7), (4, 4), (4, 9), (5, 1000), (23, 23)])
def test_where_chunks_and_groups_end_changes_no_statistic(chunk_tokens, group_tokens):
    # Products are formed per chunk and reduced per group; position 0 and the rest stay apart.
    from effdepth.numerics.accumulate import SequenceSums, sequence_statistics

    z = torch.randn(5, 23, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64).cumsum(0)
    want_first, want_rest = sequence_statistics(z, chunk_tokens=1000)
    sums = SequenceSums(False, group_tokens=group_tokens)
    for start in range(0, 23, chunk_tokens):
        sums.add(z[:, start : start + chunk_tokens])
    first, rest = sums.finish()
    for got, want in ((first, want_first), (rest, want_rest)):
        assert set(got) == set(STAT_KEYS)
        for key in STAT_KEYS:
            np.testing.assert_allclose(np.asarray(got[key]), want[key], rtol=1e-12, atol=1e-12, err_msg=key)
    np.testing.assert_allclose(
        want_first["gram_states"], (z[:, :1].flatten(1) @ z[:, :1].flatten(1).T).numpy(), rtol=1e-13
    )
    assert float(first["n"]) == 1.0 and float(rest["n"]) == 22.0


def test_sums_accumulate_chunk_after_chunk():
    from effdepth.numerics.accumulate import SequenceSums

    z = torch.randn(3, 12, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    sums = SequenceSums(False, split_first=False, group_tokens=4)  # each chunk is a group of its own
    totals = []
    for start in range(0, 12, 4):
        sums.add(z[:, start : start + 4])
        totals.append(float(sums.parts[1]["gram_increments"][0, 0]))
    assert totals == pytest.approx(np.cumsum([float(z[0, s : s + 4].square().sum()) for s in (0, 4, 8)]), rel=1e-14)
    assert float(sums.finish()[1]["n"]) == 12.0


def test_a_chunk_that_cancels_is_formed_directly_inside_a_group_of_chunks():
    # The middle chunk's S_2 nearly erases S_1; the chunks around it are summed from increments.
    from effdepth.numerics.accumulate import SequenceSums

    g = torch.Generator().manual_seed(3)
    z = torch.randn(4, 9, 8, generator=g, dtype=torch.float64)
    z[2, 3:6] = 1e-7 * torch.randn(3, 8, generator=g, dtype=torch.float64)
    z[3] = z[2] + torch.randn(9, 8, generator=g, dtype=torch.float64)
    sums = SequenceSums(False, split_first=False, group_tokens=9)
    for start in (0, 3, 6):
        sums.add(z[:, start : start + 3])
    assert float(sums.parts[1]["n"]) == 9.0  # nothing before the third chunk: reduced as one group
    got = sums.finish()[1]
    gram, cos, _ = _direct_state_statistics(z)
    np.testing.assert_allclose(got["gram_states"].numpy(), gram, rtol=1e-12, atol=1e-24)
    np.testing.assert_allclose(got["cos_sum"].numpy(), cos, rtol=1e-12)


def test_a_run_without_the_token_similarity_skips_its_statistics_and_says_so():
    from effdepth.errors import EffdepthError
    from effdepth.numerics.accumulate import TOKEN_KEYS, statistics_for

    assert statistics_for(["cka", "frobenius"]) == tuple(k for k in STAT_KEYS if k not in TOKEN_KEYS)
    assert statistics_for(["cka", "token"]) == STAT_KEYS
    s = states()
    lean = ViewAccumulator(["default", "token-norm"], similarities=("cka",), statistics=statistics_for(["cka"]))
    full = ViewAccumulator(["default", "token-norm"], similarities=("cka",))
    for acc in (lean, full):
        acc.update(s)
    for view in ("default", "token-norm"):
        got, want = lean.unit_statistics(view, "cka"), full.unit_statistics(view, "cka")
        assert not set(TOKEN_KEYS) & set(got.arrays)
        for key in got.arrays:
            np.testing.assert_array_equal(got.arrays[key], want.arrays[key], err_msg=key)
    with pytest.raises(EffdepthError, match="token statistics were not accumulated.*including 'token'"):
        lean.unit_statistics("default", "token")


def test_a_non_finite_state_in_a_fit_names_its_layer():
    from effdepth.numerics.fits import NonFiniteFit

    parts = [torch.randn(3, t, 8, generator=torch.Generator().manual_seed(t)) for t in (7, 1, 12)]
    parts[2][1, 5, 3] = float("nan")
    with pytest.raises(NonFiniteFit) as error:
        FitAccumulator().update(parts)
    assert error.value.layer == 1


# -- transformed streams under kernel similarities alone: no cosine sums --------------------

PAPER = ["default", "drop-pos0", "pos0-only", "token-norm", "top1pc", "center"]


def _summaries(similarities, s, mask=None, bootstrap=40):
    from effdepth.numerics.summary import view_summaries

    acc = ViewAccumulator(PAPER, similarities=similarities)
    acc.update(s, mask)
    return acc, view_summaries(acc, similarity="cka", include_embedding=False, bootstrap=bootstrap, seed=3)[0]


def test_a_kernel_only_run_keeps_token_counts_alone_for_the_transformed_streams():
    acc, _ = _summaries(("cka",), states())
    kept = {
        info["spec"].name: {k.split("|")[-1] for k in acc.unit_arrays() if k.startswith(info["spec"].canonical + "|")}
        for info in acc.streams.values()
    }
    assert {"gram_states", "gram_increments", "cos_sum", "angle_sum"} <= kept["default"]
    for view in ("token-norm", "top1pc", "center"):
        assert kept[view] == {"n", "hsic", "update_hsic", "cka_pairs", "cka_tokens"}, view
    with_cosine, _ = _summaries(("cka", "frobenius"), states())
    assert {"gram_increments", "angle_sum"} <= set(with_cosine.unit_statistics("top1pc", "cka").arrays)


def test_the_kernel_numbers_do_not_depend_on_the_cosine_sums_kept():
    s = states(B=5)
    mask = torch.ones(5, 11, dtype=torch.bool)
    mask[3, 6:] = False
    _, lean = _summaries(("cka",), s, mask)
    _, full = _summaries(("cka", "frobenius"), s, mask)
    assert set(lean) == set(full) == set(PAPER) - {"pos0-only"}
    for view in lean:
        a, b = lean[view], full[view]
        for key in (
            "deff",
            "ratio",
            "gap_pct",
            "references",
            "attribution",
            "profile",
            "similarity",
            "tokens",
            "sequences",
            "reference_profiles",
        ):
            assert a[key] == b[key], (view, key)
        for key, bounds in a["ci"].items():
            assert bounds == b["ci"][key], (view, key)
        transformed = view in ("token-norm", "top1pc", "center")
        assert (
            (a["update_cosine"] == [] and a["related"] == {})
            if transformed
            else (a["update_cosine"] == b["update_cosine"])
        )
        assert ("block_influence" in a["ci"]) is not transformed
        assert {"hsic", "update_hsic"} <= set(a["statistics"]) and (
            "gram_increments" in a["statistics"]
        ) is not transformed


def test_a_result_records_which_views_carry_the_cosine_summaries():
    import effdepth

    s = states()
    assert (
        effdepth.from_states(s, views="default,top1pc")
        .config["cosine_summaries"]
        .startswith("untransformed views only")
    )
    assert (
        effdepth.from_states(s, views="default,top1pc", similarity="cka,token").config["cosine_summaries"]
        == "every view"
    )


def test_frobenius_numbers_of_a_transformed_view_after_a_kernel_only_run_are_a_one_line_error():
    acc, _ = _summaries(("cka",), states())
    acc.unit_statistics("default", "frobenius")  # the untransformed stream keeps them
    with pytest.raises(
        EffdepthError, match=r"frobenius statistics of view 'top1pc' were not accumulated.*--similarity cka,frobenius"
    ):
        acc.unit_statistics("top1pc", "frobenius")


@pytest.mark.parametrize("views", [["token-norm"], ["token-norm", "top1pc"]])
def test_non_finite_states_are_caught_without_an_untransformed_stream(views):
    s = states()
    s[2, 1, 4, 3] = float("nan")
    acc = ViewAccumulator(views, similarities=("cka",), pc_estimate="exact")
    if acc.needs_fit:
        clean = states()
        acc.fit_batch(clean)
        acc.finalize_fit("test")
    with pytest.raises(EffdepthError, match=r"non-finite activations in the output of block 2 \(S_2\)"):
        acc.update(s)


@pytest.mark.parametrize("dtype, scale", [(torch.float32, 3e36), (torch.float16, 500.0)])
def test_finite_states_whose_own_sum_overflows_are_not_called_non_finite(dtype, scale):
    s = (states() * scale).to(dtype)
    # Finite, but a sequence's layer sums past the dtype's largest value (3.4e38, 65504).
    assert torch.isfinite(s).all() and not torch.isfinite(s.sum(dim=(2, 3))).all()
    acc = ViewAccumulator(["token-norm"], similarities=("cka",))
    acc.update(s)
    assert acc.sequences == 3
    s[2, 1, 4, 3] = float("inf")
    name = str(dtype).replace("torch.", "")
    with pytest.raises(
        EffdepthError, match=rf"non-finite activations in the output of block 2 \(S_2\) with dtype {name}"
    ):
        ViewAccumulator(["token-norm"], similarities=("cka",)).update(s)


def test_a_kernel_only_state_does_not_resume_a_run_that_needs_the_cosine_sums():
    lean = ViewAccumulator(["default", "token-norm"], similarities=("cka",))
    lean.update(states())
    full = ViewAccumulator(["default", "token-norm"], similarities=("cka", "frobenius"))
    with pytest.raises(EffdepthError, match="lack .*resume with the same similarities"):
        full.load_state_dict(*lean.state_dict())
    # The other way round a saved state carries more than is kept: it resumes.
    full.update(states())
    again = ViewAccumulator(["default", "token-norm"], similarities=("cka",))
    again.load_state_dict(*full.state_dict())
    again.update(states())
    assert again.unit_statistics("token-norm", "cka").units == 3  # pairs of the six sequences
