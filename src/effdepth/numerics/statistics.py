"""Per-unit sufficient statistics: mergeable by addition, resampled by the bootstrap.

A unit is one sequence, or under token-mode cka one pair of sequences (the
independent units of docs/method.md#uncertainty). Each key
(those of :data:`~effdepth.numerics.accumulate.STAT_KEYS`, and whatever else
the units carry, e.g. the cka keys of :mod:`effdepth.numerics.cka`) holds an
array with a leading unit axis.
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
        """Stack per-unit dicts; the keys are the union of what the units carry
        (STAT_KEYS first), and every unit must carry every key."""
        if not units:
            raise ValueError("no units to stack")
        keys = [k for k in STAT_KEYS if k in units[0]]
        for u in units:
            keys += [k for k in u if k not in keys]
        missing = sorted({k for u in units for k in keys if k not in u})
        if missing:
            raise ValueError(f"units carry different statistics: some lack {missing}")
        return cls({k: np.stack([np.asarray(u[k], dtype=np.float64) for u in units]) for k in keys})

    @property
    def units(self) -> int:
        return int(next(iter(self.arrays.values())).shape[0]) if self.arrays else 0

    def total(self) -> dict:
        """Sums over units: the statistics of the whole token set."""
        return {k: v.sum(axis=0) for k, v in self.arrays.items()}

    def weighted_totals(self, weights: np.ndarray) -> dict:
        """Totals for each row of ``weights`` (shape ``(B, units)``), e.g. bootstrap counts."""
        w = np.asarray(weights, dtype=np.float64)
        return {k: np.tensordot(w, v, axes=(1, 0)) for k, v in self.arrays.items()}

    def joined(self, other: "UnitStatistics") -> "UnitStatistics":
        """The same units with the other set's keys added (e.g. cka keys to the frobenius ones).

        >>> a = UnitStatistics({"n": np.ones(2)}); b = UnitStatistics({"hsic": np.zeros((2, 3, 3))})
        >>> sorted(a.joined(b).arrays)
        ['hsic', 'n']
        """
        if self.units != other.units:
            raise ValueError(f"cannot join statistics of {self.units} and {other.units} units")
        shared = set(self.arrays) & set(other.arrays)
        if shared:
            raise ValueError(f"both statistics carry {sorted(shared)}")
        return UnitStatistics({**self.arrays, **other.arrays})

    def subset(self, keep) -> "UnitStatistics":
        """The units where ``keep`` (a boolean per unit) is true, in order.

        >>> UnitStatistics({"n": np.array([3.0, 0.0, 2.0])}).subset(np.array([True, False, True])).arrays["n"].tolist()
        [3.0, 2.0]
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self.units,):
            raise ValueError(f"need one flag per unit ({self.units}), got shape {keep.shape}")
        return UnitStatistics({k: v[keep] for k, v in self.arrays.items()})

    def paired(self, firsts) -> "UnitStatistics":
        """One unit per pair: units ``f`` and ``f + 1`` added, for each ``f`` of ``firsts``.

        >>> UnitStatistics({"n": np.array([3.0, 1.0, 2.0, 5.0, 7.0])}).paired([0, 2]).arrays["n"].tolist()
        [4.0, 7.0]
        """
        firsts = np.asarray(firsts, dtype=np.int64)
        return UnitStatistics({k: v[firsts] + v[firsts + 1] for k, v in self.arrays.items()})

    def pooled(self) -> "UnitStatistics":
        """One unit holding the totals: statistics that cannot be resampled by sequence.

        >>> UnitStatistics({"n": np.ones(3)}).pooled().arrays["n"].tolist()
        [3.0]
        """
        return UnitStatistics({k: v[None] for k, v in self.total().items()})

    def __add__(self, other: "UnitStatistics") -> "UnitStatistics":
        """Statistics of the union of two disjoint token sets of the same units."""
        if self.units != other.units:
            raise ValueError(f"cannot add statistics of {self.units} and {other.units} units")
        return UnitStatistics({k: self.arrays[k] + other.arrays[k] for k in self.arrays})
