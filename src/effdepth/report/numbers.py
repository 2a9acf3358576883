"""How numbers are written in every table, headline and figure label.

>>> fmt(1.23456), fmt(None), fmt_interval([0.1, 0.25]), format_params(70_000_000)
('1.235', 'n/a', '[0.100, 0.250]', '70M')
"""

from __future__ import annotations

import math

_SCALE = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


def fmt(x, digits: int = 3, signed: bool = False) -> str:
    """A number for a table; ``n/a`` for missing or non-finite values.

    >>> fmt(1.23456), fmt(None), fmt(float("nan")), fmt(-0.00001, signed=True), fmt(2.5, 1, signed=True)
    ('1.235', 'n/a', 'n/a', '+0.000', '+2.5')
    """
    if x is None or isinstance(x, bool) or not math.isfinite(float(x)):
        return "n/a"
    x = float(x)
    if abs(x) < 0.5 * 10**-digits:
        x = 0.0  # never "-0.000"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def fmt_interval(lo_hi, digits: int = 3) -> str:
    """``[lo, hi]``, or an empty string without an interval.

    >>> fmt_interval([0.1, 0.25]), fmt_interval(None), fmt_interval([1, 2.25], 1)
    ('[0.100, 0.250]', '', '[1.0, 2.2]')
    """
    if not lo_hi:
        return ""
    return f"[{fmt(lo_hi[0], digits)}, {fmt(lo_hi[1], digits)}]"


def format_params(params: int | None) -> str:
    """A parameter count as people write it.

    >>> format_params(1_400_000_000), format_params(70_000_000), format_params(None)
    ('1.4B', '70M', '-')
    """
    if params is None:
        return "-"
    for unit in ("T", "B", "M", "K"):
        if params >= _SCALE[unit]:
            return f"{params / _SCALE[unit]:.3g}{unit}"
    return str(params)
