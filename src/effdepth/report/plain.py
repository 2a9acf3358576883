"""The terminal writer: report content (:mod:`.content`) as plain text."""

from __future__ import annotations

from pathlib import Path

from effdepth.report.content.model import Folded, ResultContent, Section, Table

#: The sections a terminal shows after a measurement, beside the headline and its warnings; ``effdepth
#: show DIR`` prints them all.
FIRST_SECTIONS = ("views", "confounds: first position and passage length", "sample size")


def render_table(header: list, rows: list, numeric: list | None = None) -> str:
    """A plain-text table: the columns flagged in ``numeric`` right-aligned (default: all but the first).

    >>> print(render_table(["a", "b"], [["x", "1.0"]]))
    a    b
    -  ---
    x  1.0
    """
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    numeric = numeric or [i > 0 for i in range(len(widths))]

    def line(row):
        return "  ".join(
            str(x).rjust(w) if numeric[i] else str(x).ljust(w) for i, (x, w) in enumerate(zip(row, widths))
        ).rstrip()

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def table_text(table: Table, note: bool = True) -> str:
    """The table with each interval after its value; the reason of each cell without a value listed under
    it (once per row and reason), the legend, then the note.

    >>> from effdepth.report.content import Cell
    >>> t = Table(["view", "D_eff"], [[Cell("default"), Cell("1.250", "[1.1, 1.4]")], [Cell("pos0-only"), Cell("unavailable", reason="one token")]],
    ...           [False, True], "note")
    >>> print(table_text(t))
    view                  D_eff
    ---------  ----------------
    default    1.250 [1.1, 1.4]
    pos0-only       unavailable
    pos0-only: unavailable: one token
    note
    """
    rows = [[f"{c.text} {c.ci}".strip() for c in row] for row in table.rows]
    lines = [render_table(table.header, rows, numeric=table.numeric)]
    reasons = {f"{row[0].text}: {c.text}: {c.reason}": None for row in table.rows for c in row if c.reason}
    lines += list(reasons) + table.legend
    if note and table.note:
        lines.append(table.note)
    return "\n".join(lines)


def section_text(section: Section, note: bool = True) -> str:
    """A section: its title and context, then its table (the table alone without a title).

    >>> from effdepth.report.content import Cell
    >>> print(section_text(Section("views", Table(["view"], [[Cell("default")]]), context="similarity cka")))
    views, similarity cka:
    view
    -------
    default
    """
    table = table_text(section.table, note)
    return f"{section.label}:\n{table}" if section.label else table


def content_text(content: ResultContent, extras: Table | None = None) -> str:
    """Everything the terminal shows of one result: the headline lines, each section, then the extra
    measurements (``extras``) when there are any."""
    parts = ["\n".join(content.headline)] + [section_text(s) for s in content.sections]
    if extras is not None:
        parts.append(table_text(extras))
    return "\n\n".join(parts)


def first_text(content: ResultContent, folder: Path) -> str:
    """What a terminal shows after a measurement: the headline with its warnings and the first sections
    (:data:`FIRST_SECTIONS`) without their notes, then where the rest is."""
    first = [s for s in content.sections if s.title in FIRST_SECTIONS]
    rest = [s.title for s in content.sections if s.title not in FIRST_SECTIONS]
    parts = ["\n".join(content.headline)] + [section_text(s, note=False) for s in first]
    more = f" and {len(rest)} more ({'; '.join(rest)})" if rest else ""
    parts.append(
        f"effdepth show {folder} prints these tables with their notes{more}; --all adds the options and provenance"
    )
    return "\n\n".join(parts)


def facts_text(summary: list, groups: list) -> str:
    """The measurement's facts (``(label, value)`` pairs) and its provenance groups (``(group, pairs)``,
    :func:`~effdepth.report.content.facts.provenance_groups`), each a two-column table."""

    def pairs(rows) -> str:
        return render_table(
            ["key", "value"], [[k, v.full if isinstance(v, Folded) else v] for k, v in rows], [False, False]
        )

    parts = [f"facts:\n{pairs(summary)}"] + [f"{group}:\n{pairs(rows)}" for group, rows in groups]
    return "\n\n".join(parts)


def write_result(result, out: Path, *, figures: bool, note: str = "") -> None:
    """Save ``result`` in ``out``, print its first tables (:func:`first_text`), and write its figures."""
    from effdepth.report.content import result_content
    from effdepth.report.figures import remove_stale_figures, write_figures

    path = result.save(out)
    print(first_text(result_content(result), out))
    print(f"\nwrote {path}{note}")
    if figures:
        written = write_figures(result, out)  # also removes standard figures this result does not produce
        print(f"wrote {len(written)} figures to {out}/: {', '.join(sorted({p.stem for p in written}))} (.png, .pdf)")
    else:
        # Figures of an earlier result in this folder would now sit next to numbers they do not show.
        removed = remove_stale_figures(out)
        if removed:
            print(
                f"removed {len(removed)} figures of an earlier result in {out}/: {', '.join(sorted({p.name for p in removed}))}"
            )
