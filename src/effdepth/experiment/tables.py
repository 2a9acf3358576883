"""Plain-text tables for the intervention, recomposition and experiment outputs (no plotting imports)."""

from __future__ import annotations

import math


def fmt(x, digits: int = 3) -> str:
    """A number for a table; ``n/a`` for missing or non-finite values.

    >>> fmt(1.23456), fmt(None), fmt(float("nan"))
    ('1.235', 'n/a', 'n/a')
    """
    if x is None or not math.isfinite(float(x)):
        return "n/a"
    return f"{float(x):.{digits}f}"


def fmt_interval(lo_hi, digits: int = 3) -> str:
    """``[lo, hi]``, or an empty string without an interval.

    >>> fmt_interval([0.1, 0.25]), fmt_interval(None)
    ('[0.100, 0.250]', '')
    """
    if not lo_hi:
        return ""
    return f"[{fmt(lo_hi[0], digits)}, {fmt(lo_hi[1], digits)}]"


def render_table(header: list, rows: list) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned.

    >>> print(render_table(["a", "b"], [["x", "1.0"]]))
    a    b
    -  ---
    x  1.0
    """
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(row):
        return "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])
