"""The additive statistics of a run's views, one unit per measured sequence (docs/method.md#views).

Views that differ only in which positions they keep (default, drop-pos0,
pos0-only) share one *stream*: position 0 and the rest of each sequence are
accumulated apart (its two *parts*) and a view's unit adds the parts it
keeps. A view that transforms the states (token-norm, center, top-k PC) has
a stream of its own, through the view's one per-token transform
(:meth:`~effdepth.numerics.views.ViewSpec.transform`). Each stream keeps the
statistics its similarities need (:func:`stream_statistics`).

:class:`SequenceUnits` follows the statistics' protocol
(``update``, ``merge``, ``state_dict`` / ``load_state_dict``, ``compute``); :meth:`SequenceUnits.measure` and
:meth:`SequenceUnits.commit` let a caller measure a whole batch before it
adds anything, so a batch that fails part-way adds nothing.
"""

from __future__ import annotations

from functools import partial

import numpy as np
import torch

from ..errors import EffdepthError
from .accumulate import STAT_KEYS, SequenceSums, chunk_tokens_for, sums_in_chunks
from .sequences import check_finite, check_finite_states, real_sequences
from .similarities import keeps_cosine_sums
from .statistics import UnitStatistics
from .views import ViewSpec, parse_views


def stream_statistics(spec: ViewSpec, similarities, statistics: tuple = STAT_KEYS) -> tuple:
    """The additive statistics a view's stream keeps: ``statistics``, or only the token counts
    for a stream that transforms the states (token-norm, center, top-k PC) when only kernel
    similarities are asked (not :func:`keeps_cosine_sums`).

    A kernel similarity's numbers (D_eff, references, attribution) need none of
    the additive sums. What the sums feed besides is the cosine summaries of
    the states (update cosines, cos(U_l, S_{l-1}), the related measures), kept
    for the untransformed stream (default, drop-pos0, pos0-only) whatever the
    similarity; for the transformed streams they were a third of a cka run's
    statistics under ``--views paper`` (docs/method.md#no-cosine-summaries).

    >>> [len(stream_statistics(v, ("cka",))) for v in parse_views("default,token-norm,top1pc")]
    [10, 1, 1]
    >>> len(stream_statistics(parse_views("top1pc")[0], ("cka", "frobenius")))
    10
    """
    return ("n",) if spec.transforms and not keeps_cosine_sums(similarities) else tuple(statistics)


class SequenceUnits:
    """Per-sequence additive statistics of every view stream (see the module docstring).

    ``statistics`` are the additive statistics kept (a transformed stream under
    kernel ``similarities`` alone keeps the token counts only,
    :func:`stream_statistics`); ``chunk_tokens`` the tokens per chunk of the
    per-token sums (default: by device). A stream that needs a fit is measured
    with it (``fits``: stream key -> fit, :class:`~effdepth.numerics.fits.ViewFits`).
    :meth:`compute` gives each view's units, one per measured sequence.

    >>> units = SequenceUnits(["default", "drop-pos0"])
    >>> units.update(torch.randn(3, 2, 5, 4))        # (L+1, batch, seq, d)
    >>> {name: stats.units for name, stats in units.compute().items()}
    {'default': 2, 'drop-pos0': 2}
    """

    def __init__(
        self,
        views=("default",),
        *,
        similarities=("frobenius",),
        statistics: tuple = STAT_KEYS,
        include_embedding: bool = False,
        chunk_tokens: int | None = None,
    ):
        self.views: list = parse_views(views)
        self.statistics = tuple(statistics)
        self.include_embedding = include_embedding
        self.chunk_tokens = chunk_tokens
        self.streams: dict = {}
        for v in self.views:
            self.streams.setdefault(v.stream, {"spec": v, "parts": set()})["parts"].update(v.parts)
        self.keys = {
            key: stream_statistics(info["spec"], similarities, self.statistics) for key, info in self.streams.items()
        }
        # Without a stream that sums state energies, non-finite states are caught another way (not when
        # asked for token counts alone: surrogate streams, finite by construction).
        self.check_states = self.statistics != ("n",) and not any("gram_states" in k for k in self.keys.values())
        self.units: dict = {(s, p): [] for s, info in self.streams.items() for p in info["parts"]}

    def label(self, stream: tuple) -> str:
        """The name a stream's saved arrays go by: its first view's canonical name."""
        return self.streams[stream]["spec"].canonical

    # -- measuring ------------------------------------------------------------------

    def measure(self, seq: torch.Tensor, fits: dict | None = None, skip=()) -> dict:
        """One sequence's units ``{(stream, part): statistics}`` (``(M, T, d)``, every token real, T >= 1),
        not added yet (:meth:`commit`); streams in ``skip`` (unfitted) are left out."""
        streams = {key: info for key, info in self.streams.items() if key not in skip}
        totals = self._sums(seq, streams, fits or {})
        out = {}
        for key, info in streams.items():
            pos0, rest = totals[key]
            check_finite(pos0, rest, seq.dtype)
            parts = {"pos0": pos0, "rest": rest if rest is not None else _empty_like(pos0)}
            for part in info["parts"]:
                out[(key, part)] = parts[part]
        if self.check_states:
            check_finite_states(seq, seq.dtype)
        return out

    def _sums(self, seq: torch.Tensor, streams: dict, fits: dict) -> dict:
        """(pos0, rest) statistics of each of ``streams`` for one sequence.

        Chunks of tokens are converted to float64 once and shared by the
        streams; every transform is per token once fitted, so chunking is exact.
        """
        t = seq.shape[1]
        # Token counts only (a transformed stream under kernel similarities, a surrogate stream): no pass over the states.
        out = {
            key: ({"n": np.asarray(1.0)}, {"n": np.asarray(float(t - 1))} if t > 1 else None)
            for key in streams
            if self.keys[key] == ("n",)
        }
        sums = {key: SequenceSums(self.include_embedding, self.keys[key]) for key in streams if key not in out}
        if not sums:
            return out
        # Each stream's one per-token transform; its positions are its parts.
        transforms = {key: partial(streams[key]["spec"].transform, fit=fits.get(key)) for key in sums}
        out.update(sums_in_chunks(seq, sums, transforms, self.chunk_tokens or chunk_tokens_for(seq)))
        return out

    def commit(self, measured: list) -> None:
        """Add the units :meth:`measure` gave, in order (appending only: nothing to fail half-way)."""
        for units in measured:
            for key, unit in units.items():
                self.units[key].append(unit)

    def update(self, states: torch.Tensor, mask: torch.Tensor | None = None, fits: dict | None = None) -> None:
        """Measure a batch ``(L+1, batch, seq, d)`` (``mask`` marks real tokens), then add it."""
        self.commit([self.measure(seq, fits) for seq in real_sequences(states, mask)])

    # -- reading --------------------------------------------------------------------

    def view(self, spec: ViewSpec) -> UnitStatistics | None:
        """A view's units, its parts added, one per measured sequence (``None`` before any)."""
        total = None
        for part in spec.parts:
            units = self.units[(spec.stream, part)]
            if not units:
                return None
            stats = UnitStatistics.from_units(units)
            total = stats if total is None else total + stats
        return total

    def compute(self) -> dict:
        """Each view's units (:meth:`view`) by its name, for the views with a measured sequence."""
        views = {spec.name: self.view(spec) for spec in self.views}
        return {name: stats for name, stats in views.items() if stats is not None}

    # -- saving and merging ---------------------------------------------------------

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: every per-unit array keyed ``"<stream>|<part>|<key>"``; no meta."""
        out = {}
        for (key, part), units in self.units.items():
            if units:
                for name, arr in UnitStatistics.from_units(units).arrays.items():
                    out[f"{self.label(key)}|{part}|{name}"] = arr
        return out, {}

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` (the arrays may hold other statistics' keys too, and more
        statistics than these units keep)."""
        for key, part in self.units:
            prefix = f"{self.label(key)}|{part}|"
            keep = self.keys[key]
            cols = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix) and k[len(prefix) :] in keep}
            n = len(cols["n"]) if cols else 0
            if n and set(cols) != set(keep):
                raise EffdepthError(
                    f"saved statistics of view stream {self.label(key)!r} lack {', '.join(sorted(set(keep) - set(cols)))} "
                    "(measured for other similarities); resume with the same similarities or start afresh without resuming"
                )
            self.units[(key, part)] = [{k: v[i] for k, v in cols.items()} for i in range(n)]

    def merge(self, other: "SequenceUnits") -> None:
        """Append the units of ``other`` (the same views: e.g. the sequences measured after these)."""
        for key in self.units:
            self.units[key].extend(other.units[key])


def _empty_like(stats: dict) -> dict:
    return {k: np.zeros_like(v) for k, v in stats.items()}
