"""Every entry point runs one pooling loop, and a measurement plans its analysis once."""

import sys
from collections import Counter
from functools import partial
from pathlib import Path

import torch

import effdepth
from effdepth.models.tiny import tiny_model

SOURCE = str(Path(effdepth.__file__).parent)
#: Functions that run once per measurement: the pooling loop, and the analysis's plan with its checks.
ONCE = ("pool_into", "analysis_plan", "check_samples", "analysis_units")


def calls_of(run) -> Counter:
    """How often each function of effdepth is entered while ``run()`` runs (whatever name imported it)."""
    calls = Counter()

    def count(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(SOURCE):
            calls[frame.f_code.co_name] += 1

    sys.setprofile(count)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def test_a_measurement_runs_one_pooling_loop_and_plans_its_analysis_once(tmp_path):
    ids = torch.randint(0, 256, (12, 16), generator=torch.Generator().manual_seed(0))
    for pooling in ("mean", "none"):
        model = tiny_model("llama")
        calls = calls_of(
            partial(effdepth.measure, model, ids, pooling=pooling, bootstrap=0, batch_size=4, progress=False)
        )
        assert {name: calls[name] for name in ONCE} == dict.fromkeys(ONCE, 1), pooling


def test_states_go_through_the_same_pooling_loop():
    states = torch.randn(4, 8, 6, 16, generator=torch.Generator().manual_seed(0))
    calls = calls_of(lambda: effdepth.from_states(states))
    assert calls["pool_into"] == 1 and calls["check_samples"] == 1
