"""Results of the residual-carry workflows (docs/method.md#residual-carry): numbers and files, no text, no figures.

:class:`InterventionResult` holds one full :class:`~effdepth.Result` per carry
value (``effdepth intervene``, :func:`effdepth.intervene`);
:class:`ExperimentResult` the per-checkpoint records of ``effdepth experiment
carry`` and their summary over seeds. Both are saved as JSON, atomically.
Their tables are in :mod:`effdepth.report.tables`, their figures in
:mod:`effdepth.report.figures_intervention` and
:mod:`effdepth.report.figures_experiment`.

>>> import effdepth, torch, tempfile
>>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
>>> load_intervention(ir.save(tempfile.mkdtemp())).layers
(1, 2, 3)
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.files import read_json, write_json_atomic
from effdepth.results.result import Result

INTERVENTION_SCHEMA = "effdepth.intervention/1"
EXPERIMENT_SCHEMA = "effdepth.experiment/1"
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


# --------------------------------------------------------------------------- in-model intervention


@dataclass
class InterventionResult:
    """One full :class:`~effdepth.Result` per carry value, and the table across them.

    ``results`` maps each lam (float, in the order given) to its result;
    ``layers`` are the 1-based blocks the carry was applied to.
    """

    carries: tuple
    layers: tuple
    results: dict
    config: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def rows(self, view: str | None = None) -> list:
        """One dict per lam: D_eff, its interval, F_N, ratio, references, loss, perplexity.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16))
        >>> InterventionResult((1.0,), (1, 2, 3), {1.0: r}).rows()[0]["lam"]
        1.0
        """
        return [intervention_row(lam, self.results[lam], view) for lam in self.carries]

    def to_dict(self) -> dict:
        return {
            "schema": INTERVENTION_SCHEMA,
            "carries": list(self.carries),
            "layers": list(self.layers),
            "config": self.config,
            "provenance": self.provenance,
            "table": {name: self.rows(name) for name in self._view_names()},
            "results": [
                {"lam": lam, "path": f"{carry_folder(lam)}/result.json", "result": self.results[lam].to_dict()}
                for lam in self.carries
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InterventionResult":
        if data.get("schema") != INTERVENTION_SCHEMA:
            raise EffdepthError(
                f"not an effdepth intervention (schema {data.get('schema')!r}, expected {INTERVENTION_SCHEMA!r})"
            )
        results = {float(r["lam"]): Result.from_dict(r["result"]) for r in data["results"]}
        return cls(
            tuple(float(c) for c in data["carries"]),
            tuple(data["layers"]),
            results,
            data.get("config", {}),
            data.get("provenance", {}),
        )

    def save(self, folder) -> Path:
        """Write ``carry-<lam>/result.json`` for each lam, then ``intervention.json``; returns the latter.

        Every file is written atomically; the summary comes last, so its
        presence means the whole set is there. The figure is written by
        :func:`effdepth.studies.intervene.save_intervention`.
        """
        folder = Path(folder)
        for lam in self.carries:
            self.results[lam].save(folder / carry_folder(lam) / "result.json")
        path = folder / "intervention.json"
        write_json_atomic(path, self.to_dict())
        return path

    def _view_names(self) -> list:
        return list(self.results[self.carries[0]].views)


def format_carry(lam: float) -> str:
    """The short form used in folder names and tables.

    >>> format_carry(1.0), format_carry(0.75)
    ('1', '0.75')
    """
    return f"{float(lam):g}"


def carry_folder(lam: float) -> str:
    """``carry-<lam>``, e.g. ``carry-0.75``.

    >>> carry_folder(1.0)
    'carry-1'
    """

    return f"carry-{format_carry(lam)}"


def intervention_row(lam: float, result: Result, view: str | None = None) -> dict:
    """The table row of one measured carry value.

    >>> import effdepth, torch
    >>> intervention_row(0.5, effdepth.from_states(torch.randn(4, 8, 8, 16)))["loss"] is None
    True
    """
    v = result.default if view is None else result.views[view]
    loss = (result.extras or {}).get("loss") or {}
    return {
        "lam": float(lam),
        "view": v.name,
        "deff": v.deff,
        "deff_ci": (v.ci or {}).get("deff"),
        "reference": v.reference,
        "ratio": v.ratio,
        "ratio_ci": (v.ci or {}).get("ratio"),
        **{f"reference_{k}": v.references[k] for k in ("init", "size", "matched")},
        "loss": loss.get("mean"),
        "perplexity": loss.get("perplexity"),
    }


def load_intervention(path) -> InterventionResult:
    """Load a saved intervention (``intervention.json`` or the folder holding it).

    >>> import effdepth, torch, tempfile
    >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16))
    >>> p = InterventionResult((1.0,), (1, 2, 3), {1.0: r}).save(tempfile.mkdtemp())
    >>> load_intervention(p).carries
    (1.0,)
    """
    return InterventionResult.from_dict(read_json(path, "intervention", "intervention.json"))


# --------------------------------------------------------------------------- trained experiment


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
        """One entry per (lam, step): for each quantity the mean, min and max over seeds.

        With one seed ``deff_ci`` is that run's bootstrap interval instead.
        """
        return summarise(self.records)

    def to_dict(self) -> dict:
        return {
            "schema": EXPERIMENT_SCHEMA,
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
        if not isinstance(data, dict) or data.get("schema") != EXPERIMENT_SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise EffdepthError(f"not an effdepth experiment (schema {schema!r}, expected {EXPERIMENT_SCHEMA!r})")
        try:
            return cls(dict(data["config"]), list(data["records"]), data.get("provenance", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise EffdepthError(
                f"damaged effdepth experiment ({type(exc).__name__}: {exc}); rerun the experiment"
            ) from None

    def save(self, folder) -> Path:
        """Write ``experiment.json`` atomically; returns its path.

        The figure is written by :func:`effdepth.studies.experiment.carry.save_experiment`.
        """
        path = Path(folder) / "experiment.json"
        write_json_atomic(path, _finite(self.to_dict()))
        return path


def load_experiment(path) -> ExperimentResult:
    """Load ``experiment.json`` (or the folder holding it).

    >>> import tempfile
    >>> p = ExperimentResult({"layers": 2}, []).save(tempfile.mkdtemp())
    >>> load_experiment(p.parent).config
    {'layers': 2}
    """
    path = Path(path)
    if path.is_dir():
        path = path / "experiment.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        raise EffdepthError(
            f"no readable experiment at {path}; pass experiment.json or the --out folder of a run"
        ) from None
    return ExperimentResult.from_dict(data)


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


def _finite(obj):
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
