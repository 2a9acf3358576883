"""Does a result reproduce the paper (docs/method.md#claims)? A result's section in every report."""

from __future__ import annotations

from effdepth.report.content.model import TERMS, Cell, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.report.wording import PAPER_ABSTRACT, PAPER_NOTE, carry_text
from effdepth.results.result import Result
from effdepth.results.verdicts import (
    CLAIMS,
    Comparison,
    check_claims,
    claim_tests,
    verdict_grid,
)


def claims_table(result: Result) -> Table:
    """Does it reproduce the paper? One row per claim of the abstract, one column per similarity
    (holds / fails / not measured), the abstract's own statement last (docs/method.md#claims).

    >>> import effdepth, torch
    >>> t = claims_table(effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20))
    >>> t.header, len(t.rows)
    (['#', 'claim', 'cka', 'cka-debiased', "paper's abstract"], 6)
    """
    sims = list(result.similarities)
    grid = verdict_grid(check_claims(result))
    rows = []
    for i, (name, claim, _) in enumerate(CLAIMS, start=1):
        rows.append(
            [Cell(str(i), sort=i), Cell(claim)]
            + [Cell(grid[name][s].status) for s in sims]
            + [Cell(PAPER_ABSTRACT[name])]
        )
    tests = " ".join(f"({i}) {test}." for i, (_, test) in enumerate(claim_tests(result), start=1))
    carry = carry_text(result.extras)
    return Table(
        ["#", "claim"] + sims + ["paper's abstract"],
        rows,
        [True, False] + [False] * len(sims) + [False],
        note=f"{tests} A claim holds when the whole interval lies on the stated side; without an interval it is "
        "not measured. " + (f"Measured with {carry}. " if carry else "") + PAPER_NOTE,
    )


def claims_evidence(result: Result) -> list:
    """The numbers behind every verdict of :func:`claims_table`, one line each.

    >>> import effdepth, torch
    >>> same = torch.randn(1, 8, 8, 16).repeat(4, 1, 1, 1)       # every layer alike: D_eff = 1 < F_N
    >>> claims_evidence(effdepth.from_states(same, bootstrap=20))[0].split(": ")[:3]
    ['(1) cka', 'holds', 'default']
    """
    number = {name: i for i, (name, _, _) in enumerate(CLAIMS, start=1)}
    sims = list(result.similarities)
    # Claim by claim, as the table reads; similarities in the table's order within each.
    verdicts = sorted(check_claims(result), key=lambda v: (number[v.claim], sims.index(v.similarity)))
    return [f"({number[v.claim]}) {v.similarity}: {verdict_evidence(v)}" for v in verdicts]


def verdict_evidence(v) -> str:
    """A verdict's comparisons, terms and reason in words.

    >>> from effdepth.results.verdicts import Verdict
    >>> verdict_evidence(Verdict("not-pos0", "cka", "not measured", reason="no drop-pos0 view"))
    'not measured: no drop-pos0 view'
    """
    parts = [comparison_text(c) for c in v.comparisons]
    if v.terms:
        parts.append("terms " + ", ".join(f"{label} {fmt(v.terms.get(k), signed=True)}" for k, label in TERMS))
    if v.reason:
        parts.append(v.reason)
    return f"{v.status}: " + "; ".join(parts)


def comparison_text(c: Comparison) -> str:
    """``"view: left value [interval] below right limit [interval]"``.

    >>> comparison_text(Comparison("default", "D_eff", 1.2, [1.1, 1.3], "below", "F_N", 1.5, None, True))
    'default: D_eff 1.200 [1.100, 1.300] below F_N 1.500: yes'
    """

    def side(value, lo_hi):
        return f"{fmt(value, signed=c.left.startswith('correlated'))} {fmt_interval(lo_hi)}".strip()

    verdict = {True: "yes", False: "no", None: "undecided"}[c.holds]
    limit = "" if c.right == "0" else f" {side(c.limit, c.limit_interval)}"  # a constant needs no second spelling
    return f"{c.view}: {c.left} {side(c.value, c.interval)} {c.relation} {c.right}{limit}: {verdict}"
