"""What a report says about the first-token x length confound and the sample size of a passage-mode result
(docs/method.md#the-first-token-x-length-confound, #sample-size).
"""

from __future__ import annotations

from effdepth.numerics.views import CONTROLS
from effdepth.report.content.model import Cell, Section, Table, level
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.results.result import Result

#: What each row of the confounds table removes.
REMOVES = {
    "default": "nothing (the paper's pooling)",
    "drop-pos0": "position 0, whatever token it holds",
    "length": "what varies with token count n (1/n, log n)",
}
METHOD_LINK = "docs/method.md#the-first-token-x-length-confound"
OLDER = (
    "measured before the confound controls: effdepth analyse DIR adds the length control and the sample-size curve "
    "without a forward pass; the drop-pos0 control needs effdepth measure again"
)


def confounds(result: Result) -> dict | None:
    """The result's confounds table (``None`` for tokens as samples, an old token-mode result, or one measured before the controls)."""
    return (result.extras or {}).get("confounds") if result.passages else None


def lengths_text(result: Result) -> str | None:
    """The passage lengths in one line: min, quartiles, max and the share at --seq-len.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=0, progress=False)
    >>> lengths_text(r)
    'every passage 12 tokens'
    """
    d = (result.extras or {}).get("passage_lengths")
    if not d:
        return None
    if d["equal"]:
        return f"every passage {d['min']} tokens"
    share = (
        "" if d.get("share_at_seq_len") is None else f"; {100 * d['share_at_seq_len']:.0f}% at --seq-len {d['seq_len']}"
    )
    return (
        f"{d['min']} to {d['max']} tokens (quartiles {d['q1']:g} / {d['median']:g} / {d['q3']:g}, "
        f"{d['distinct']} distinct lengths{share})"
    )


def confounds_section(result: Result) -> Section | None:
    """Default and each control, one row each: D_eff / F_L [interval] and the paired difference to
    default [interval] under every similarity, and what the control removes."""
    table = confounds(result)
    if table is None:
        return None
    sims = [s for s in result.similarities if s in table]
    header = ["view", "removes"]
    for sim in sims:
        header += [f"{sim} D_eff", f"{sim} /F_L", f"{sim} minus default"]
    notes = table.get("notes") or {}
    rows = []
    for name in ("default", *CONTROLS):
        row = [Cell(name), Cell(REMOVES[name])]
        for sim in sims:
            entry = table[sim].get(name)
            if entry is None:
                row += [Cell("unavailable", reason=notes.get(name, "not measured")), Cell(""), Cell("")]
                continue
            row += [
                Cell(fmt(entry["deff"]), fmt_interval(entry.get("ci")), entry["deff"]),
                _ratio_cell(entry),
                Cell("-") if name == "default" else _difference_cell(entry),
            ]
        rows.append(row)
    extra = [table["length_is_default"]] if table.get("length_is_default") else []
    extra += [f"{name}: {why}" for name, why in notes.items()]
    note = (
        f"D_eff without the first position and with the passage length regressed out, beside the paper's pooling "
        f"[{level(result.default)}% bootstrap intervals; 'minus default' is paired: the same resamples]. A control "
        f"far from default means the first position or the length moves the number ({METHOD_LINK}). " + " ".join(extra)
    )
    return Section(
        "confounds: first position and passage length",
        Table(header, rows, [False, False] + [True] * (len(header) - 2), note=note.strip()),
    )


def sample_size_section(result: Result) -> Section | None:
    """D_eff on nested random subsamples of the passages (N/8, N/4, N/2) and on all N, under every CKA estimator."""
    curve = (result.extras or {}).get("sample_size") if result.passages else None
    sims = [s for s in result.similarities if curve and s in curve]
    if not sims:
        return None
    first = curve[sims[0]]["points"]
    header = ["passages", "fraction"] + [f"{sim} D_eff" for sim in sims] + [f"{sim} /F_L" for sim in sims]
    reference = result.default.reference
    rows = []
    for i, point in enumerate(first):
        row = [Cell(f"{point['passages']:,.0f}", sort=point["passages"]), Cell(point["fraction"])]
        cells = [_curve_cell(curve[sim]["points"][i]) for sim in sims]
        ratios = [_curve_cell(curve[sim]["points"][i], reference) for sim in sims]
        rows.append(row + cells + ratios)
    notes = " ".join(curve.get("notes") or [])
    note = (
        f"mean +- standard deviation over {curve['draws']} nested random draws of the bootstrap's units (seed "
        f"{curve['seed']}); N: the estimate with its interval. D_eff still moving between N/2 and N means more "
        f"passages would move it further. {notes}"
    )
    return Section("sample size", Table(header, rows, [True, False] + [True] * (len(header) - 2), note=note.strip()))


def _ratio_cell(entry: dict) -> Cell:
    return Cell(fmt(entry["ratio"]), fmt_interval(entry.get("ratio_ci")), entry["ratio"])


def _difference_cell(entry: dict) -> Cell:
    return Cell(fmt(entry["difference"], signed=True), fmt_interval(entry.get("difference_ci")), entry["difference"])


def _curve_cell(point: dict, reference: float | None = None) -> Cell:
    scale = reference or 1.0
    if point["deff"] is None:
        return Cell("-")
    value = point["deff"] / scale
    if point.get("interval"):
        return Cell(fmt(value), fmt_interval([x / scale for x in point["interval"]]), value)
    spread = "" if point.get("sd") is None else f"+- {fmt(point['sd'] / scale)}"
    return Cell(fmt(value), spread, value)


def confound_warnings(result: Result) -> list:
    """One line per control that moves D_eff outside the default's interval, and per estimator whose
    D_eff moved by more than its interval's half-width between N/2 and N passages.

    >>> from effdepth.results.result import Result
    >>> confound_warnings(Result(views={}, config={"pooling": "mean", "similarity": "cka"}))
    ['note: measured before the confound controls: effdepth analyse DIR adds the length control and the sample-size curve without a forward pass; the drop-pos0 control needs effdepth measure again']
    """
    if not result.passages:
        return []
    table = confounds(result)
    if table is None:
        return [] if result.token_samples else [f"note: {OLDER}"]
    out = []
    for name in CONTROLS:
        moved = [sim for sim in result.similarities if (table.get(sim) or {}).get(name, {}).get("outside")]
        if moved:
            sim = moved[0]
            entry, default = table[sim][name], table[sim]["default"]
            out.append(
                f"warning: {name} moves D_eff ({', '.join(moved)}) from {fmt(default['deff'])} to "
                f"{fmt(entry['deff'])}, outside default's interval {fmt_interval(default.get('ci'))}: "
                f"{'the first position' if name == 'drop-pos0' else 'the passage length'} confounds this number "
                f"({METHOD_LINK})"
            )
    curve = (result.extras or {}).get("sample_size") or {}
    for sim in result.similarities:
        last = (curve.get(sim) or {}).get("last_doubling") or {}
        if last.get("exceeds_half_width"):
            out.append(
                f"warning: D_eff ({sim}) moved by {fmt(last['moved'])} between N/2 and N passages, more than its "
                f"interval's half-width {fmt(last['half_width'])}: more passages (--num-seqs) would move it further"
            )
    return out


def confounds_comparison_table(entries: list) -> Table | None:
    """Several passage-mode results (``(label, Result)``), one row per result and similarity; ``None``
    when no result holds a confounds table.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=20, progress=False)
    >>> confounds_comparison_table([("a", r)]).header[:4]
    ['model', 'similarity', 'default /F_L', 'drop-pos0 /F_L']
    """
    rows = []
    for label, result in entries:
        table = confounds(result)
        for sim in (s for s in result.similarities if table and s in table):
            row = [Cell(label), Cell(sim)]
            for name in ("default", *CONTROLS):
                entry = table[sim].get(name)
                if entry is None:
                    row.append(Cell("unavailable", reason=(table.get("notes") or {}).get(name, "not measured")))
                    continue
                row.append(_ratio_cell(entry))
                if name != "default":
                    row.append(_difference_cell(entry))
            rows.append(row)
    if not rows:
        return None
    header = ["model", "similarity", "default /F_L"]
    for name in CONTROLS:
        header += [f"{name} /F_L", f"{name} minus default"]
    note = (
        "What each control removed: "
        + "; ".join(f"{name}: {REMOVES[name]}" for name in CONTROLS)
        + f". 'minus default': the paired difference of D_eff (the same resamples) ({METHOD_LINK})."
    )
    return Table(header, rows, [False, False] + [True] * (len(header) - 2), note=note)
