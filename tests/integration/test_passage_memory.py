"""Passage mode's memory: the forward pass keeps no pooled vector in memory (they go to the memory-mapped
store on disk), so the process's anonymous memory during the forward stage stays flat in the number of
passages; the analysis holds no more than its --max-memory budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import effdepth
from effdepth.measurement import run as passage_measure
from effdepth.results.store import PooledStore

STATUS = Path("/proc/self/status")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not STATUS.exists(), reason="reads RssAnon from /proc/self/status"
)


class ForwardDone(Exception):
    pass


def rss_anon_bytes() -> int:
    """Anonymous resident memory: the heap and tensors, not the store's file-backed pages."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def wide_model(width: int = 256, layers: int = 6):
    from transformers import AutoModelForCausalLM

    from effdepth.models.tiny import tiny_config

    config = tiny_config("llama")
    config.hidden_size, config.intermediate_size, config.num_hidden_layers = width, 2 * width, layers
    config.num_attention_heads = config.num_key_value_heads = 4
    config.head_dim = width // 4
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def forward_growth(model, passages: int, monkeypatch) -> int:
    """Peak growth of anonymous memory over the forward stage (sampled after every batch written)."""
    peak = {"start": rss_anon_bytes(), "max": 0}
    write = PooledStore.write

    def sampled_write(self, indices, pooled, sums):
        write(self, indices, pooled, sums)
        peak["max"] = max(peak["max"], rss_anon_bytes())

    def stop(*args, **kwargs):
        raise ForwardDone

    monkeypatch.setattr(PooledStore, "write", sampled_write)
    monkeypatch.setattr(passage_measure, "analyse_store", stop)
    ids = torch.randint(0, 256, (passages, 4), generator=torch.Generator().manual_seed(0))
    with pytest.raises(ForwardDone):
        effdepth.measure(model, ids, batch_size=256, bootstrap=0, progress=False)
    return peak["max"] - peak["start"]


def test_forward_memory_is_flat_in_the_number_of_passages(monkeypatch):
    model = wide_model()
    forward_growth(model, 256, monkeypatch)  # warm up: allocator pools, lazy imports
    small = forward_growth(model, 256, monkeypatch)
    large = forward_growth(model, 4096, monkeypatch)
    in_memory = 4096 * (model.config.num_hidden_layers + 1) * model.config.hidden_size * 8  # (L+1, N, d) float64
    # The allocator's own growth varies by several MB from run to run; holding the pooled vectors would add 58 MB.
    assert large - small < in_memory / 3, (small, large, in_memory)


ANALYSIS_PEAK = """
import json, sys, threading
import numpy as np
from effdepth.numerics.passage_analysis import AnalysisPlan, analyse_pooled, analysis_memory


def rss_anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024


folder, budget, layers, samples, width = sys.argv[1], int(sys.argv[2]), *map(int, sys.argv[3:6])
stored = np.lib.format.open_memmap(folder + "/default.npy", mode="w+", dtype=np.float32, shape=(layers + 1, samples, width))
stored[:] = np.cumsum(np.random.default_rng(0).standard_normal(stored.shape, dtype=np.float32), axis=0)
stored.flush()
del stored
pooled = {"default": np.load(folder + "/default.npy", mmap_mode="r")}
plan = AnalysisPlan(views=("default",), bootstrap=20, calibrated=False, max_memory=budget)
start = peak = rss_anon()
done = threading.Event()


def sample():
    global peak
    while not done.wait(0.001):
        peak = max(peak, rss_anon())


thread = threading.Thread(target=sample)
thread.start()
out = analyse_pooled(pooled, plan)
done.set()
thread.join()
print(json.dumps({"growth": peak - start, "predicted": analysis_memory(samples, layers, width, plan)["peak_bytes"],
                  "passes": out["analysis"]["memory"]["passes"]}))
"""


def analysis_peak(folder: Path, budget: int, layers: int, samples: int, width: int) -> dict:
    """Peak growth of anonymous memory over one analysis, in a fresh process whose allocator hands every
    block over 128 KiB back at once (so resident memory is what is held, not what was once held)."""
    import json
    import os
    import subprocess

    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(
        [sys.executable, "-c", ANALYSIS_PEAK, str(folder), str(budget), str(layers), str(samples), str(width)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


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
