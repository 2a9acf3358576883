"""The paper's claims judged on one saved result, as data (docs/method.md#claims).

Per similarity, each of the abstract's five claims and a sixth of ours (not a passage-length artefact)
is ``holds``, ``fails`` or ``not measured``, with the values and intervals behind it. An inequality holds
when the whole bootstrap interval lies on the stated side; without an interval, ``not measured``.
Reads only a :class:`~effdepth.results.result.Result`, so the report and ``effdepth claims`` share it.

>>> import effdepth, torch
>>> same = torch.randn(1, 4, 8, 16).repeat(5, 1, 1, 1)      # every layer alike: D_eff = 1, far below F_N
>>> r = effdepth.from_states(same, views="default,drop-pos0", bootstrap=50)
>>> {v.claim: v.status for v in check_claims(r) if v.claim != "correlated-updates"}
{'sub-reference': 'holds', 'not-pos0': 'holds', 'controls': 'not measured', 'calibrated': 'fails', 'not-length': 'holds'}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from effdepth.errors import EffdepthError
from effdepth.numerics.similarities import SIMILARITIES, find_similarity, specs

HOLDS, FAILS, NOT_MEASURED = "holds", "fails", "not measured"

#: ``(name, claim as the abstract makes it, what the check asks)``, in the method's order.
CLAIMS = (
    ("sub-reference", "sub-reference by default", "default view: the D_eff interval lies entirely below F_N"),
    (
        "correlated-updates",
        "not the initial state or update sizes",
        "default view: D_eff below R_matched (the correlated-updates interval above 0) and correlated updates the largest term",
    ),
    (
        "not-pos0",
        "not a position-0 artefact",
        "drop-pos0 (position 0 left out, whatever token it holds): the D_eff interval lies entirely below F_N",
    ),
    ("controls", "survives the controls", "token-norm or top1pc: the D_eff interval lies entirely below F_N"),
    (
        "calibrated",
        "below the calibrated reference",
        "default view: the D_eff interval lies entirely below R_matched_cal's (passage mode: and the debiased D_eff's below F_N)",
    ),
    (
        "not-length",
        "not a passage-length artefact",
        "length control (passage mode: each passage's token count regressed out): the D_eff interval lies entirely below F_N",
    ),
)
CLAIM_NAMES = tuple(name for name, _, _ in CLAIMS)


def structural_name(result) -> str:
    """The structural reference's name: F_L for every result of the measurement core (the paper's), F_N
    for an old token-mode result (N analysed states).

    >>> import effdepth, torch
    >>> structural_name(effdepth.from_states(torch.randn(4, 8, 6, 8), bootstrap=0))
    'F_L'
    """
    return "F_L" if getattr(result, "passages", False) else "F_N"


def claim_tests(result) -> list:
    """``[(name, what the check asks)]`` in ``result``'s wording (:func:`structural_name`)."""
    reference = structural_name(result)
    return [(name, test.replace("F_N", reference)) for name, _, test in CLAIMS]


#: Views the claims read; a result with none of them cannot be checked at all.
CLAIM_VIEWS = ("default", "drop-pos0", "token-norm", "top1pc", "length")

TERMS = ("initial_state", "size_imbalance", "correlated_updates")

RERUN = "rerun effdepth measure with --views paper"
NO_INTERVAL = (
    "no bootstrap interval (--bootstrap 0 or a single sequence); rerun with --bootstrap 1000 and several sequences"
)


@dataclass
class Comparison:
    """One inequality checked in one view: ``left`` (``value``, ``interval``) is ``relation``
    (``"below"`` or ``"above"``) ``right`` (``limit``, ``limit_interval``).

    ``holds`` is None when an interval it needs is missing.
    """

    view: str
    left: str
    value: float | None
    interval: list | None
    relation: str
    right: str
    limit: float | None
    limit_interval: list | None = None
    holds: bool | None = None


@dataclass
class Verdict:
    """One claim under one similarity: the status, the comparisons behind it, and why (when not measured).

    ``terms`` holds the three attribution terms for the correlated-updates claim.
    """

    claim: str
    similarity: str
    status: str
    comparisons: list = field(default_factory=list)
    reason: str = ""
    terms: dict | None = None


def check_claims(result) -> list:
    """Every claim under every similarity of ``result`` (similarity-major, claims in order).

    Never raises: what a result lacks makes a claim ``not measured`` (:func:`require_claim_views` refuses).

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(4, 8, 6, 8), bootstrap=0)
    >>> {v.status for v in check_claims(r)}
    {'not measured'}
    """
    out = []
    debiased = _companion_default(result)
    reference = structural_name(result)
    for sim, views in result.similarities.items():
        unavailable = {**control_notes(result), **(result.unavailable or {}).get(sim, {})}
        default = views.get("default")
        out += [
            _below_reference("sub-reference", sim, "default", default, unavailable, reference),
            _correlated_updates(sim, default, unavailable),
            _below_reference(
                "not-pos0", sim, "drop-pos0", control_view(result, sim, "drop-pos0"), unavailable, reference
            ),
            _controls(sim, views, unavailable, reference),
            _calibrated(sim, default, unavailable, debiased if _is_passage_kernel(sim, result) else None, reference),
            _below_reference("not-length", sim, "length", control_view(result, sim, "length"), unavailable, reference),
        ]
    return out


def control_view(result, sim: str, name: str):
    """A control's numbers under ``sim``: its view when the result holds one, else its row of the
    confounds table every passage-mode result holds (D_eff, interval, F_L), else None.

    >>> import effdepth, torch
    >>> control_view(effdepth.from_states(torch.randn(4, 8, 6, 8), bootstrap=0), "cka", "length").name
    'length'
    """
    view = result.similarities.get(sim, {}).get(name)
    if view is not None:
        return view
    row = ((result.extras or {}).get("confounds") or {}).get(sim, {}).get(name)
    default = result.similarities.get(sim, {}).get("default")
    if row is None or default is None:
        return None
    return SimpleNamespace(
        name=name,
        deff=row["deff"],
        reference=default.reference,
        ci=None if row.get("ci") is None else {"deff": row["ci"]},
    )


def control_notes(result) -> dict:
    """Why a confound control has no value, by control: the controls are about a passage's mean, so a
    result with tokens as samples (or an old token-mode result) has none.

    >>> import effdepth, torch
    >>> control_notes(effdepth.from_states(torch.randn(4, 8, 6, 8), bootstrap=0, pooling="none"))["length"]
    'the samples are tokens, not passage means: the confound controls of a mean do not apply'
    """
    if not getattr(result, "passages", False):
        return {"length": "an old token-mode result: statistics summed over tokens, no passage lengths"}
    if getattr(result, "token_samples", False):
        return {
            c: "the samples are tokens, not passage means: the confound controls of a mean do not apply"
            for c in ("drop-pos0", "length")
        }
    confounds = (result.extras or {}).get("confounds")
    if confounds is None:
        return {
            c: "measured before effdepth measured the confound controls; run effdepth analyse DIR to add them"
            for c in ("drop-pos0", "length")
        }
    return dict(confounds.get("notes") or {})


def _companion_default(result):
    """Passage mode: the default view under the similarity measured as a companion (the debiased estimator),
    which the calibrated claim of a CKA estimator must agree with (docs/method.md#claims)."""
    if not getattr(result, "passages", False):
        return None
    companion = next((s.name for s in specs() if s.companion_of), None)
    return result.similarities.get(companion, {}).get("default")


def _is_passage_kernel(sim: str, result) -> bool:
    """A passage-mode CKA estimator (the debiased check applies to it)."""
    spec = find_similarity(sim) if getattr(result, "passages", False) else None
    return spec is not None and spec.kernel


def verdict_grid(verdicts: list) -> dict:
    """``{claim: {similarity: Verdict}}``, claims in the method's order.

    >>> g = verdict_grid([Verdict("not-pos0", "cka", HOLDS)])
    >>> list(g), g["not-pos0"]["cka"].status
    (['sub-reference', 'correlated-updates', 'not-pos0', 'controls', 'calibrated', 'not-length'], 'holds')
    """
    grid = {name: {} for name in CLAIM_NAMES}
    for v in verdicts:
        grid[v.claim][v.similarity] = v
    return grid


def require_claim_views(result, where: str = "this result") -> None:
    """A one-line error when ``result`` has none of the views the claims read.

    >>> import effdepth, torch
    >>> require_claim_views(effdepth.from_states(torch.randn(4, 8, 6, 8), views="drop-pos0+top2pc"))
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: this result has none of the views the claims need (default, drop-pos0, token-norm, top1pc, length); it has drop-pos0+top2pc; rerun effdepth measure with --views paper
    """
    have = {name for views in result.similarities.values() for name in views}
    have |= {name for views in (result.unavailable or {}).values() for name in views}
    if not have & set(CLAIM_VIEWS):
        raise EffdepthError(
            f"{where} has none of the views the claims need ({', '.join(CLAIM_VIEWS)}); "
            f"it has {', '.join(sorted(have)) or 'no views'}; {RERUN}"
        )


# --------------------------------------------------------------------------- the checks


def _interval(view, key: str) -> list | None:
    ci = (view.ci or {}).get(key) if view is not None else None
    return list(ci) if ci and None not in ci else None


def _missing(claim: str, sim: str, name: str, unavailable: dict) -> Verdict:
    reason = unavailable.get(name)
    why = f"{name} has no {sim} value: {reason}" if reason else f"the result has no {name} view ({RERUN})"
    return Verdict(claim, sim, NOT_MEASURED, reason=why)


def _deff_below_reference(view, name: str, reference: str = "F_N") -> Comparison:
    """D_eff's whole interval below the structural reference (named ``reference``), an exact number."""
    ci = _interval(view, "deff")
    holds = None if ci is None else ci[1] < view.reference
    return Comparison(name, "D_eff", view.deff, ci, "below", reference, view.reference, None, holds)


def _status(comparisons: list) -> str:
    """Holds when any comparison holds (one comparison, or the controls' either/or); fails when
    every measured one fails; not measured when none could be decided."""
    known = [c.holds for c in comparisons if c.holds is not None]
    if not known:
        return NOT_MEASURED
    return HOLDS if any(known) else FAILS


def _below_reference(claim: str, sim: str, name: str, view, unavailable: dict, reference: str = "F_N") -> Verdict:
    if view is None:
        return _missing(claim, sim, name, unavailable)
    comparison = _deff_below_reference(view, name, reference)
    status = _status([comparison])
    return Verdict(claim, sim, status, [comparison], reason=NO_INTERVAL if status == NOT_MEASURED else "")


def _correlated_updates(sim: str, view, unavailable: dict) -> Verdict:
    if view is None:
        return _missing("correlated-updates", sim, "default", unavailable)
    terms = {k: view.attribution.get(k) for k in TERMS}
    term = terms["correlated_updates"]
    ci = _interval(view, "correlated_updates")
    # R_matched - D_eff > 0 in every resample: paired, tighter than comparing two intervals.
    above = None if ci is None else ci[0] > 0
    positive = Comparison("default", "correlated updates (R_matched - D_eff)", term, ci, "above", "0", 0.0, None, above)
    largest = all(term is not None and x is not None and term >= x for x in terms.values())
    if term is None:
        return Verdict(
            "correlated-updates", sim, NOT_MEASURED, [positive], f"the result has no attribution ({RERUN})", terms
        )
    if positive.holds is None:
        return Verdict("correlated-updates", sim, NOT_MEASURED, [positive], NO_INTERVAL, terms)
    status = HOLDS if positive.holds and largest else FAILS
    reason = (
        ""
        if largest
        else f"the largest term is {max((k for k in TERMS if terms[k] is not None), key=lambda k: terms[k]).replace('_', ' ')}"
    )
    return Verdict("correlated-updates", sim, status, [positive], reason, terms)


def _controls(sim: str, views: dict, unavailable: dict, reference: str = "F_N") -> Verdict:
    present = [n for n in ("token-norm", "top1pc") if n in views]
    if not present:
        reasons = [f"{n}: {unavailable[n]}" for n in ("token-norm", "top1pc") if n in unavailable]
        why = "; ".join(reasons) or f"the result has neither token-norm nor top1pc ({RERUN})"
        return Verdict("controls", sim, NOT_MEASURED, reason=why)
    comparisons = [_deff_below_reference(views[n], n, reference) for n in present]
    status = _status(comparisons)
    absent = [n for n in ("token-norm", "top1pc") if n not in views]
    reason = NO_INTERVAL if status == NOT_MEASURED else (f"{absent[0]} not measured" if absent else "")
    return Verdict("controls", sim, status, comparisons, reason)


def _calibrated(sim: str, view, unavailable: dict, debiased=None, reference: str = "F_N") -> Verdict:
    if view is None:
        return _missing("calibrated", sim, "default", unavailable)
    cal = (view.references or {}).get("matched_cal")
    if cal is None:
        spec = SIMILARITIES.get(sim)
        why = (
            f"{sim} has no calibrated reference"
            if (spec is not None and not spec.references) or sim == "cka-full"
            else "no calibrated reference (measured with --surrogate-seqs 0); "
            "rerun effdepth measure with --surrogate-seqs all"
        )
        return Verdict("calibrated", sim, NOT_MEASURED, reason=why)
    # The calibrated value is itself an estimate: the two intervals must not overlap.
    ci, cal_ci = _interval(view, "deff"), _interval(view, "reference_matched_cal")
    holds = None if ci is None or cal_ci is None else ci[1] < cal_ci[0]
    comparison = Comparison("default", "D_eff", view.deff, ci, "below", "R_matched_cal", cal, cal_ci, holds)
    comparisons = [comparison]
    if debiased is not None:  # passage mode: the debiased estimator must agree (docs/method.md#claims)
        unbiased = _deff_below_reference(debiased, "default", reference)
        unbiased.left = "D_eff (cka-debiased)"
        comparisons.append(unbiased)
    known = [c.holds for c in comparisons]
    status = NOT_MEASURED if None in known else HOLDS if all(known) else FAILS
    return Verdict("calibrated", sim, status, comparisons, reason=NO_INTERVAL if status == NOT_MEASURED else "")
