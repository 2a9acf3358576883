"""Passage mode's forward pass keeps no pooled vector in memory: they go to the memory-mapped store on disk,
so the process's anonymous memory during the forward stage stays flat in the number of passages."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import effdepth
from effdepth import passage_measure
from effdepth.pooled import PooledStore

STATUS = Path("/proc/self/status")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not STATUS.exists(),
                                reason="reads RssAnon from /proc/self/status")


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

    from effdepth.tiny import tiny_config

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
