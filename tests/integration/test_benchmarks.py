"""The benchmark scripts stay runnable (their numbers live in the README, not in tests)."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the script really benchmarks")
def test_gpu_benchmark_exits_cleanly_without_cuda():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "no CUDA device" in out.stdout


def test_gpu_benchmark_shapes_are_real_configs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu
    finally:
        sys.path.pop(0)
    from transformers import AutoConfig

    for shape, (model_type, fields) in gpu.SHAPES.items():
        config = AutoConfig.for_model(model_type, **fields)
        assert config.num_hidden_layers == fields["num_hidden_layers"] and config.hidden_size == fields["hidden_size"]
