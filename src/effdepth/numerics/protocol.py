"""The one protocol of every stateful statistic (in the spirit of torchmetrics' ``Metric``).

A statistic takes data with ``update``, adds another of its kind (another
rank's, another share's) with ``merge``, saves and restores itself with
``state_dict`` / ``load_state_dict`` (``(arrays, meta)``: float64, or
float32 states, numpy arrays saved with ``np.savez``, never pickle, and a
JSON-serialisable dict), and gives its result with ``compute``: the fits of
its views (``FitAccumulator``), the per-unit statistics of every view under
every similarity (``SequenceUnits``, ``ViewAccumulator``, and per surrogate
kind ``CalibratedReferences``), the pooled sums (``PooledCka``), the mean
loss (``LossAccumulator``), or all of a measurement's
(``MeasurementState``). ``compute`` reads the state and changes nothing, so
a statistic can be computed, updated and computed again. Checkpoints
(:mod:`effdepth.checkpoint`), resume and distributed gathering rely on this
protocol alone.

>>> from effdepth.numerics.loss import LossAccumulator
>>> isinstance(LossAccumulator(), Statistic)
True
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class Statistic(Protocol):
    def update(self, *args, **kwargs) -> None:
        """Add data."""

    def merge(self, other) -> None:
        """Add another statistic of the same kind and options."""

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: everything needed to continue later."""

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict`."""

    def compute(self):
        """What the statistic gives, from all it has taken in so far."""
