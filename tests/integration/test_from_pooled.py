"""effdepth.from_pooled: the paper's number from one's own pooled vectors, the same as measure's from the
same vectors, and bad input in one line."""

import numpy as np
import pytest
import torch

import effdepth
from effdepth.data.tokenizers import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models.tiny import tiny_model
from effdepth.results.store import PooledStore

TEXT = ["\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(60))]


TOKEN_LEVEL = ("block_influence", "relative_contribution")  # per-token sums: measure has them, pooled vectors do not


def pooled_numbers(views: dict) -> dict:
    """A result's views without the token-level measures."""
    out = {}
    for name, view in views.items():
        view = {k: v for k, v in view.items() if k != "related"}
        view["ci"] = {k: v for k, v in (view["ci"] or {}).items() if k not in TOKEN_LEVEL}
        out[name] = view
    return out


def test_from_pooled_gives_measures_numbers_from_the_same_pooled_vectors(tmp_path):
    measured = effdepth.measure(
        tiny_model("gpt2"),
        TEXT,
        tokenizer=byte_tokenizer(),
        seq_len=48,
        num_seqs=24,
        passage_split="paragraphs",
        views="default,length,top1pc",
        bootstrap=30,
        progress=False,
    )
    measured.save(tmp_path / "run")
    store = PooledStore.open(tmp_path / "run" / "pooled")
    pooled = np.asarray(store.arrays()["default"])
    again = effdepth.from_pooled(pooled, lengths=store.lengths, views="default,length,top1pc", bootstrap=30)
    assert pooled_numbers(again.to_dict()["views"]) == pooled_numbers(measured.to_dict()["views"])
    for sim, views in measured.to_dict()["similarities"].items():
        assert pooled_numbers(again.to_dict()["similarities"][sim]) == pooled_numbers(views)
    for sim in ("cka", "cka-debiased"):
        assert again.extras["confounds"][sim]["length"] == measured.extras["confounds"][sim]["length"]
    assert again.extras["sample_size"] == measured.extras["sample_size"]
    assert "drop-pos0" in again.extras["confounds"]["notes"]  # its pooling needs the tokens
    as_list = effdepth.from_pooled([torch.from_numpy(layer) for layer in pooled], bootstrap=0)
    assert as_list.default.deff == pytest.approx(measured.default.deff, abs=1e-12)


@pytest.mark.parametrize(
    "pooled, lengths, message",
    [
        (np.ones((4, 3, 8)), None, "3 passage(s)"),
        (np.ones((1, 8, 4)), None, "1 state(s)"),
        ([np.ones((8, 4)), np.ones((8, 5))], None, "state 1 is 8 x 5 where state 0 is 8 x 4"),
        (np.where(np.arange(96).reshape(3, 8, 4) == 50, np.nan, 1.0), None, "state 1 holds non-finite values"),
        (np.ones((3, 8, 4)), np.ones(7, dtype=int), "lengths must be one whole token count"),
        (np.ones((3, 8)), None, "(L+1, N, d)"),
    ],
)
def test_bad_pooled_vectors_are_one_line(pooled, lengths, message):
    with pytest.raises(EffdepthError) as caught:
        effdepth.from_pooled(pooled, lengths=lengths)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_view_that_pools_otherwise_is_refused_in_one_line():
    with pytest.raises(EffdepthError, match="only the mean pooled vectors were given"):
        effdepth.from_pooled(np.random.default_rng(0).normal(size=(3, 8, 4)), views="token-norm")


def test_from_states_in_passage_mode_pools_each_row_as_measure_does():
    g = torch.Generator().manual_seed(4)
    states = torch.randn(4, 12, 7, 8, dtype=torch.float64, generator=g).cumsum(0)
    mask = torch.ones(12, 7, dtype=torch.long)
    mask[2, 5:] = 0
    r = effdepth.from_states(states, mask=mask, pooling="mean", views="default,drop-pos0", bootstrap=20)
    acc = effdepth.Accumulator("default,drop-pos0", bootstrap=20)
    acc.update(states, mask=mask)
    assert r.passages and r.to_dict()["views"] == acc.result().to_dict()["views"]
    real = mask.to(torch.float64)
    means = (states * real[None, :, :, None]).sum(2) / real.sum(1)[None, :, None]  # numpy-free pooling by hand
    again = effdepth.from_pooled(means.to(torch.float32).numpy(), lengths=real.sum(1).long().numpy(), bootstrap=20)
    assert again.default.deff == pytest.approx(r.default.deff, rel=1e-6)
    assert r.extras["confounds"]["cka"]["drop-pos0"]["deff"] == pytest.approx(r.views["drop-pos0"].deff, abs=1e-6)
