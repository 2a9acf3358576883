"""What the robustness tables of a result say (docs/method.md#sensitivity)."""

from __future__ import annotations

import numpy as np

from effdepth.numerics.sensitivity import LABELS, sensitivity_numbers, spearman
from effdepth.report.content.model import Cell, Table, interval, level
from effdepth.report.numbers import fmt
from effdepth.results.result import Result, ViewResult


def label(key: str, states: int | None = None) -> str:
    """A variant's row label; a maximum lag of at least N - 1 says it is the full lag here.

    >>> label("bartlett-max-lag-25", 18), label("parzen")
    ('Bartlett, max lag 25 (= full at N = 18)', 'Parzen, full lag')
    """
    text = LABELS.get(key, key)
    lag = key.rpartition("max-lag-")[2]
    if states is not None and "max-lag-" in key and lag.isdigit() and int(lag) >= states - 1:
        text += f" (= full at N = {states})"
    return text


def variant_numbers(v: ViewResult) -> tuple:
    """``({key: {"deff", "reference", "gap_pct"}}, with_intervals)``: what the result saved, or, for a result
    without it (an old token-mode result), the same forms of its saved similarity matrix, without intervals."""
    if v.sensitivity:
        return v.sensitivity, v.ci is not None
    computed = sensitivity_numbers(np.asarray(v.similarity, dtype=np.float64))
    return {k: {q: float(x) for q, x in numbers.items()} for k, numbers in computed.items()}, False


def sensitivity_table(result: Result, similarity: str | None = None, view: str = "default") -> Table | None:
    """One row per variant: D_eff [CI], D_eff/L, the variant's reference and the gap to it; None when the
    result has no such view."""
    sim = similarity or result.primary_similarity
    v = result.similarities.get(sim, {}).get(view)
    if v is None:
        return None
    numbers, intervals = variant_numbers(v)
    rows = []
    for key, n in numbers.items():
        ci_key = f"sensitivity.{key}.deff"
        rows.append(
            [
                Cell(label(key, v.num_states)),
                Cell(fmt(n["deff"]), interval(v, ci_key) if intervals else ""),
                Cell(fmt(n["deff"] / v.num_states)),
                Cell(fmt(n["reference"])),
                Cell(
                    fmt(n["gap_pct"], 1, signed=True), interval(v, f"sensitivity.{key}.gap_pct", 1) if intervals else ""
                ),
            ]
        )
    where = (
        f"[{level(v)}% bootstrap interval, the same resamples as D_eff]"
        if intervals
        else "(no intervals: computed from the saved similarity matrix)"
    )
    return Table(
        ["form", "D_eff", "D_eff/L", "reference", "gap %"],
        rows,
        [False, True, True, True, True],
        note=f"view {view}, similarity {sim}, N = {v.num_states} states {where}. Lag forms: "
        "N / (1 + 2 sum_{k<=K} w(k/N) P(k)); aggregations of the similarity matrix S: participation ratio "
        "(tr S)^2 / tr S^2, effective rank exp(entropy of its normalised eigenvalues), threshold count "
        "(eigenvalues covering 90% of tr S). Each form's reference is the same form on orthogonal equal "
        "updates (F_L for the Bartlett full lag); its gap is to that reference.",
    )


def ordering_table(entries: list, similarity: str | None = None, view: str = "default") -> Table | None:
    """Spearman correlation, over ``entries`` (``(label, Result)``), of the models' D_eff/L under each variant
    with D_eff/L under the Bartlett full lag; None with fewer than three results that have the view."""
    per_layer: dict = {}
    models = 0
    for _, result in entries:
        v = result.similarities.get(similarity or result.primary_similarity, {}).get(view)
        if v is None:
            continue
        models += 1
        for key, n in variant_numbers(v)[0].items():
            per_layer.setdefault(key, []).append(n["deff"] / v.num_states)
    if models < 3 or "bartlett" not in per_layer:
        return None
    rows = [
        [Cell(label(key)), Cell(fmt(spearman(values, per_layer["bartlett"])))]
        for key, values in per_layer.items()
        if key != "bartlett"
    ]
    return Table(
        ["form", "Spearman with Bartlett"],
        rows,
        [False, True],
        note=f"{models} results, view {view}: rank correlation of their D_eff/L under each form with "
        "D_eff/L under the paper's Bartlett full lag (the paper reports > 0.98 for its aggregations over "
        "thirteen models with L >= 16).",
    )
