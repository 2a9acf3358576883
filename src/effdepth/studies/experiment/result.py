"""The record of a carry experiment, saved as ``experiment.json``.

>>> import effdepth, tempfile
>>> effdepth.load(ExperimentResult({"layers": 2}, []).save(tempfile.mkdtemp()).parent).config
{'layers': 2}
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.files import write_json_atomic
from effdepth.results.result import finite

SCHEMA = "effdepth.experiment/1"
SUMMARY_KEYS = (
    "deff",
    "ratio",
    "reference_init",
    "reference_size",
    "reference_matched",
    "loss",
    "perplexity",
    "train_loss",
    "norm_ratio",
)


@dataclass
class ExperimentResult:
    """Records (one per lam, seed, checkpoint), their summary over seeds, and where they came from.

    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "reference": 1.6, "deff_ci": [1.1, 1.3]}
    >>> ExperimentResult({}, [rec]).summary()[0]["deff"]
    {'mean': 1.2, 'min': 1.2, 'max': 1.2}
    """

    config: dict
    records: list
    provenance: dict = field(default_factory=dict)

    def summary(self) -> list:
        """One entry per (lam, step): :func:`summarise` of the records."""
        return summarise(self.records)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "config": self.config,
            "provenance": self.provenance,
            "records": self.records,
            "summary": self.summary(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "ExperimentResult":
        """The inverse of :meth:`to_dict` (the summary is recomputed from the records).

        >>> ExperimentResult.from_dict(ExperimentResult({"layers": 2}, []).to_dict()).config
        {'layers': 2}
        """
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise EffdepthError(f"not an effdepth experiment (schema {schema!r}, expected {SCHEMA!r})")
        try:
            return cls(dict(data["config"]), list(data["records"]), data.get("provenance", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise EffdepthError(
                f"damaged effdepth experiment ({type(exc).__name__}: {exc}); rerun the experiment"
            ) from None

    def save(self, folder) -> Path:
        """Write ``experiment.json`` atomically; returns its path."""
        path = Path(folder) / "experiment.json"
        write_json_atomic(path, finite(self.to_dict()))
        return path


def summarise(records: list) -> list:
    """Group records by (lam, step); each quantity gets ``{"mean", "min", "max"}`` over seeds.

    >>> recs = [{"lam": 1.0, "step": 5, "seed": s, "deff": d, "reference": 1.6, "deff_ci": None}
    ...         for s, d in ((0, 1.2), (1, 1.4))]
    >>> summarise(recs)[0]["deff"]
    {'mean': 1.3, 'min': 1.2, 'max': 1.4}
    """
    groups: dict = {}
    for r in records:
        groups.setdefault((r["lam"], r["step"]), []).append(r)
    out = []
    for (lam, step), rs in groups.items():
        entry = {"lam": lam, "step": step, "seeds": len(rs), "reference": rs[0]["reference"]}
        for key in SUMMARY_KEYS:
            if key in rs[0]:
                entry[key] = _spread([r.get(key) for r in rs])
        entry["deff_ci"] = rs[0].get("deff_ci") if len(rs) == 1 else None
        out.append(entry)
    return out


def summary_interval(entry: dict):
    """The D_eff interval of a :func:`summarise` entry: min-max over seeds, or one seed's bootstrap interval.

    >>> summary_interval({"seeds": 2, "deff": {"mean": 1.3, "min": 1.2, "max": 1.4}})
    [1.2, 1.4]
    >>> summary_interval({"seeds": 1, "deff": {"mean": 1.3, "min": 1.3, "max": 1.3}, "deff_ci": None}) is None
    True
    """
    if entry["seeds"] > 1:
        return [entry["deff"]["min"], entry["deff"]["max"]]
    return entry.get("deff_ci")


def _spread(values: list) -> dict:
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(float(np.mean(xs)), 15), "min": min(xs), "max": max(xs)}
