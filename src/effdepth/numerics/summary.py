"""From a view's per-sequence statistics to every number it reports, as plain data.

This is the last numeric step: :mod:`effdepth.result` only stores what it
returns. Every view of one measurement resamples the same sequences, so
their intervals are comparable.
"""

from __future__ import annotations

import numpy as np

from .bootstrap import bootstrap_intervals, bootstrap_weights
from .cka import ViewUnavailable
from .metrics import full_metrics, similarity_matrix
from .similarities import get_similarity
from .similarity import decay_profile, deff
from .statistics import UnitStatistics

#: The totals kept in a result, so its numbers can be recomputed from it (the kernel ones when present).
KEPT_TOTALS = (
    "n",
    "gram_states",
    "gram_increments",
    "update_state_dot",
    "hsic",
    "update_hsic",
    "hsic_full",
    "cka_full_energy",
)


def view_summary(
    stats: UnitStatistics,
    *,
    similarity: str,
    include_embedding: bool,
    bootstrap: int = 0,
    seed: int = 0,
    weights: np.ndarray | None = None,
    label: str = "",
) -> dict:
    """Every number of one view (the fields of :class:`effdepth.result.ViewResult` but its name);
    ``label`` names it in warnings.

    >>> import torch
    >>> from effdepth.numerics.accumulate import token_set_statistics
    >>> units = UnitStatistics.from_units([token_set_statistics(torch.randn(4, 6, 8, dtype=torch.float64))])
    >>> s = view_summary(units, similarity="frobenius", include_embedding=False)
    >>> s["num_states"], s["reference"], s["ci"]
    (3, 1.5, None)
    """
    totals = stats.total()
    m = full_metrics(totals, similarity, include_embedding)
    ci = bootstrap_intervals(
        stats,
        similarity=similarity,
        include_embedding=include_embedding,
        resamples=bootstrap,
        seed=seed,
        weights=weights,
        label=label,
    )
    return {
        "deff": float(m["deff"]),
        "reference": float(m["reference"]),
        "ratio": float(m["ratio"]),
        "gap_pct": float(m["gap_pct"]),
        "num_states": int(m["similarity"].shape[-1]),
        "tokens": int(totals["n"]),
        "sequences": stats.units,
        "profile": as_list(m["profile"]),
        "similarity": as_list(m["similarity"]),
        "references": {k: float(m[f"reference_{k}"]) for k in ("init", "size", "matched")},
        "attribution": {k: float(m[k]) for k in ("initial_state", "size_imbalance", "correlated_updates")},
        # Empty for a transformed view measured under kernel similarities alone (no cosine sums kept).
        **{k: as_list(m[k]) if k in m else [] for k in ("update_cosine", "update_state_cosine", "update_energy")},
        "related": {k: as_list(v) for k, v in m.get("related", {}).items()},
        "reference_profiles": {k: as_list(v) for k, v in m["reference_profiles"].items()},
        "ci": ci,
        "statistics": {k: as_list(totals[k]) for k in KEPT_TOTALS if k in totals},
        "definition": similarity,
    }


def view_summaries(
    accumulator, *, similarity: str, include_embedding: bool, bootstrap: int, seed: int, calibrated=None
) -> tuple:
    """``({view name: summary}, {view name: reason unavailable})`` of one similarity, for every view
    of a :class:`~effdepth.numerics.streams.ViewAccumulator`.

    With ``calibrated`` (:class:`~effdepth.numerics.surrogate.CalibratedReferences`),
    each view's references gain ``structural_cal`` and ``matched_cal``: the
    D_eff of the surrogate streams through the same view and similarity.

    >>> import torch
    >>> from effdepth.numerics.streams import ViewAccumulator
    >>> acc = ViewAccumulator(["default", "pos0-only"], similarities=("cka",)); acc.update(torch.randn(3, 2, 5, 4))
    >>> done, unavailable = view_summaries(acc, similarity="cka", include_embedding=False, bootstrap=0, seed=0)
    >>> sorted(done), unavailable["pos0-only"][:40]
    (['default'], 'pos0-only keeps one token per sequence; ')
    """
    out, unavailable = {}, {}
    # One set of resamples over every unit (sequence, or pair under cka): views that kept them all
    # are paired; a view that left some out is resampled over its own.
    units = accumulator.bootstrap_units(similarity)
    weights = bootstrap_weights(units, bootstrap, seed) if bootstrap > 0 and units >= 2 else None
    for spec in accumulator.views:
        try:
            stats = accumulator.unit_statistics(spec, similarity)
        except ViewUnavailable as exc:
            unavailable[spec.name] = exc.reason
            continue
        summary = view_summary(
            stats,
            similarity=similarity,
            include_embedding=include_embedding,
            bootstrap=bootstrap,
            seed=seed,
            weights=weights if weights is not None and stats.units == weights.shape[1] else None,
            label=f"view {spec.name!r} ({similarity})",
        )
        summary["left_out"] = accumulator.left_out(spec, similarity)
        kind = get_similarity(similarity)
        if kind.sequences_per_unit:  # a cka unit is a pair of sequences
            summary["sequences"] = kind.sequences_per_unit * stats.units
        else:  # pooled into one unit: the count that matters is the real one
            summary["sequences"] = accumulator.sequences - summary["left_out"]
        if calibrated is not None and kind.calibrated:
            add_calibrated(
                summary,
                calibrated,
                spec,
                similarity=similarity,
                include_embedding=include_embedding,
                bootstrap=bootstrap,
                seed=seed,
                weights=weights,
            )
        out[spec.name] = summary
    return out, unavailable


CALIBRATED = {"structural": "structural_cal", "matched": "matched_cal"}


def add_calibrated(
    summary: dict,
    calibrated,
    spec,
    *,
    similarity: str,
    include_embedding: bool,
    bootstrap: int,
    seed: int,
    weights: np.ndarray | None,
) -> None:
    """Put the surrogate streams' D_eff (and intervals, and profiles) among a view's references."""
    for kind, name in CALIBRATED.items():
        try:
            stats = calibrated.unit_statistics(spec, similarity, kind=kind)
        except ViewUnavailable:
            continue
        sim = similarity_matrix(stats.total(), similarity, include_embedding)
        summary["references"][name] = float(deff(sim))
        summary["reference_profiles"][name] = as_list(decay_profile(sim))
        # The same resampled sequences as the real stream when it covers them all (paired intervals).
        paired = weights if weights is not None and weights.shape[1] == stats.units else None
        ci = bootstrap_intervals(
            stats,
            similarity=similarity,
            include_embedding=include_embedding,
            resamples=bootstrap,
            seed=seed + 1,
            weights=paired,
            deff_only=True,
            label=f"the {kind} surrogate of view {spec.name!r} ({similarity})",
        )
        if ci is not None and summary["ci"] is not None:
            summary["ci"][f"reference_{name}"] = ci["deff"]
    summary["calibrated_sequences"] = calibrated.measured_sequences


def as_list(x):
    """A float or nested list of floats, for JSON.

    >>> as_list(np.eye(2)), as_list(np.float64(2))
    ([[1.0, 0.0], [0.0, 1.0]], 2.0)
    """
    a = np.asarray(x, dtype=np.float64)
    return a.tolist() if a.ndim else float(a)
