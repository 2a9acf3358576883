"""Fixtures shared across the test tree.

Tiers: ``tests/unit`` (no model, seconds: ``make test-fast``) and
``tests/integration`` (tiny and real models, the CLI, the browser).
Markers: ``slow`` (the real SmolLM2 model), ``gpu`` (skipped without CUDA).
"""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)

from effdepth.data import byte_tokenizer
from effdepth.tiny import tiny_model


@pytest.fixture(scope="session")
def saved_tiny_model(tmp_path_factory):
    """``saved_tiny_model("gpt2")``: a folder with a tiny random model and the byte
    tokenizer, saved once per session and type, loadable like any checkpoint."""
    cache = {}

    def save(model_type: str = "llama"):
        if model_type not in cache:
            folder = tmp_path_factory.mktemp(f"tiny-{model_type}")
            tiny_model(model_type).save_pretrained(folder)
            byte_tokenizer().save_pretrained(folder)
            cache[model_type] = folder
        return cache[model_type]

    return save


@pytest.fixture(scope="session")
def model_dir(saved_tiny_model):
    """A saved tiny Llama with the byte tokenizer."""
    return saved_tiny_model("llama")
