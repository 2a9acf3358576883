"""Passage mode's memory: the forward pass keeps no pooled vector in memory (they go to the memory-mapped
store on disk), so the process's anonymous memory during the forward stage stays flat in the number of
passages; the analysis holds no more than its --max-memory budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

STATUS = Path("/proc/self/status")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not STATUS.exists(), reason="reads RssAnon from /proc/self/status"
)


FORWARD_PEAK = """
import json
import torch
from transformers import AutoModelForCausalLM

import effdepth
from effdepth.measurement import run as passage_measure
from effdepth.models.tiny import tiny_config
from effdepth.results.store import PooledStore


def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024


class ForwardDone(Exception):
    pass


def stop(*args, **kwargs):
    raise ForwardDone


config = tiny_config("llama")
config.hidden_size, config.intermediate_size, config.num_hidden_layers = 256, 512, 6
config.num_attention_heads = config.num_key_value_heads = 4
config.head_dim = 64
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(config).eval()
peak = {}
write = PooledStore.write


def sampled_write(self, indices, pooled, sums):
    write(self, indices, pooled, sums)
    peak["max"] = max(peak["max"], rss_anon())


PooledStore.write, passage_measure.analyse_store = sampled_write, stop


def forward_growth(passages):
    peak["start"] = peak["max"] = rss_anon()
    ids = torch.randint(0, 256, (passages, 4), generator=torch.Generator().manual_seed(0))
    try:
        effdepth.measure(model, ids, batch_size=256, bootstrap=0, progress=False)
    except ForwardDone:
        return peak["max"] - peak["start"]
    raise AssertionError("the measurement never reached the analysis")


forward_growth(256)  # warm up: allocator pools, lazy imports
small, large = forward_growth(256), forward_growth(4096)
print(json.dumps({"small": small, "large": large, "layers": 6, "width": 256}))
"""


def in_fresh_process(script: str, *args) -> dict:
    """A script's JSON line, run in a fresh process whose allocator hands every block over 128 KiB back
    at once (so resident memory is what is held, not what was once held)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(
        [sys.executable, "-c", script, *(str(a) for a in args)], capture_output=True, text=True, env=env, timeout=300
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_forward_memory_is_flat_in_the_number_of_passages():
    """Peak growth of anonymous memory over the forward stage (sampled after every batch written), for
    256 and 4,096 passages of a tiny Llama 256 wide."""
    out = in_fresh_process(FORWARD_PEAK)
    in_memory = 4096 * (out["layers"] + 1) * out["width"] * 8  # (L+1, N, d) float64
    # holding the pooled vectors would add 58 MB
    assert out["large"] - out["small"] < in_memory / 3, (out, in_memory)


ANALYSIS_PEAK = """
import json, sys, threading
import numpy as np
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled, analysis_memory, analysis_units


def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024


folder, budget, layers, samples, width, resamples, calibrated, per_passage = sys.argv[1], *map(int, sys.argv[2:9])
stored = np.lib.format.open_memmap(folder + "/default.npy", mode="w+", dtype=np.float32, shape=(layers + 1, samples, width))
stored[:] = np.cumsum(np.random.default_rng(0).standard_normal(stored.shape, dtype=np.float32), axis=0)
stored.flush()
del stored
pooled = {"default": np.load(folder + "/default.npy", mmap_mode="r")}
offsets = {"default": np.arange(0, samples + 1, per_passage)} if per_passage > 1 else None
plan = AnalysisPlan(views=("default",), bootstrap=resamples, calibrated=bool(calibrated), max_memory=budget)
units = analysis_units(samples // per_passage, plan, offsets)
start = peak = rss_anon()
done = threading.Event()


def sample():
    global peak
    while not done.wait(0.001):
        peak = max(peak, rss_anon())


thread = threading.Thread(target=sample, daemon=True)
thread.start()
try:
    out = analyse_pooled(pooled, plan, offsets=offsets)
finally:
    done.set()
thread.join()
print(json.dumps({"growth": peak - start, "predicted": analysis_memory(samples, layers, width, plan, units)["peak_bytes"],
                  "passes": out["analysis"]["memory"]["passes"]}))
"""


def analysis_peak(
    folder: Path,
    budget: int,
    layers: int,
    samples: int,
    width: int,
    *,
    resamples: int = 20,
    calibrated: bool = False,
    per_passage: int = 1,
) -> dict:
    """Peak growth of anonymous memory over one analysis in a fresh process; ``per_passage`` > 1: the
    token reduction, that many samples of each passage."""
    args = (budget, layers, samples, width, resamples, int(calibrated), per_passage)
    return in_fresh_process(ANALYSIS_PEAK, folder, *args)


def test_the_analysis_holds_no_more_than_its_budget(tmp_path):
    """Pooled vectors on disk as float32 (N = 1,024, L = 11, d = 512: 50 MB per view as float64). Within
    a 64 MiB budget the analysis streams the layers through its Gram tiles; with 4 GiB it keeps the view
    and its centred layers in memory, several times the view. Both peaks are what analysis_memory says."""
    layers, samples, width = 11, 1024, 512
    view = 8 * (layers + 1) * samples * width
    small = analysis_peak(tmp_path, 64 << 20, layers, samples, width)
    large = analysis_peak(tmp_path, 4 << 30, layers, samples, width)
    assert small["passes"] > 1 and large["passes"] == 1
    slack = 16 << 20  # the interpreter's and the libraries' own allocations
    assert small["growth"] < (64 << 20) + slack and small["growth"] < small["predicted"] + slack, small
    assert large["growth"] > 3 * view and large["growth"] < large["predicted"] + slack, (large, view)


def test_the_token_reductions_analysis_holds_no_more_than_its_plan(tmp_path):
    """benchmarks/tokens.py's shapes: 64 passages x 4 tokens, L = 30, d = 576, 1,000 resamples with the
    calibrated references, within 256 MiB. Units of whole passages hold few samples, so the Gram route's
    products of blocks and the 1,061 weight rows' (M, M) draws, not the layers, fill the budget; the
    plan counts them (it once planned 178 MiB here and the analysis held 219)."""
    budget = 256 << 20
    out = analysis_peak(tmp_path, budget, 30, 256, 576, resamples=1000, calibrated=True, per_passage=4)
    slack = 16 << 20
    assert out["growth"] < budget and out["growth"] < out["predicted"] + slack, out
