"""What the terminal prints (no plotting imports): report content (:mod:`.content`) written by
:mod:`.plain`, so the terminal, HTML and Markdown carry the same numbers.

- a result (``effdepth measure``, ``effdepth show``): :func:`result_summary_text`;
- anything saved (``effdepth show``): :func:`show_text`, a study as its kind says;
- the paper's claims (``effdepth claims``): :func:`claims_text`, :func:`claims_sweep_text`.
"""

from __future__ import annotations

from effdepth.report.content import result_content
from effdepth.report.content.facts import extras_table
from effdepth.report.plain import content_text, section_text, table_text
from effdepth.report.wording import carry_text
from effdepth.results.loading import KINDS, SavedStudy, kind_of
from effdepth.results.result import Result

# --------------------------------------------------------------------------- one result


def result_summary_text(result: Result) -> str:
    """Everything the terminal shows for a result, in either mode: headline, its mode's sections (token
    mode: views, references, the similarities side by side when several), extras. Each table says its
    similarity (and carry).

    >>> import effdepth, torch
    >>> "R_matched" in result_summary_text(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    True
    """
    return content_text(result_content(result), extras_table(result))


# --------------------------------------------------------------------------- effdepth show


def study_text(kind: str, record: dict) -> str:
    """The tables of a saved study (``null`` or ``prune``: what its JSON holds), as terminal text."""
    return "\n\n".join(section_text(s) for s in KINDS[kind].sections(SavedStudy(kind, record)))


def show_text(obj) -> str:
    """What ``effdepth show`` prints for anything :func:`effdepth.load` returns: a study as its kind
    says, a result in full.

    >>> import effdepth, torch
    >>> show_text(effdepth.from_states(torch.randn(3, 8, 4, 8))).startswith("model states")
    True
    """
    kind = kind_of(obj)
    if kind is None:
        return result_summary_text(obj)
    return "\n\n".join([kind.headline(obj)] + [section_text(s) for s in kind.sections(obj)])


# --------------------------------------------------------------------------- effdepth claims


def claims_text(result: Result, label: str | None = None) -> str:
    """``effdepth claims`` of one result: what was measured, the verdicts, the numbers behind each, the paper.

    >>> import effdepth, torch
    >>> claims_text(effdepth.from_states(torch.randn(4, 8, 8, 16))).splitlines()[0][:30]
    'Does states reproduce the pape'
    """
    from effdepth.report.content.claims import claims_evidence, claims_table
    from effdepth.report.sources import result_label
    from effdepth.report.wording import PAPER_NOTE
    from effdepth.results.verdicts import claim_tests

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
    """``effdepth claims`` of several results (a sweep): one row per model and similarity with the five
    verdicts, then per similarity how many models each claim holds for, next to the paper's abstract.

    ``entries`` are ``(label, Result)``; ``failed`` are ``(model, error)`` of models a sweep could not measure.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20)
    >>> claims_sweep_text([("a", r), ("b", r)]).splitlines()[0].split()[:4]
    ['model', 'similarity', '(1)', '(2)']
    """
    from effdepth.report.content.claims import tally_table, verdicts_table
    from effdepth.report.wording import PAPER_NOTE
    from effdepth.results.verdicts import CLAIMS

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
    from effdepth.report.content.compare import table2_section
    from effdepth.report.content.confounds import confound_warnings, confounds_comparison_table

    section = table2_section(entries)
    if section is None:
        return ""
    parts = [f"{section.heading}:\n{table_text(section.table)}"]
    controls = confounds_comparison_table(entries)
    if controls is not None:
        parts.append(f"Confounds, position 0 and passage length (D_eff / F_L):\n{table_text(controls)}")
    warnings = [f"{label}: {line}" for label, result in entries for line in confound_warnings(result)]
    return "\n\n".join(parts + (["\n".join(warnings)] if warnings else []))
