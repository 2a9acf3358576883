"""The token reduction on real forwards (tiny families; SmolLM2 on real weights): measure_passages with each
passage's tokens as samples equals a naive token-level CKA over transformers' hidden_states, each passage
run alone, to 1e-6."""

import numpy as np
import pytest
import torch

from effdepth.data.tokenizers import byte_tokenizer
from effdepth.measurement import prepare
from effdepth.measurement.run import measure_passages
from effdepth.models.tiny import tiny_model
from effdepth.options import AnalysisOptions, LoadOptions, RunOptions

TEXT = ["\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(40))]


def naive_token_deff(model, passages, drop_first: bool, debiased: bool) -> float:
    """Every token of every passage (position 0 left out for drop-pos0) as a sample, states from hidden_states;
    HSIC written out from each layer's Gram matrix (Song et al.'s unbiased form with zeroed diagonals)."""
    layers = []
    with torch.no_grad():
        for i in range(passages.num_passages):
            ids = torch.as_tensor(passages.passage(i), dtype=torch.long)[None]
            hidden = model(ids, output_hidden_states=True).hidden_states
            layers.append(np.stack([h[0, 1 if drop_first else 0 :].double().numpy() for h in hidden]))
    stack = np.concatenate(layers, axis=1)[1:]  # S_1..S_L, all samples
    n = stack.shape[1]
    grams = [(x - x.mean(0)) @ (x - x.mean(0)).T for x in stack]
    if debiased:
        for k in grams:
            np.fill_diagonal(k, 0.0)

    def hsic(k, m):
        if not debiased:
            return float((k * m).sum()) / n**2
        one = np.ones(n)
        return float(
            ((k * m).sum() + k.sum() * m.sum() / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * (one @ k) @ (m @ one))
            / (n * (n - 3))
        )

    h = np.array([[hsic(a, b) for b in grams] for a in grams])
    return float(len(stack) ** 2 / (h / np.sqrt(np.outer(np.diag(h), np.diag(h)))).sum())


def check(prepared, tol):
    analysis = AnalysisOptions(
        views="default,drop-pos0", states="hidden", bootstrap=20, batch_size=5, surrogate_seqs=0, pooling="none"
    )
    result = measure_passages(prepared, analysis, run=RunOptions(progress=False))
    assert result.config["reduction"]["samples"] == "tokens" and "confounds" not in result.extras
    assert result.config["reduction"]["per_variant"]["default"] == prepared.tokens.tokens
    for view, drop_first in (("default", False), ("drop-pos0", True)):
        for sim, debiased in (("cka", False), ("cka-debiased", True)):
            want = naive_token_deff(prepared.lm.model, prepared.tokens, drop_first, debiased)
            assert result.similarities[sim][view].deff == pytest.approx(want, rel=tol, abs=tol), (view, sim)
    assert result.default.ci["deff"][0] <= result.default.deff <= result.default.ci["deff"][1]
    return result


def test_the_token_reduction_of_a_tiny_model_equals_a_naive_token_level_cka():
    load = LoadOptions(
        model=tiny_model("llama"),
        corpus=TEXT,
        tokenizer=byte_tokenizer(),
        seq_len=48,
        num_seqs=8,
        passage_split="paragraphs",
    )
    prepared = prepare(load, progress=False)
    assert len(set(prepared.tokens.lengths.tolist())) > 1
    check(prepared, tol=1e-9)


@pytest.mark.slow
def test_the_token_reduction_of_smollm2_equals_a_naive_token_level_cka():
    prepared = prepare(LoadOptions(model="smollm2-135m", corpus="shakespeare", seq_len=24, num_seqs=8), progress=False)
    check(prepared, tol=1e-6)
