"""Results to report on, made once per session: a tiny real run and synthetic states."""

import math
from pathlib import Path

import pytest
import torch

import effdepth
from effdepth.models.tiny import tiny_model

OLD_TOKEN_RESULT = Path(__file__).parents[2] / "data" / "token-mode-result.json"


@pytest.fixture(scope="session")
def tiny_result():
    """A real (tiny, random) Llama: every paper view, with bootstrap intervals."""
    torch.manual_seed(0)
    return effdepth.measure(
        tiny_model("llama"), torch.randint(0, 256, (16, 16)), views="paper", bootstrap=100, progress=False
    )


@pytest.fixture(scope="session")
def tiny_token_result():
    """An old token-mode result (statistics summed over tokens), as the version before the token reduction
    saved it: a tiny Llama, views default and top1pc, cka and frobenius, 50 resamples."""
    return effdepth.load(OLD_TOKEN_RESULT)


@pytest.fixture(scope="session")
def synthetic_result():
    """A random walk over 30 layers (as many as SmolLM2): ticks and markers must stay readable."""
    g = torch.Generator().manual_seed(1)
    states = torch.randn(31, 16, 12, 32, generator=g).cumsum(0)
    return effdepth.from_states(states, views="default,drop-pos0,token-norm", bootstrap=100)


@pytest.fixture(scope="session")
def bare_result():
    """One view, no bootstrap (``ci is None``), the embedding included (layers 0..L)."""
    g = torch.Generator().manual_seed(2)
    return effdepth.from_states(torch.randn(7, 8, 10, 16, generator=g).cumsum(0), include_embedding=True, bootstrap=0)


@pytest.fixture(scope="session")
def gappy_result(tmp_path_factory, tiny_token_result):
    """Non-finite values saved as null in the JSON, then loaded back: plotted as gaps (an old token-mode result,
    whose views keep the per-layer update summary)."""
    r = effdepth.Result.from_dict(tiny_token_result.to_dict())
    v = r.views["default"]
    v.update_energy[0] = math.nan
    v.update_energy[1] = 0.0  # cannot be shown on a log axis either
    v.update_state_cosine[2] = math.inf
    v.related["block_influence"][1] = math.nan
    v.similarity[0][1] = math.nan
    v.profile[1] = math.nan
    r.views["top1pc"].ratio = math.nan
    r.views["top1pc"].ci["ratio"] = [math.nan, 1.0]
    v.ci["correlated_updates"] = [math.nan, 0.1]
    r.extras["loss"] = {"mean": 2.25, "perplexity": math.exp(2.25), "tokens": 96}
    path = r.save(tmp_path_factory.mktemp("gappy"))
    loaded = effdepth.load(path)
    assert loaded.views["default"].update_energy[0] is None  # the premise: JSON null, not NaN
    return loaded


@pytest.fixture(scope="session")
def saved(tmp_path_factory, tiny_result, tiny_token_result, synthetic_result, bare_result):
    """The results saved as ``<root>/<name>/result.json``; returns ``{name: folder}``."""
    root = tmp_path_factory.mktemp("results")
    out = {}
    for name, r in {"tiny": tiny_result, "synthetic": synthetic_result, "bare": bare_result}.items():
        out[name] = r.save(root / name).parent
    # apart, so that a report over ``root`` holds exactly the three above
    out["tiny-token"] = tiny_token_result.save(tmp_path_factory.mktemp("token") / "tiny-token").parent
    return out


#: What each measurement of :func:`option_runs` changes from ``windows`` (its first).
OPTION_RUNS = {
    "windows": {},
    "paragraphs": {"passage_split": "paragraphs"},
    "seeded": {"seed": 3, "bootstrap": 30},
    "many": {
        "passage_split": "paragraphs",
        "seed": 5,
        "bootstrap": 12,
        "bos": "always",
        "views": "default,drop-pos0,token-norm",
        "similarity": "cka,cosine",
        "bootstrap_units": 4,
        "include_embedding": True,
    },
}


@pytest.fixture(scope="session")
def option_runs(tmp_path_factory):
    """One tiny model (byte tokenizer) measured on one text file under the options of :data:`OPTION_RUNS`,
    each saved as ``<root>/<name>/result.json``; returns ``{name: folder}``."""
    from effdepth.data import byte_tokenizer

    root = tmp_path_factory.mktemp("options")
    model = root / "model"
    tiny_model("llama").save_pretrained(model)
    byte_tokenizer().save_pretrained(model)
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(f"Paragraph {i}: " + "to be or not to be, " * (2 + i % 5) for i in range(40)))
    base = {"corpus": str(corpus), "seq_len": 48, "num_seqs": 8, "bootstrap": 20, "progress": False}
    out = {}
    for name, changes in OPTION_RUNS.items():
        out[name] = effdepth.measure(str(model), **{**base, **changes}).save(root / name).parent
    return out
