"""Per-unit sufficient statistics: mergeable by addition, resampled by the bootstrap.

A unit is one sequence (the independent unit of METHOD section 6). Each key
of :data:`~effdepth.numerics.accumulate.STAT_KEYS` holds an array with a
leading unit axis.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .accumulate import STAT_KEYS


@dataclass
class UnitStatistics:
    """Statistics of a token set, one row per unit (sequence).

    >>> from effdepth.numerics.accumulate import empty_statistics
    >>> u = UnitStatistics.from_units([empty_statistics(3, False)] * 2)
    >>> u.units, u.total()["gram_states"].shape
    (2, (3, 3))
    """

    arrays: dict = field(default_factory=dict)

    @classmethod
    def from_units(cls, units: list) -> "UnitStatistics":
        if not units:
            raise ValueError("no units to stack")
        return cls({k: np.stack([np.asarray(u[k], dtype=np.float64) for u in units]) for k in STAT_KEYS})

    @property
    def units(self) -> int:
        return int(self.arrays["n"].shape[0])

    def total(self) -> dict:
        """Sums over units: the statistics of the whole token set."""
        return {k: v.sum(axis=0) for k, v in self.arrays.items()}

    def weighted_totals(self, weights: np.ndarray) -> dict:
        """Totals for each row of ``weights`` (shape ``(B, units)``), e.g. bootstrap counts."""
        w = np.asarray(weights, dtype=np.float64)
        return {k: np.tensordot(w, v, axes=(1, 0)) for k, v in self.arrays.items()}

    def __add__(self, other: "UnitStatistics") -> "UnitStatistics":
        """Statistics of the union of two disjoint token sets of the same units."""
        if self.units != other.units:
            raise ValueError(f"cannot add statistics of {self.units} and {other.units} units")
        return UnitStatistics({k: self.arrays[k] + other.arrays[k] for k in self.arrays})
