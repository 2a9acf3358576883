"""Results: every number a user sees, with where it came from.

A :class:`Result` holds one :class:`ViewResult` per view, the configuration
and the provenance (model, revision, corpus, seed, versions). It is saved as
JSON (never pickle), atomically.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .errors import EffdepthError
from .files import read_json
from .files import write_json_atomic as _write_json
from .numerics.bootstrap import bootstrap_intervals, bootstrap_weights
from .numerics.metrics import full_metrics
from .numerics.statistics import UnitStatistics

SCHEMA = "effdepth.result/1"


@dataclass
class ViewResult:
    """All numbers of one view (METHOD 3-4, 9), plus the totals they came from.

    ``ci`` maps each scalar (``deff``, ``ratio``, ``gap_pct``,
    ``reference_init``/``size``/``matched``, the attribution terms) and
    ``profile`` to ``[lo, hi]`` percentile bounds, or is ``None`` without a
    bootstrap.
    """

    name: str
    deff: float
    reference: float
    ratio: float
    gap_pct: float
    num_states: int
    tokens: int
    sequences: int
    profile: list
    similarity: list
    references: dict
    attribution: dict
    update_cosine: list
    update_state_cosine: list
    update_energy: list
    related: dict
    reference_profiles: dict
    ci: dict | None = None
    statistics: dict = field(default_factory=dict)

    @property
    def sub_reference(self) -> bool | None:
        """True when the whole interval of D_eff lies below F_N (None without interval)."""
        upper = (self.ci or {}).get("deff", [None, None])[1]
        if upper is None:
            return None
        return upper < self.reference


def view_result(
    name: str,
    stats: UnitStatistics,
    *,
    similarity: str,
    include_embedding: bool,
    bootstrap: int = 0,
    seed: int = 0,
    weights: np.ndarray | None = None,
) -> ViewResult:
    """Compute one view's result from its per-sequence statistics."""
    totals = stats.total()
    m = full_metrics(totals, similarity, include_embedding)
    ci = bootstrap_intervals(
        stats, similarity=similarity, include_embedding=include_embedding, resamples=bootstrap, seed=seed, weights=weights
    )
    return ViewResult(
        name=name,
        deff=float(m["deff"]),
        reference=float(m["reference"]),
        ratio=float(m["ratio"]),
        gap_pct=float(m["gap_pct"]),
        num_states=int(m["similarity"].shape[-1]),
        tokens=int(totals["n"]),
        sequences=stats.units,
        profile=_list(m["profile"]),
        similarity=_list(m["similarity"]),
        references={k: float(m[f"reference_{k}"]) for k in ("init", "size", "matched")},
        attribution={k: float(m[k]) for k in ("initial_state", "size_imbalance", "correlated_updates")},
        update_cosine=_list(m["update_cosine"]),
        update_state_cosine=_list(m["update_state_cosine"]),
        update_energy=_list(m["update_energy"]),
        related={k: _list(v) for k, v in m["related"].items()},
        reference_profiles={k: _list(v) for k, v in m["reference_profiles"].items()},
        ci=ci,
        statistics={k: _list(totals[k]) for k in ("n", "gram_states", "gram_increments", "update_state_dot")},
    )


def view_results(accumulator, *, similarity: str, include_embedding: bool, bootstrap: int, seed: int) -> dict:
    """Results of every view of a :class:`~effdepth.numerics.streams.ViewAccumulator`.

    All views resample the same sequences, so their intervals are comparable.
    """
    out = {}
    weights = None
    for spec in accumulator.views:
        stats = accumulator.unit_statistics(spec)
        if weights is None and bootstrap > 0 and stats.units >= 2:
            weights = bootstrap_weights(stats.units, bootstrap, seed)
        out[spec.name] = view_result(
            spec.name, stats, similarity=similarity, include_embedding=include_embedding, bootstrap=bootstrap, seed=seed, weights=weights
        )
    return out


@dataclass
class Result:
    """The outcome of :func:`effdepth.measure` or :func:`effdepth.from_states`.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 2, 8, 16), bootstrap=0)
    >>> sorted(r.views)
    ['default']
    >>> round(r.views["default"].reference, 4)
    1.6
    """

    views: dict
    config: dict
    provenance: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)

    @property
    def default(self) -> ViewResult:
        """The first view (``default`` unless views were chosen otherwise)."""
        return next(iter(self.views.values()))

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "config": self.config,
            "provenance": self.provenance,
            "views": {name: _view_dict(v) for name, v in self.views.items()},
            "extras": _finite(self.extras),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema != SCHEMA:
            raise EffdepthError(f"not an effdepth result (schema {schema!r}, expected {SCHEMA!r})")
        try:
            views = {}
            for name, v in data["views"].items():
                v = dict(v)
                v.pop("sub_reference", None)
                views[name] = ViewResult(**v)
            return cls(views=views, config=data["config"], provenance=data.get("provenance", {}), extras=data.get("extras", {}))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise EffdepthError(f"damaged effdepth result ({type(exc).__name__}: {exc}); rerun the measurement") from None

    def save(self, path) -> Path:
        """Write JSON atomically: a crash never leaves a half-written file.

        ``path`` is a file, or a folder that gets ``result.json``.
        """
        path = Path(path)
        if path.suffix != ".json":
            path = path / "result.json"
        write_json_atomic(path, self.to_dict())
        return path


def load(path) -> Result:
    """Load a saved result (a ``result.json`` or the folder holding it).

    >>> import effdepth, torch, tempfile
    >>> r = effdepth.from_states(torch.randn(4, 10, 8), bootstrap=0)
    >>> p = r.save(tempfile.mkdtemp())
    >>> effdepth.load(p).default.deff == r.default.deff
    True
    """
    return Result.from_dict(read_json(path, "result", "result.json"))


def write_json_atomic(path: Path, data) -> Path:
    """Write JSON atomically, converting numpy values; readers see old or new, never half."""
    return _write_json(path, data, default=_json_default)


def _view_dict(v: ViewResult) -> dict:
    d = asdict(v)
    d["sub_reference"] = v.sub_reference
    return _finite(d)


def _finite(obj):
    """JSON has no inf/nan: write them as null so the file stays standard."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def _list(x):
    a = np.asarray(x, dtype=np.float64)
    return a.tolist() if a.ndim else float(a)
