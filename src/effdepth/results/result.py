"""Results: every number a user sees, with where it came from.

A :class:`Result` holds one :class:`ViewResult` per view, the configuration and the provenance; it is
saved as JSON (never pickle), atomically.
"""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.files import finite, write_json_atomic
from effdepth.results.store import POOLED_DIR, place_pooled

SCHEMA = "effdepth.result/1"


@dataclass
class ViewResult:
    """All numbers of one view (docs/method.md#view-record), plus the totals they came from.

    ``ci`` (``None`` without a bootstrap) maps each scalar to ``[lo, hi]`` percentile bounds and each
    per-layer array to ``[lo array, hi array]``; ``nan_resamples`` counts resamples left out for a NaN.
    ``definition`` names the similarity, ``similarity`` is its N x N matrix. ``sequences`` entered the
    view, ``left_out`` were measured but left out; ``calibrated_sequences`` make the ``*_cal`` surrogates.
    The update fields and ``related`` are empty for a transformed view under kernel similarities alone
    (docs/method.md#no-cosine-summaries).
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
    definition: str = "frobenius"
    left_out: int = 0
    calibrated_sequences: int = 0
    #: Passage mode, CKA estimators: the updates' similarity matrix, D_eff of the updates (the update
    #: diagnostic, docs/method.md section 9) and their covariance norms.
    update_similarity: list = field(default_factory=list)
    update_deff: float | None = None
    update_sizes: list = field(default_factory=list)
    #: Passage mode: ``mean_b |f_l^b| / mean_b |h_{l-1}^b|`` per layer over the pooled vectors (interval in ci).
    update_norm_ratio: list = field(default_factory=list)
    #: Passage mode: D_eff, its reference and gap under other maximum lags, tapers and aggregations of the
    #: same similarity matrix (:mod:`effdepth.numerics.sensitivity`), intervals in ``ci["sensitivity.<key>.deff"]``.
    sensitivity: dict = field(default_factory=dict)

    @property
    def sub_reference(self) -> bool | None:
        """True when the whole interval of D_eff lies below F_N (None without interval)."""
        upper = (self.ci or {}).get("deff", [None, None])[1]
        if upper is None:
            return None
        return upper < self.reference


def view_results(summaries: dict) -> dict:
    """``{name: ViewResult}`` from :func:`effdepth.numerics.summary.view_summaries`' plain data."""
    return {name: ViewResult(name=name, **summary) for name, summary in summaries.items()}


@dataclass
class Result:
    """The outcome of :func:`effdepth.measure` or :func:`effdepth.from_states`.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16), bootstrap=0)
    >>> sorted(r.views)
    ['default']
    >>> round(r.views["default"].reference, 4)
    1.6
    """

    views: dict
    config: dict
    provenance: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)
    others: dict = field(default_factory=dict)
    unavailable: dict = field(default_factory=dict)
    #: Passage mode: the folder of the pooled vectors the numbers come from (:mod:`effdepth.results.store`).
    pooled: Path | None = field(default=None, compare=False, repr=False)

    @property
    def passages(self) -> bool:
        """Whether the measurement core analysed this result: its samples are passages (``pooling: mean``) or
        their tokens (``pooling: none`` with a ``reduction``). False only for token-mode files written before
        the token reduction (statistics summed over tokens), which load and show as they were saved."""
        return self.config.get("pooling", "none") == "mean" or "reduction" in self.config

    @property
    def token_samples(self) -> bool:
        """Whether each passage gave its tokens as samples (``--pooling none``) rather than its mean."""
        return "reduction" in self.config

    @property
    def default(self) -> ViewResult:
        """The first view (``default`` unless views were chosen otherwise)."""
        return next(iter(self.views.values()))

    @property
    def primary_similarity(self) -> str:
        """The similarity of :attr:`views`: the first one asked for."""
        return self.config["similarity"]

    @property
    def similarities(self) -> dict:
        """``{similarity: {view: ViewResult}}`` for every similarity computed, the primary first.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), similarity="cka,cosine")
        >>> list(r.similarities), r.view("default", similarity="cosine").definition
        (['cka', 'cka-debiased', 'cosine'], 'cosine')
        """
        return {self.primary_similarity: self.views, **self.others}

    def view(self, name: str, similarity: str | None = None) -> ViewResult:
        """One view's numbers under one similarity (default: the primary); a one-line error says why
        a pair is missing (not measured, or unavailable under that similarity)."""
        similarity = similarity or self.primary_similarity
        if similarity not in self.similarities:
            raise EffdepthError(
                f"this result has no {similarity} numbers; it has {', '.join(self.similarities)} "
                f"(measure with --similarity {similarity} or --similarity all)"
            )
        views = self.similarities[similarity]
        if name in views:
            return views[name]
        reason = self.unavailable.get(similarity, {}).get(name)
        if reason:
            raise EffdepthError(f"view {name!r} has no {similarity} value: {reason}")
        raise EffdepthError(f"no view {name!r} in this result; it has: {', '.join(views)}")

    def to_dict(self) -> dict:
        out = {
            "schema": SCHEMA,
            "config": self.config,
            "provenance": self.provenance,
            "views": {name: _view_dict(v) for name, v in self.views.items()},
            "extras": finite(self.extras),
        }
        if self.others:
            out["similarities"] = {
                sim: {name: _view_dict(v) for name, v in views.items()} for sim, views in self.others.items()
            }
        if self.unavailable:
            out["unavailable"] = self.unavailable
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Result":
        """The result ``data`` holds (:meth:`to_dict`'s form); it owns its config and provenance, so
        ``Result.from_dict(r.to_dict())`` is a copy that changes nothing of ``r``.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(3, 8, 4, 8), bootstrap=0)
        >>> twin = Result.from_dict(r.to_dict())
        >>> twin.provenance["model"]["id"] = "renamed"
        >>> r.provenance["model"].get("id") != "renamed"
        True
        """
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema != SCHEMA:
            refuse_newer(schema, SCHEMA, "this result")
            raise EffdepthError(f"not an effdepth result (schema {schema!r}, expected {SCHEMA!r})")
        try:
            config = copy.deepcopy(data["config"])
            primary = config["similarity"]
            if not isinstance(data["views"], dict) or not data["views"]:
                raise ValueError("the result has no views")
            provenance = data.get("provenance", {})
            if not isinstance(provenance, dict) or not isinstance(provenance.get("model", {}), dict):
                raise ValueError("its provenance does not say which model was measured")
            views = {name: _view_from_dict(v, primary) for name, v in data["views"].items()}
            others = {
                sim: {name: _view_from_dict(v, sim) for name, v in vs.items()}
                for sim, vs in (data.get("similarities") or {}).items()
            }
            return cls(
                views, config, copy.deepcopy(provenance), data.get("extras", {}), others, data.get("unavailable") or {}
            )
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise EffdepthError(
                f"damaged effdepth result ({type(exc).__name__}: {exc}); rerun the measurement"
            ) from None

    def save(self, path) -> Path:
        """Write JSON atomically: a crash never leaves a half-written file.

        ``path`` is a file, or a folder that gets ``result.json``.
        """
        path = Path(path)
        if path.suffix != ".json":
            path = path / "result.json"
        if self.pooled is not None:
            self.pooled = place_pooled(Path(self.pooled), path.parent / POOLED_DIR)
        write_json_atomic(path, self.to_dict())
        return path


def with_pooled(result: Result, path) -> Result:
    """A passage-mode result read from ``path`` (its ``result.json`` or folder) knows its pooled vectors."""
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    if result.passages and (folder / POOLED_DIR / "store.json").is_file():
        result.pooled = folder / POOLED_DIR
    return result


def _view_from_dict(v: dict, similarity: str) -> ViewResult:
    v = dict(v)
    v.pop("sub_reference", None)
    v.setdefault("definition", similarity)
    _check_view_fields(v)
    return ViewResult(**v)


def refuse_newer(schema, known: str, what: str) -> None:
    """A one-line error when ``schema`` is a later version of ``known`` (:func:`newer_schema`);
    ``what`` names the file.

    >>> refuse_newer("effdepth.result/2", SCHEMA, "r.json")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: r.json was written by a newer effdepth (schema 'effdepth.result/2'; this one reads 'effdepth.result/1'): upgrade effdepth (pip install -U effdepth) to read it
    """
    if newer_schema(schema, known):
        raise EffdepthError(
            f"{what} was written by a newer effdepth (schema {schema!r}; this one reads {known!r}): "
            "upgrade effdepth (pip install -U effdepth) to read it"
        )


def newer_schema(schema, known: str) -> bool:
    """Whether ``schema`` names a later version of the file format ``known`` (e.g. :data:`SCHEMA`):
    a file from a newer effdepth, to be told apart from a file that is not effdepth's at all.

    >>> newer_schema("effdepth.result/2", SCHEMA), newer_schema(SCHEMA, SCHEMA), newer_schema("other/9", SCHEMA)
    (True, False, False)
    """
    family, _, version = known.rpartition("/")
    if not isinstance(schema, str) or not schema.startswith(family + "/"):
        return False
    later = schema[len(family) + 1 :]
    return later.isdigit() and int(later) > int(version)


_NUMBERS = ("deff", "reference", "ratio", "gap_pct")
_COUNTS = ("num_states", "tokens", "sequences")


def _check_view_fields(v: dict) -> None:
    """What the tables, figures and claims read of a view, checked for its kind (a hand-edited or
    damaged file then fails in one line, not deep inside a table); ValueError when it is not.

    >>> _check_view_fields({"name": "default", "deff": "1.2"})
    Traceback (most recent call last):
    ...
    ValueError: view 'default': deff is str, not a number
    """
    name = v.get("name")

    def number(x) -> bool:
        return x is None or (isinstance(x, (int, float)) and not isinstance(x, bool))

    for key in _NUMBERS:
        if not number(v.get(key)):
            raise ValueError(f"view {name!r}: {key} is {type(v.get(key)).__name__}, not a number")
    for key in _COUNTS:
        if key in v and not (isinstance(v[key], int) and not isinstance(v[key], bool)):
            raise ValueError(f"view {name!r}: {key} is {type(v[key]).__name__}, not a whole number")
    profile = v.get("profile", [])
    if not isinstance(profile, list) or not profile or not all(number(x) for x in profile):
        raise ValueError(f"view {name!r}: profile is not a non-empty list of numbers")
    for key in ("attribution", "references"):
        values = v.get(key, {})
        if not isinstance(values, dict) or not all(number(x) for x in values.values()):
            raise ValueError(f"view {name!r}: {key} is not a table of numbers")


def _view_dict(v: ViewResult) -> dict:
    d = asdict(v)
    d["sub_reference"] = v.sub_reference
    return finite(d)
