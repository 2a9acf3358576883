"""A report :class:`~effdepth.report.content.Table` as plain text, for the terminal.

The third writer beside :mod:`.html` and :mod:`.markdown`: the same table objects, so the terminal,
HTML and Markdown carry the same numbers.
"""

from __future__ import annotations

from .content import Table
from .tables import render_table


def table_text(table: Table) -> str:
    """The table with each interval after its value, numeric columns right-aligned, the note under it.

    >>> from effdepth.report.content import Cell
    >>> print(table_text(Table(["view", "D_eff"], [[Cell("default"), Cell("1.250", "[1.1, 1.4]")]], [False, True], "note")))
    view                D_eff
    -------  ----------------
    default  1.250 [1.1, 1.4]
    note
    """
    numeric = table.numeric or [i > 0 for i in range(len(table.header))]
    rows = [[f"{c.text} {c.ci}".strip() for c in row] for row in table.rows]
    text = render_table(table.header, rows, numeric=numeric)
    return f"{text}\n{table.note}" if table.note else text
