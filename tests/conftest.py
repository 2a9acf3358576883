"""Fixtures shared across the test tree, and the tiers.

Every test gets exactly one tier marker, from where it lives (see
``pytest_collection_modifyitems``):

- ``unit``: ``tests/unit`` and the doctests of ``src/effdepth`` (no model, under
  a minute: ``make test-fast``);
- ``integration``: ``tests/integration`` (tiny random models, the CLI, the
  cache, the reports: ``make test-integration``);
- ``acceptance``: the tests there that need the real pretrained models (marked
  ``slow``: SmolLM2, Gemma-3 GGUF) or a real browser (marked ``acceptance``):
  ``make test-acceptance``.

``gpu`` marks the tests that need a CUDA GPU (skipped without one), on top of
their tier.
"""

from pathlib import Path

import pytest
import torch

from effdepth.data import byte_tokenizer
from effdepth.models.tiny import tiny_model

INTEGRATION = Path(__file__).resolve().parent / "integration"


def tier(item) -> str:
    """The item's one tier: ``acceptance`` for a test marked ``slow`` (the real models) or
    ``acceptance`` (the browser), ``integration`` for the rest of ``tests/integration``, and
    ``unit`` for everything else (``tests/unit``, the doctests of ``src/effdepth``)."""
    if item.get_closest_marker("slow") or item.get_closest_marker("acceptance"):
        return "acceptance"
    if INTEGRATION in Path(item.path).resolve().parents:
        return "integration"
    return "unit"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    skip_gpu = None if torch.cuda.is_available() else pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        item.add_marker(getattr(pytest.mark, tier(item)))
        if skip_gpu is not None and item.get_closest_marker("gpu"):
            item.add_marker(skip_gpu)


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
