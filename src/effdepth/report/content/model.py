"""The report content model: the writers (terminal, HTML, Markdown) render these objects and nothing
else, so the three formats carry the same numbers; a cell without a value says why (``reason``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from effdepth.report.numbers import fmt, fmt_interval
from effdepth.results.result import ViewResult


@dataclass
class Cell:
    """One table cell: its text, an optional interval shown smaller, a sort key, a link, and for a
    cell without a value (``unavailable``) the reason."""

    text: str
    ci: str = ""
    sort: float | None = None
    href: str = ""
    reason: str = ""


@dataclass
class Table:
    """A table with a header, rows of :class:`Cell`, and under it a legend (lines) and a note."""

    header: list
    rows: list
    numeric: list = field(default_factory=list)  # per column: right-align and sort numerically
    note: str = ""
    legend: list = field(default_factory=list)


@dataclass
class Section:
    """A titled table of a report.

    ``context`` (the similarity, a carry) follows the title on the terminal and is left to the note
    elsewhere; ``anchor`` is the HTML id of its heading, if it has one.

    >>> s = Section("views", Table(["view"], []), context="similarity cka")
    >>> s.heading, s.label
    ('Views', 'views, similarity cka')
    """

    title: str
    table: Table
    context: str = ""
    anchor: str = ""

    @property
    def heading(self) -> str:
        """The title as a heading: its first letter capitalised."""
        return self.title[:1].upper() + self.title[1:]

    @property
    def label(self) -> str:
        """The title with its context, as the terminal prints it above the table."""
        return ", ".join(x for x in (self.title, self.context) if x)


@dataclass
class Folded:
    """A long value: a short preview, and the full text for formats that can fold it."""

    preview: str
    full: str
    count: int


@dataclass
class ResultContent:
    """What a report says about one result, in either mode: the headline (lines), the summary
    (``(label, value)`` pairs) and the mode's sections, in the order every format shows them."""

    headline: list
    summary: list
    sections: list


#: The attribution's terms (docs/method.md#attribution) and their column labels.
TERMS = (
    ("initial_state", "initial state"),
    ("size_imbalance", "size imbalance"),
    ("correlated_updates", "correlated updates"),
)


def interval(v: ViewResult, key: str, digits: int = 3) -> str:
    """``[lo, hi]`` of ``v.ci[key]``, or ``""`` without a bootstrap."""
    return fmt_interval((v.ci or {}).get(key), digits)


def level(v: ViewResult) -> int:
    """The level of ``v``'s bootstrap intervals in percent (95 without them)."""
    return int(round(100 * ((v.ci or {}).get("level") or 0.95)))


def sub_reference(v: ViewResult) -> str:
    """Whether the whole D_eff interval lies below the reference: ``yes``, ``no`` or ``n/a`` (no interval)."""
    return {True: "yes", False: "no", None: "n/a"}[v.sub_reference]


def sortable(x) -> float | None:
    """``x`` as a sort key; None for a missing or non-finite value (sorted last).

    >>> sortable(1), sortable(None), sortable(float("nan"))
    (1.0, None, None)
    """
    return float(x) if x is not None and math.isfinite(float(x)) else None


def number_cell(v: ViewResult, x, key: str | None = None, signed: bool = False, digits: int = 3) -> Cell:
    """``x`` written as every table writes numbers, with the interval ``v.ci[key]`` when ``key`` is given."""
    return Cell(fmt(x, digits, signed), interval(v, key, digits) if key else "", sortable(x))


def value_cell(x, digits: int = 3, signed: bool = False) -> Cell:
    """A number without an interval; ``-`` when there is none (a column that does not apply to the row).

    >>> value_cell(None).text, value_cell(0.25, signed=True).text
    ('-', '+0.250')
    """
    return Cell("-") if x is None else Cell(fmt(x, digits, signed), sort=sortable(x))


def unavailable_row(name: str, reason: str, width: int) -> list:
    """The row of a view without a value: ``unavailable`` with the reason, where the number would be."""
    # The reason stands where the number would: a view without a value is never shown as one.
    return [Cell(name), Cell("unavailable", reason=reason)] + [Cell("") for _ in range(width - 2)]
