"""What ``effdepth claims`` prints."""

from __future__ import annotations

from effdepth.report.content.claims import claims_evidence, claims_table
from effdepth.report.content.compare import table2_section
from effdepth.report.content.confounds import confound_warnings, confounds_comparison_table
from effdepth.report.content.model import Cell, Table
from effdepth.report.numbers import fmt
from effdepth.report.plain import table_text
from effdepth.report.sources import result_label
from effdepth.report.wording import PAPER_ABSTRACT, PAPER_NOTE, carry_text
from effdepth.results.result import Result
from effdepth.results.verdicts import (
    CLAIM_NAMES,
    CLAIMS,
    FAILS,
    HOLDS,
    NOT_MEASURED,
    check_claims,
    claim_tests,
    verdict_grid,
)


def claims_text(result: Result, label: str | None = None) -> str:
    """``effdepth claims`` of one result: what was measured, the verdicts, the numbers behind each, the paper.

    >>> import effdepth, torch
    >>> claims_text(effdepth.from_states(torch.randn(4, 8, 8, 16))).splitlines()[0][:30]
    'Does states reproduce the pape'
    """
    c = result.config
    carry = carry_text(result.extras)
    what = [f"similarities {', '.join(result.similarities)}"]
    if c.get("seq_len"):
        what.append(f"{c.get('num_seqs')} x {c['seq_len']} tokens")
    if carry:
        what.append(carry)
    lines = [
        f"Does {label or result_label(result)} reproduce the paper? ({'; '.join(what)}; docs/method.md#claims)",
        "",
        table_text(claims_table(result), note=False),
        "",
        "what each claim checks:",
    ]
    lines += [f"({i}) {name}: {test}" for i, (name, test) in enumerate(claim_tests(result), start=1)]
    lines += ["", "the numbers behind each verdict (an inequality holds when the whole interval is on its side):"]
    lines += claims_evidence(result)
    lines += ["", PAPER_NOTE]
    return "\n".join(lines)


def claims_sweep_text(entries: list, failed: list = ()) -> str:
    """``effdepth claims`` of several results (``(label, Result)``), and the ``failed`` ``(model, error)``.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20)
    >>> claims_sweep_text([("a", r), ("b", r)]).splitlines()[0].split()[:4]
    ['model', 'similarity', '(1)', '(2)']
    """
    lines = [
        table_text(verdicts_table(entries)),
        "",
        "claims: " + "; ".join(f"({i}) {claim}" for i, (_, claim, _) in enumerate(CLAIMS, start=1)),
        "",
        f"models for which each claim holds ({len(entries)} result{'' if len(entries) == 1 else 's'}; n.m. = not measured):",
        table_text(tally_table(entries)),
        "",
        PAPER_NOTE,
    ]
    if failed:
        lines += ["", f"not checked: {len(failed)} model(s) the sweep could not measure:"]
        lines += [f"  {model}: {error}" for model, error in failed]
    lines += ["", "effdepth claims RESULT (one result.json) prints the numbers behind each verdict."]
    return "\n".join(lines)


def passage_comparison_text(entries: list) -> str:
    """The passage-mode results among ``entries`` (``(label, Result)``) in the layout of the paper's Table 2,
    the paper's row beside ours, under its heading; ``""`` when none is in passage mode."""
    section = table2_section(entries)
    if section is None:
        return ""
    parts = [f"{section.heading}:\n{table_text(section.table)}"]
    controls = confounds_comparison_table(entries)
    if controls is not None:
        parts.append(f"Confounds, position 0 and passage length (D_eff / F_L):\n{table_text(controls)}")
    warnings = [f"{label}: {line}" for label, result in entries for line in confound_warnings(result)]
    return "\n\n".join(parts + (["\n".join(warnings)] if warnings else []))


def verdicts_table(entries: list) -> Table:
    """One row per result (``(label, Result)``) and similarity, one column per claim.

    >>> import effdepth, torch
    >>> same = torch.randn(1, 8, 8, 16).repeat(4, 1, 1, 1)       # every layer alike: D_eff = 1 < F_N
    >>> r = effdepth.from_states(same, bootstrap=20)
    >>> [c.text for c in verdicts_table([("a", r)]).rows[0][:3]]
    ['a', 'cka', 'holds']
    """
    rows = []
    for label, result in entries:
        grid = verdict_grid(check_claims(result))
        rows += [
            [Cell(label), Cell(sim)] + [Cell(grid[n][sim].status) for n in CLAIM_NAMES] for sim in result.similarities
        ]
    header = ["model", "similarity"] + [f"({i})" for i in range(1, len(CLAIM_NAMES) + 1)]
    return Table(header, rows, [False] * len(header))


def tally_table(entries: list) -> Table:
    """Per claim and similarity, for how many of the results (``(label, Result)``) it holds, beside the
    paper's abstract.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20)
    >>> tally_table([("a", r), ("b", r)]).header
    ['claim', 'cka', 'cka-debiased', "paper's abstract (16 models)"]
    """
    grids = [(result, verdict_grid(check_claims(result))) for _, result in entries]
    sims = list(dict.fromkeys(sim for result, _ in grids for sim in result.similarities))
    rows = []
    for i, (name, claim, _) in enumerate(CLAIMS, start=1):
        cells = [Cell(_tally(name, sim, grids)) for sim in sims]
        rows.append([Cell(f"({i}) {claim}")] + cells + [Cell(PAPER_ABSTRACT[name])])
    header = ["claim"] + sims + ["paper's abstract (16 models)"]
    return Table(header, rows, [False] * len(header))


def _tally(name: str, sim: str, grids: list) -> str:
    verdicts = [(result, grid[name][sim]) for result, grid in grids if sim in result.similarities]
    held = [(result, v) for result, v in verdicts if v.status == HOLDS]
    unmeasured = sum(v.status == NOT_MEASURED for _, v in verdicts)
    cell = f"{len(held)} of {len(verdicts)}" + (f" ({unmeasured} n.m.)" if unmeasured else "")
    if name == "sub-reference" and held:
        gaps = [result.similarities[sim]["default"].gap_pct for result, _ in held]
        low, high = fmt(min(gaps), 0), fmt(max(gaps), 0)
        cell += f", {low}% below" if low == high else f", {low}-{high}% below"
    return cell


def pair_claims_text(comparisons: list) -> str:
    """ "B below A" judged on each pair of the paired comparisons (``(path, Comparison)``): holds when the paired
    interval of D_eff/F_L lies below 0, fails when above, not resolved when it holds 0."""
    from effdepth.studies.compare.report import primary, verdict

    lines = ["paired comparisons (B below A: the paired interval of D_eff/F_L, B minus A, lies below 0):"]
    for path, comparison in comparisons:
        sim = primary(comparison)
        for pair in comparison.pairs:
            a, b = comparison.label(pair.a), comparison.label(pair.b)
            d = pair.difference("ratio", "default", sim) if "default" in pair.differences.get(sim, {}) else None
            if d is None or d.get("interval") is None:
                status = NOT_MEASURED
            else:
                lo, hi = d["interval"]
                status = HOLDS if hi < 0 else FAILS if lo > 0 else "not resolved"
            lines.append(f"  {b} below {a}: {status} ({path.parent.name}; {verdict(comparison, pair)})")
    return "\n".join(lines)
