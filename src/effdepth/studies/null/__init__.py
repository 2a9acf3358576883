"""The random-weight null: the same architecture, randomly initialised, measured by the same protocol.

The paper (PAPER-PROTOCOL section 5) holds a trained model's D_eff/L against its architecture at
initialisation: what the residual stream's structure gives before any training.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from effdepth.errors import EffdepthError
from effdepth.measurement import run_measurement
from effdepth.options import Options, RunOptions
from effdepth.results.files import write_json_atomic
from effdepth.results.result import Result
from effdepth.studies.null.report import SCHEMA

NULL_FILE = "null.json"


@dataclass
class NullResult:
    """A trained measurement and its random-weight null (one :class:`Result` per seed)."""

    trained: Result
    seeds: list
    nulls: list
    config_sha256: str
    summary: dict = field(default_factory=dict)

    def record(self) -> dict:
        """What ``null.json`` holds (:func:`effdepth.load` reads it back)."""
        return {
            "schema": SCHEMA,
            "kind": "random-weight null",
            "model": self.trained.provenance.get("model", {}),
            "seeds": self.seeds,
            "config_sha256": self.config_sha256,
            "config": self.trained.config,
            "summary": self.summary,
            "results": {"trained": "trained", **{str(s): f"seed-{s}" for s in self.seeds}},
        }

    def save(self, folder) -> Path:
        """``trained/``, ``seed-<s>/`` (each a result folder) and ``null.json`` (the summary) under ``folder``."""
        folder = Path(folder)
        self.trained.save(folder / "trained")
        for seed, result in zip(self.seeds, self.nulls):
            result.save(folder / f"seed-{seed}")
        return write_json_atomic(folder / NULL_FILE, self.record())


def random_weight_null(options: Options, seeds, *, run: RunOptions | None = None) -> NullResult:
    """Measure ``options.load.model`` and, for each seed, its architecture with random weights (same options)."""
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise EffdepthError(f"--seeds must name at least one seed, each once (got {seeds}); e.g. --seeds 5 for 0..4")
    run = run or RunOptions()
    source, config, tokenizer = _architecture(options)
    trained = run_measurement(options, run)
    nulls = []
    for seed in seeds:
        model = random_model(config, seed)
        load = replace(options.load, model=model, tokenizer=tokenizer, revision=None)
        result = run_measurement(replace(options, load=load), replace(run, checkpoint=None, resume=False))
        result.provenance["model"] = {
            **trained.provenance.get("model", {}),
            "weights": f"random initialisation, seed {seed}",
            "init_seed": seed,
            "weights_sha256": weights_sha256(model),
        }
        nulls.append(result)
    sha = config_sha256(config)
    return NullResult(trained, seeds, nulls, sha, summarise(trained, nulls))


def parse_seeds(text: str) -> list:
    """``"3"`` -> ``[0, 1, 2]``; ``"4,7"`` -> ``[4, 7]``.

    >>> parse_seeds("3"), parse_seeds("4,7")
    ([0, 1, 2], [4, 7])
    """
    parts = [p.strip() for p in str(text).split(",")]
    if not all(p.isdigit() for p in parts):
        raise EffdepthError(
            f"--seeds {text!r} is not a count or a comma-separated list of whole numbers; e.g. --seeds 5"
        )
    if len(parts) == 1:
        if int(parts[0]) < 1:
            raise EffdepthError("--seeds 0 measures no null; give at least 1")
        return list(range(int(parts[0])))
    return [int(p) for p in parts]


def _architecture(options: Options):
    """The model's source, its config and its tokenizer, without loading weights."""
    from transformers import AutoConfig

    from effdepth.models.loading import load_tokenizer, locate_model, prepare_source

    load = options.load
    if isinstance(load.model, torch.nn.Module):
        config = getattr(load.model, "config", None)
        if config is None:
            raise EffdepthError(
                "the random-weight null needs a model with a transformers config; pass a Hugging Face "
                "id, folder or .gguf file"
            )
        return load.model, config, load.tokenizer
    source = prepare_source(locate_model(load.model, revision=load.revision, trust_remote_code=load.trust_remote_code))
    kwargs = {k: v for k, v in source.kwargs.items() if k in ("revision", "trust_remote_code", "gguf_file")}
    config = AutoConfig.from_pretrained(source.location, **kwargs)
    tokenizer = load.tokenizer if load.tokenizer is not None else load_tokenizer(source)
    return source, config, tokenizer


def random_model(config, seed: int):
    """The architecture of ``config`` with weights drawn by its own initialiser under ``seed`` (eval mode)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def weights_sha256(model) -> str:
    """sha256 of every parameter's bytes, in order: two seeds give different weights."""
    import hashlib

    digest = hashlib.sha256()
    for p in model.parameters():
        digest.update(p.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def config_sha256(config) -> str:
    """sha256 of the config as JSON, without transformers' version stamp."""
    import hashlib
    import json

    values = {k: v for k, v in config.to_dict().items() if k != "transformers_version"}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def summarise(trained: Result, nulls: list) -> dict:
    """Per similarity: the trained D_eff/L and D_eff/F_L, and the nulls' mean and sample sd of both."""
    out = {}
    for sim in trained.similarities:
        t = trained.view("default", sim) if "default" in trained.similarities[sim] else None
        if t is None:
            continue
        per_layer = [r.view("default", sim).deff / r.view("default", sim).num_states for r in nulls]
        ratios = [r.view("default", sim).ratio for r in nulls]
        out[sim] = {
            "trained_deff_per_layer": t.deff / t.num_states,
            "trained_ratio": t.ratio,
            "null_deff_per_layer_mean": _mean(per_layer),
            "null_deff_per_layer_sd": _sd(per_layer),
            "null_ratio_mean": _mean(ratios),
            "null_ratio_sd": _sd(ratios),
            "seeds": len(nulls),
            "null_deff_per_layer": per_layer,
            "null_ratio": ratios,
        }
    return out


def _mean(values: list) -> float:
    return sum(values) / len(values)


def _sd(values: list) -> float:
    if len(values) < 2:
        return float("nan")
    m = _mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
