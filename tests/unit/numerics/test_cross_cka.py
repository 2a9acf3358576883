"""The cross-model CKA matrix (numerics/cross_cka.py) against a naive numpy CKA under both estimators, against the
within-model matrix the analysis computes, whatever the row tiles, within its memory budget."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from naive_hsic import naive_biased, naive_debiased

from effdepth.errors import EffdepthError
from effdepth.numerics.cross_cka import cross_cka, cross_cka_memory
from effdepth.numerics.hsic_resample import Units, resample_weights, resampled_hsic
from effdepth.numerics.metrics import cka
from effdepth.numerics.sample_hsic import stack_sums
from effdepth.numerics.stacks import PooledStates

ESTIMATORS = {"cka": naive_biased, "cka-debiased": naive_debiased}


def states(layers: int, passages: int, width: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.normal(size=(layers + 1, passages, width)), axis=0) + rng.normal(size=width) * 5.0


def naive_cross_cka(a: np.ndarray, b: np.ndarray, hsic) -> np.ndarray:
    return np.array([[hsic(x, y) / np.sqrt(hsic(x, x) * hsic(y, y)) for y in b] for x in a])


def related(a: np.ndarray, width: int, seed: int) -> np.ndarray:
    """Another model's states on the same passages: A's through a random map to another width, plus noise."""
    rng = np.random.default_rng(seed)
    return a[::2] @ rng.normal(size=(a.shape[-1], width)) + rng.normal(size=(len(a[::2]), a.shape[1], width))


def test_both_estimators_equal_a_naive_numpy_cka_across_widths():
    a = states(4, 37, 5, seed=0)
    b = related(a, 9, seed=1)  # 3 states of width 9 against 5 of width 5
    out = cross_cka(PooledStates(a, "cpu"), PooledStates(b, "cpu"))
    for name, hsic in ESTIMATORS.items():
        assert out[name].shape == (5, 3)
        np.testing.assert_allclose(out[name], naive_cross_cka(a, b, hsic), rtol=0, atol=1e-9, err_msg=name)
    assert np.abs(out["cka"] - out["cka-debiased"]).max() > 1e-3  # two estimators, not one twice


@pytest.mark.parametrize("estimator, name", [("biased", "cka"), ("debiased", "cka-debiased")])
def test_a_stack_against_itself_is_the_within_model_matrix_with_ones_on_its_diagonal(estimator, name):
    a = states(5, 40, 6, seed=2)
    out = cross_cka(PooledStates(a, "cpu"), PooledStates(a, "cpu"))[name]
    units = Units.blocks(40, 8)
    hsic = resampled_hsic(stack_sums([torch.from_numpy(x) for x in a], units), resample_weights(8, 0, 0))
    np.testing.assert_allclose(out, cka(hsic[estimator][0]), rtol=0, atol=1e-9)
    np.testing.assert_allclose(np.diagonal(out), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out, out.T, rtol=0, atol=1e-12)


def test_row_tiles_and_streamed_layers_give_the_same_matrices_as_one_tile():
    a, b = states(3, 64, 7, seed=3), states(2, 64, 4, seed=4)
    one = cross_cka(PooledStates(a, "cpu"), PooledStates(b, "cpu"))
    assert one["memory"]["tiles"] == 1 and one["memory"]["resident"]
    row = 8 * 64 * (4 + 3)  # a row of every Gram tile
    budget = cross_cka_memory(64, (4, 3), (7, 4), 1 << 30)["least_bytes"] + 8 * row  # nine rows a tile
    tiled = cross_cka(PooledStates(a, "cpu"), PooledStates(b, "cpu"), budget_bytes=budget)
    memory = tiled["memory"]
    assert (memory["tile_rows"], memory["tiles"], memory["resident"], memory["passes"]) == (9, 8, False, 8)
    assert memory["peak_bytes"] <= budget
    for name in ESTIMATORS:
        np.testing.assert_allclose(tiled[name], one[name], rtol=0, atol=1e-12)


def test_two_thirty_layer_results_at_1024_passages_fit_the_default_budget():
    memory = cross_cka_memory(1024, (31, 31), (576, 1024))
    assert memory["peak_bytes"] <= memory["budget_bytes"] == 4 << 30
    assert memory["route"] == "gram" and memory["resident"] and memory["passes"] == 1


def test_the_peak_grows_with_the_tile_and_stays_within_any_budget_above_the_least():
    least = cross_cka_memory(500, (13, 9), (64, 96))["least_bytes"]
    for budget in (least, least + 12345, 2 * least, 10 * least, 1 << 32):
        memory = cross_cka_memory(500, (13, 9), (64, 96), budget)
        assert memory["peak_bytes"] <= budget and memory["least_bytes"] == least


def test_bad_input_is_one_line():
    a = PooledStates(states(2, 30, 3, seed=5), "cpu")
    with pytest.raises(EffdepthError, match="A holds 30 samples and B 31"):
        cross_cka(a, PooledStates(states(2, 31, 3, seed=6), "cpu"))
    with pytest.raises(EffdepthError, match="pairs four distinct passages"):
        cross_cka(PooledStates(states(2, 3, 3, seed=5), "cpu"), PooledStates(states(2, 3, 3, seed=6), "cpu"))
    with pytest.raises(EffdepthError, match="--max-memory 1000 B is below the .* cross-model CKA needs at least"):
        cross_cka(a, a, budget_bytes=1000)


#: Run in a fresh process (memory an earlier test freed would hide a peak): the peak of resident memory
#: (Linux's VmHWM, reset through clear_refs) that one cross_cka of two 31-state stacks at N = 1,024 adds,
#: after one of two states has set up the BLAS buffers.
MEASURE_PEAK = """
import json, sys
from pathlib import Path
import numpy as np
from effdepth.numerics.cross_cka import cross_cka
from effdepth.numerics.stacks import PooledStates

def stack(width, passages=1024):
    return PooledStates(np.cumsum(np.random.default_rng(width).normal(size=(31, passages, width)), axis=0), "cpu")

def field(name):
    return int(Path("/proc/self/status").read_text().split(name + ":")[1].split()[0]) * 1024

warm = PooledStates(np.ones((2, 1024, 96)), "cpu")  # the products' shapes once: the BLAS buffers for them
cross_cka(warm, warm)
a, b = stack(64), stack(96)
Path("/proc/self/clear_refs").write_text("5")
base = field("VmRSS")
memory = cross_cka(a, b, budget_bytes=int(sys.argv[1]))["memory"]
print(json.dumps({"memory": memory, "peak": field("VmHWM") - base}))
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="measures resident memory through /proc")
@pytest.mark.parametrize("budget", [4 << 30, 48 << 20], ids=["resident", "streamed"])
def test_the_measured_peak_stays_within_the_plan_and_the_budget(budget):
    done = subprocess.run(
        [sys.executable, "-c", MEASURE_PEAK, str(budget)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    memory, peak = out["memory"], out["peak"]
    assert memory["peak_bytes"] <= budget and memory["resident"] == (budget > 1 << 30)
    assert memory["passes"] == (1 if memory["resident"] else memory["tiles"]) and memory["tiles"] > 1
    assert peak <= memory["peak_bytes"] + (4 << 20), (peak / 2**20, memory)  # the interpreter's own allocations aside
