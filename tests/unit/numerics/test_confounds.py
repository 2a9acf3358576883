"""The first-token x length confound and its controls (docs/method.md#the-first-token-x-length-confound):
a planted 1/n component that drop-pos0 and length remove and default does not; the length view against a
naive least-squares residual; why its fit need not be redone in each resample; the confounds table's paired
differences; the sample-size curve (nested, reproducible under a seed, exactly the estimator on each subset);
equal-length windows."""

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_debiased

from effdepth.data.passages import load_passages, windows
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.confounds import Subsamples, confound_table, length_distribution
from effdepth.numerics.hsic_resample import Units, resample_weights, resampled_hsic
from effdepth.numerics.metrics import cka
from effdepth.numerics.pooling import PassagePooler
from effdepth.numerics.references import reference_fl
from effdepth.numerics.sample_hsic import TensorStack, stack_sums
from effdepth.numerics.similarity import deff
from effdepth.numerics.stacks import LengthRegressed, length_basis


def planted(samples=256, layers=8, width=64, longest=40, sink=200.0, seed=0):
    """Token states whose every position but the first is the passage's vector of an isotropic
    random walk (S_0 one step), and whose first position is one huge vector shared by every passage and
    layer; passages of 9 to ``longest`` tokens. Returns the pooled variants, the lengths and the walk."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(9, longest + 1, size=samples)
    walk = np.cumsum(rng.normal(size=(layers + 1, samples, width)), axis=0)
    sink_state = rng.normal(size=width)
    sink_state *= sink / np.linalg.norm(sink_state)
    states = np.repeat(walk[:, :, None, :], longest, axis=2)
    states[:, :, 0, :] = sink_state
    mask = (np.arange(longest)[None] < lengths[:, None]).astype(np.float64)
    pooler = PassagePooler(["default", "drop-pos0"], layers)
    pooler.start(torch.from_numpy(mask), torch.zeros(samples, dtype=torch.bool))
    for layer in range(layers + 1):
        pooler.layer(layer, torch.from_numpy(states[layer]))
    pooled = {name: pooler.pooled[i].numpy() for i, name in enumerate(["default", "drop-pos0"])}
    return pooled, lengths, walk


def planted_deff(layers: int) -> float:
    """R(E) of the walk's S_1..S_L: cumulative sizes E_l = l + 1 (S_0 is one step), sim = min/max."""
    e = np.arange(2.0, layers + 2.0)
    return layers**2 / (np.minimum.outer(e, e) / np.maximum.outer(e, e)).sum()


def test_drop_pos0_and_length_recover_a_planted_deff_that_a_first_position_sink_hides():
    pooled, lengths, walk = planted()
    out = analyse_pooled(pooled, AnalysisPlan(views="default", bootstrap=100, calibrated=False), lengths=lengths)
    table = out["confounds"]["cka-debiased"]
    truth = planted_deff(8)
    assert table["drop-pos0"]["deff"] == pytest.approx(truth, rel=0.03)
    assert table["length"]["deff"] == pytest.approx(truth, rel=0.03)
    assert table["default"]["deff"] < 0.9 * truth  # the sink's 1/n weight makes every layer alike
    for control in ("drop-pos0", "length"):
        assert table[control]["outside"] and table[control]["difference_ci"][0] > 0
    # drop-pos0 pools exactly the walk: its numbers are the walk's own, under both estimators
    np.testing.assert_allclose(pooled["drop-pos0"], walk, atol=1e-9)
    alone = analyse_pooled({"default": walk}, AnalysisPlan(views="default", bootstrap=0, calibrated=False))
    for sim in ("cka", "cka-debiased"):
        assert out["confounds"][sim]["drop-pos0"]["deff"] == pytest.approx(
            alone["similarities"][sim]["default"]["deff"], rel=1e-6
        )


def test_with_equal_lengths_the_length_view_is_the_default_view_and_says_so():
    pooled, _, _ = planted(samples=64)
    lengths = np.full(64, 30)
    out = analyse_pooled(
        pooled, AnalysisPlan(views="default,length,length+top1pc,top1pc", bootstrap=20), lengths=lengths
    )
    for sim, views in out["similarities"].items():
        assert views["length"]["deff"] == views["default"]["deff"]
        assert views["length+top1pc"]["deff"] == views["top1pc"]["deff"]
        assert out["confounds"][sim]["length"]["difference"] == 0.0
    assert "every passage has 30 tokens" in out["confounds"]["length_is_default"]
    assert out["analysis"]["pc_fits"]["length"]["identity"]


def test_the_length_view_is_the_least_squares_residual_on_one_over_n_and_log_n_with_the_mean_kept():
    rng = np.random.default_rng(3)
    n = rng.integers(5, 200, size=50)
    y = rng.normal(size=(50, 7))
    got = next(LengthRegressed(TensorStack([torch.from_numpy(y)]), None, n).layers()).numpy()
    x = np.stack([np.ones(50), 1.0 / n, np.log(n)], axis=1)
    residual = y - x @ np.linalg.lstsq(x, y, rcond=None)[0]
    np.testing.assert_allclose(got, residual + y.mean(0), atol=1e-12)
    assert length_basis([3, 3, 3]).shape == (3, 0) and length_basis([3, 5, 3]).shape == (3, 1)


def test_fitting_the_length_basis_once_matches_refitting_it_in_each_resample():
    """The basis has two functions against N passages: refitting it on each resample (weighted least
    squares with the resample's counts) moves D_eff by O(1/N), well inside the interval at a few hundred
    passages (docs/method.md#the-first-token-x-length-confound)."""
    samples = 384
    pooled, lengths, _ = planted(samples=samples, layers=6, width=32)
    units = Units.blocks(samples, 128)
    weights = resample_weights(units.count, 20, seed=1)

    def deffs(layers, rows):
        h = resampled_hsic(stack_sums(layers, units), rows)["debiased"]
        return deff(cka(h)[:, 1:, 1:])

    once = deffs(LengthRegressed(TensorStack([torch.from_numpy(m) for m in pooled["default"]]), None, lengths), weights)
    x = np.stack([np.ones(samples), 1.0 / lengths, np.log(lengths)], axis=1)
    refit = []
    for row in weights[1:]:
        root = np.sqrt(np.repeat(row, units.sizes))[:, None]
        layers = [m - x @ np.linalg.lstsq(root * x, root * m, rcond=None)[0] for m in pooled["default"]]
        refit.append(deffs([torch.from_numpy(m) for m in layers], row[None])[0])
    half_width = (np.percentile(once[1:], 97.5) - np.percentile(once[1:], 2.5)) / 2
    assert np.max(np.abs(np.asarray(refit) - once[1:])) < 0.4 * half_width
    assert abs(np.mean(refit) - np.mean(once[1:])) < 0.25 * half_width


def test_the_confounds_table_takes_differences_resample_by_resample():
    base = np.array([1.0, 0.8, 1.2, 1.0, 0.9])
    other = base + np.array([0.1, 0.1, 0.1, 0.1, 0.1])  # moves with default in every resample
    table = confound_table({"default": base, "length": other}, reference=2.0, level=0.95)
    assert table["length"]["difference"] == pytest.approx(0.1)
    assert table["length"]["difference_ci"] == pytest.approx([0.1, 0.1])
    assert table["length"]["outside"] is False
    assert confound_table({"default": base[:1], "length": other[:1]}, 2.0, 0.95)["length"]["outside"] is None


def test_a_subsample_row_is_exactly_the_estimator_on_its_passages():
    rng = np.random.default_rng(5)
    layers = [rng.normal(size=(40, 6)).cumsum(0) + i for i in range(3)]
    units = Units.blocks(40, 10)
    sub = Subsamples.draw(units, seed=0, draws=2)
    h = resampled_hsic(stack_sums([torch.from_numpy(m) for m in layers], units), sub.weights)
    for row, w in enumerate(sub.weights):
        kept = np.repeat(w, units.sizes).astype(bool)
        for i in range(3):
            for j in range(3):
                a, b = layers[i][kept], layers[j][kept]
                assert h["biased"][row, i, j] == pytest.approx(naive_biased(a, b), rel=1e-9)
                assert h["debiased"][row, i, j] == pytest.approx(naive_debiased(a - a.mean(0), b - b.mean(0)), rel=1e-8)


def test_the_sample_size_curve_is_nested_reproducible_under_a_seed_and_leaves_out_what_is_too_small():
    pooled, lengths, _ = planted(samples=128, layers=4, width=16)
    plan = AnalysisPlan(views="default", bootstrap=20, calibrated=False)
    one, again = (analyse_pooled(pooled, plan, lengths=lengths)["sample_size"] for _ in range(2))
    other = analyse_pooled(
        pooled, AnalysisPlan(views="default", bootstrap=20, calibrated=False, seed=1), lengths=lengths
    )["sample_size"]
    assert one == again and one["cka"] != other["cka"]
    points = one["cka-debiased"]["points"]
    assert [p["fraction"] for p in points] == ["N/8", "N/4", "N/2", "N"]
    assert [p["passages"] for p in points] == [16, 32, 64, 128]
    full = analyse_pooled(pooled, plan, lengths=lengths)["similarities"]["cka-debiased"]["default"]["deff"]
    assert points[-1]["deff"] == pytest.approx(full, abs=1e-6)
    sub = Subsamples.draw(Units.blocks(128, 128), seed=0, draws=5)
    for d in range(5):  # N/8 within N/4 within N/2, draw by draw
        assert (sub.weights[5 + d] >= sub.weights[d]).all() and (sub.weights[10 + d] >= sub.weights[5 + d]).all()
    small = Subsamples.draw(Units.blocks(12, 12), seed=0, draws=3)
    assert [s["fraction"] for s in small.sizes] == ["N/2"]
    assert len(small.notes) == 2 and "below the 4 a subsample needs" in small.notes[0]
    assert Subsamples.draw(Units.blocks(6, 6), seed=0).weights.shape == (0, 6)


def test_the_length_distribution_says_quartiles_and_the_share_at_seq_len():
    d = length_distribution([10, 20, 30, 40, 40], seq_len=40)
    assert (d["min"], d["median"], d["max"], d["share_at_seq_len"], d["equal"]) == (10, 30.0, 40, 0.4, False)
    assert length_distribution([7, 7])["equal"]


def test_windows_have_exactly_seq_len_tokens_special_tokens_only_at_their_start():
    text = ["\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(30)), "short"]
    tokenizer = byte_tokenizer()
    p = load_passages(text, tokenizer, max_len=33, num_passages=12, bos="always", split="windows")
    assert set(p.lengths.tolist()) == {33} and p.starts_with_bos.all()
    for i in range(p.num_passages):
        assert 256 not in p.passage(i)[1:].tolist()
    assert windows(list(range(10)), 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_a_corpus_too_short_for_one_window_is_one_line():
    with pytest.raises(EffdepthError) as caught:
        load_passages(["a short text"], byte_tokenizer(), max_len=64, num_passages=4, split="windows")
    message = str(caught.value)
    assert (
        "\n" not in message and "0 windows of exactly 64 tokens" in message and "--passage-split paragraphs" in message
    )


def test_the_controls_that_cannot_be_measured_say_why_and_the_rest_goes_on():
    pooled, lengths, _ = planted(samples=32, layers=3, width=8)
    out = analyse_pooled({"default": pooled["default"]}, AnalysisPlan(bootstrap=10, calibrated=False), lengths=None)
    assert set(out["confounds"]["notes"]) == {"drop-pos0", "length"}
    assert "no drop-pos0 variant" in out["confounds"]["notes"]["drop-pos0"]
    single = lengths.copy()
    single[3] = 1
    out = analyse_pooled(pooled, AnalysisPlan(bootstrap=10, calibrated=False), lengths=single)
    assert "one token" in out["confounds"]["notes"]["drop-pos0"] and "length" in out["confounds"]["cka"]
    with pytest.raises(EffdepthError, match="no lengths were given"):
        analyse_pooled(pooled, AnalysisPlan(views="length", bootstrap=0), lengths=None)
    assert reference_fl(3) == pytest.approx(1.5)
