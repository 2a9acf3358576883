"""From batches of states to per-sequence statistics of every view, in one pass.

Views that differ only in which tokens they keep (default, drop-pos0,
pos0-only) share one stream: position 0 and the rest are accumulated apart
and added back together. token-norm is a per-token transform of the batch.
center and top-k PC need a per-layer fit first, a phase of its own before
any sequence is measured: the caller feeds :meth:`ViewAccumulator.fit_batch`
either the calibration set ("calibration",
:func:`~effdepth.numerics.fits.calibration_prefix`) or every sequence
("exact"), then calls :meth:`ViewAccumulator.finalize_fit`. Nothing is held
inside the accumulator while it waits for a fit.

A sequence with no token in a view (drop-pos0 of a one-token sequence) is
left out of that view and counted; a view without any token is unavailable
(:class:`~effdepth.numerics.cka.ViewUnavailable`). Rows of a batch that are
all padding are skipped and counted (``padding_rows``).

The cka similarities are not additive over positions, so they are kept per
token set (all positions, drop-pos0) instead of per part. Token-mode cka
(:mod:`effdepth.numerics.cka`) compares the sequences of a pair, kept by
:class:`~effdepth.numerics.cka.CkaPairs` (consecutive measured sequences,
held across batch boundaries); its units are the pairs, and the additive
statistics of a pair's two sequences are added to it.
"""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import torch

from ..errors import EffdepthError
from .accumulate import STAT_KEYS, SequenceSums, chunk_tokens_for, sums_in_chunks
from .cka import GRAM_BUDGET_BYTES, MIN_TOKENS, CkaPairs, ViewUnavailable, cka_set_key, cka_token_sets, require_cka_view
from .cka_full import FULL_BUDGET_BYTES, PooledCka, check_cka_full_memory
from .metrics import NO_COSINE_SUMMARIES
from .fits import PC_ESTIMATES, ViewFits, fit_description
from .sequences import check_finite, check_finite_states, real_counts, real_sequences
from .similarities import KERNEL_SIMILARITIES, get_similarity, keeps_cosine_sums, validate_similarities
from .statistics import UnitStatistics
from .views import ViewSpec, check_width, parse_views

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


class ViewAccumulator:
    """Accumulates per-sequence statistics for a list of views.

    The additive statistics (frobenius, token and every related measure) are
    kept, or only those named in ``statistics`` (see
    :func:`~effdepth.numerics.accumulate.statistics_for` and
    :func:`~effdepth.numerics.accumulate.deff_statistics`), and for a
    transformed stream under kernel similarities alone only the token counts
    (:func:`stream_statistics`); ``similarities``
    adds those of "cka" (per pair of sequences) and "cka-full" (pooled, memory-checked
    against ``cka_full_budget_bytes`` at the first update). The cka cross
    Grams are formed in blocks of rows within ``gram_budget_bytes``.
    ``chunk_tokens`` fixes the tokens per chunk of the per-token statistics
    (default: by device, :func:`~effdepth.numerics.accumulate.chunk_tokens_for`).

    Views that fit a mean or principal directions are fitted before the
    first :meth:`update` (:meth:`fit_batch`, then :meth:`finalize_fit`); an
    update before any fit under the calibration estimate fits on that batch
    itself (the API's shortcut: :func:`effdepth.measure` fits on the
    calibration set, :func:`calibration_prefix`, whatever the batch size).

    >>> acc = ViewAccumulator(["default", "drop-pos0"])
    >>> acc.update(torch.randn(3, 2, 5, 4))        # (L+1, batch, seq, d)
    >>> acc.unit_statistics("default").units
    2
    >>> acc.unit_statistics("drop-pos0", "cka").units           # one pair
    1
    """

    def __init__(
        self,
        views=("default",),
        *,
        include_embedding: bool = False,
        pc_estimate: str = "calibration",
        chunk_tokens: int | None = None,
        similarities=("cka",),
        gram_budget_bytes: int = GRAM_BUDGET_BYTES,
        cka_full_budget_bytes: int = FULL_BUDGET_BYTES,
        statistics: tuple = STAT_KEYS,
    ):
        if pc_estimate not in PC_ESTIMATES:
            raise EffdepthError(f"unknown PC estimate {pc_estimate!r}; choose from {', '.join(PC_ESTIMATES)}")
        self.views: list[ViewSpec] = parse_views(views)
        self.include_embedding = include_embedding
        self.pc_estimate = pc_estimate
        if chunk_tokens is not None and (isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1):
            raise ValueError(f"chunk_tokens must be a whole number >= 1 or None (by device), got {chunk_tokens!r}")
        self.chunk_tokens = chunk_tokens
        self._width_checked = None
        self.similarities = validate_similarities(similarities)
        unknown = set(statistics) - set(STAT_KEYS)
        if unknown:
            raise ValueError(f"unknown statistics {sorted(unknown)}; choose from {', '.join(STAT_KEYS)}")
        self.statistics = tuple(k for k in STAT_KEYS if k in statistics or k == "n")
        self.streams: dict = {}
        for v in self.views:
            parts = self.streams.setdefault(v.stream, {"spec": v, "parts": set()})["parts"]
            parts.update(v.parts)
        # Per stream, the additive statistics it keeps (see stream_statistics).
        self._stream_keys = {key: stream_statistics(info["spec"], self.similarities, self.statistics)
                             for key, info in self.streams.items()}
        # Without a stream that sums state energies, non-finite states are caught another way (not for
        # an accumulator asked for token counts alone: surrogate streams, finite by construction).
        self._check_states = self.statistics != ("n",) and not any("gram_states" in k for k in self._stream_keys.values())
        self._units: dict = {(s, p): [] for s, info in self.streams.items() for p in info["parts"]}
        self.gram_budget_bytes = gram_budget_bytes
        self.cka_full_budget_bytes = cka_full_budget_bytes
        units = {get_similarity(s).unit for s in self.similarities}
        self.cka_sets: dict = cka_token_sets(self.views) if units - {"sequence"} else {}
        pair_sets = self.cka_sets if "pair" in units else {}
        self._cka = CkaPairs({key: self._set_label(key) for key in pair_sets}, gram_budget_bytes)
        self._pooled: dict = {k: PooledCka() for k in self.cka_sets} if "run" in units else {}
        self._fit_accumulators: dict = {}
        self._fits = ViewFits({key: info["spec"] for key, info in self.streams.items()}, pc_estimate)
        self.sequences = 0
        self.tokens = 0
        self.padding_rows = 0

    # -- fitting (center, top-k PC) -------------------------------------------------

    @property
    def needs_fit(self) -> bool:
        return bool(self._fits.specs)

    @property
    def fitted(self) -> bool:
        return self._fits.done

    @property
    def fits(self) -> dict:
        """Each fitted stream's ``{"mean", "pcs", "tokens"}`` (see :class:`ViewFits`)."""
        return self._fits.fits

    @property
    def fit_info(self) -> dict | None:
        """How and on what the fits were estimated; ``None`` before any fit."""
        return self._fits.info

    def _check_width(self, width: int) -> None:
        # Once per width: the surrogate streams come through here for every sequence.
        if width != self._width_checked:
            check_width(self.views, width)
            self._width_checked = width

    def fit_batch(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Feed one batch to the per-layer mean / covariance estimates (see :class:`~effdepth.numerics.fits.ViewFits`)."""
        self._check_width(states.shape[-1])
        self._fits.update(states, mask)

    def finalize_fit(self, how: str, *, sequences: int | None = None, tokens: int | None = None, warn: bool = True) -> None:
        """Turn the estimates into fits; ``how`` and the size of the fitted set (``sequences``,
        ``tokens``: real tokens of all positions) are recorded in the result.

        A view whose token set had nothing to fit on is unavailable. Each
        ``top{k}pc`` view records, per layer, the relative eigen-gap after the
        k-th component; under :data:`~effdepth.numerics.fits.EIGENGAP_WARNING` a warning (also
        recorded) says the removed direction is arbitrary there (``warn=False``:
        recorded only, e.g. for surrogate streams).
        """
        notes = self._fits.finalize(how, sequences=sequences, tokens=tokens)
        for note in notes if warn else ():
            warnings.warn(note, stacklevel=3)

    # -- main pass ------------------------------------------------------------------

    def update(self, states: torch.Tensor, mask: torch.Tensor | None = None) -> None:
        """Add a batch of states ``(L+1, batch, seq, d)``; ``mask`` (batch, seq) marks real tokens.

        Views that need a fit must have one (see the class docstring); under
        the calibration estimate, the first update fits on its own batch when
        none was made.
        """
        if states.dim() != 4:
            raise ValueError(f"states must be (L+1, batch, seq, d), got shape {tuple(states.shape)}")
        self._check_width(states.shape[-1])
        if self._pooled:
            check_cka_full_memory(self.views, states.shape[0], states.shape[-1], self.cka_full_budget_bytes)
        if not self.fitted:
            self._fit_on(states, mask)
            if not self.fitted:  # all padding: nothing to fit on, nothing to measure
                self.padding_rows += states.shape[1]
                return
        self._accumulate(states, mask)

    def _fit_on(self, states: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Fit on this batch alone (an update before any fit)."""
        if self.pc_estimate == "exact":
            raise RuntimeError("exact PC estimate needs fit_batch over every batch, then finalize_fit")
        sequences, tokens = real_counts(states, mask)
        if sequences == 0:
            return
        self.fit_batch(states, mask)
        self.finalize_fit(fit_description("calibration", sequences=sequences, tokens=tokens, whole_run=False),
                          sequences=sequences, tokens=tokens)

    @property
    def rows(self) -> int:
        """Batch rows taken in (sequences and all-padding rows): where a resumed run continues."""
        return self.sequences + self.padding_rows

    def update_sequence(self, states: torch.Tensor) -> None:
        """Add one sequence's states ``(L+1, n, d)``, every token real, once fitted (the states may
        be a work buffer the caller reuses: nothing keeps a reference to it).

        >>> acc = ViewAccumulator(["default"]); acc.update_sequence(torch.randn(3, 5, 4)); acc.sequences
        1
        """
        if not self.fitted:
            raise RuntimeError("update_sequence needs a fitted accumulator: fit_batch and finalize_fit first")
        self._check_width(states.shape[-1])
        self._accumulate(states[:, None], None)

    def _accumulate(self, states: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Measure a batch with the fits in place (all-padding rows skipped and counted)."""
        # Build the batch's units first and commit at the end, so a failure
        # part-way (e.g. out of memory) leaves the accumulator as it was: what
        # a checkpoint then saves is every whole batch.
        new_units: dict = {k: [] for k in self._units}
        pooled_states: dict = {k: [] for k in self._pooled}
        kernel_views = self._kernel_views()
        pairs = self._cka.pending(kernel_views)
        streams = {key: info for key, info in self.streams.items() if key not in self._fits.unfitted}
        sequences = tokens = 0
        for seq in real_sequences(states, mask):
            index = self.sequences + sequences
            sequences += 1
            tokens += seq.shape[1]
            totals = self._sequence_statistics(seq, streams)
            for key, info in streams.items():
                pos0, rest = totals[key]
                check_finite(pos0, rest, states.dtype)
                parts = {"pos0": pos0, "rest": rest if rest is not None else _empty_like(pos0)}
                for p in info["parts"]:
                    new_units[(key, p)].append(parts[p])
            if self._check_states:
                check_finite_states(seq, states.dtype)
            pairs.add(index, seq)
            for key in pooled_states:
                if key in kernel_views:
                    spec, fit = kernel_views[key]
                    pooled_states[key].append(spec.view_states(seq, fit, centred=True))
        pooled = {k: self._pooled[k].prepare(torch.cat(parts, dim=1)) for k, parts in pooled_states.items() if parts}
        # The pairs first: holding this batch's unpaired sequence copies it, the last allocation.
        self._cka.commit(pairs)
        for k, units in new_units.items():
            self._units[k].extend(units)
        # Last: the pooled cross-products are added in place (no allocation, so no failure half-way).
        for k, prepared in pooled.items():
            self._pooled[k].commit(prepared)
        self.sequences += sequences
        self.tokens += tokens
        self.padding_rows += states.shape[1] - sequences

    def _kernel_views(self) -> dict:
        """Each kernel token set's view and its stream's fit, ``(spec, fit)`` (not for an unfitted stream)."""
        return {key: (spec, self._fits.fits.get(spec.stream)) for key, spec in self.cka_sets.items()
                if spec.stream not in self._fits.unfitted}

    def _sequence_statistics(self, seq: torch.Tensor, streams: dict) -> dict:
        """(pos0, rest) statistics of each of ``streams`` for one sequence ``(M, T, d)``, T >= 1.

        Chunks of tokens are converted to float64 once and shared by the
        streams; every transform is per token once fitted, so chunking is exact.
        """
        t = seq.shape[1]
        # Token counts only (a transformed stream under kernel similarities, a surrogate stream): no pass over the states.
        out = {key: ({"n": np.asarray(1.0)}, {"n": np.asarray(float(t - 1))} if t > 1 else None)
               for key in streams if self._stream_keys[key] == ("n",)}
        sums = {key: SequenceSums(self.include_embedding, self._stream_keys[key]) for key in streams if key not in out}
        if not sums:
            return out
        # Each stream's one per-token transform; its positions are its parts.
        transforms = {key: partial(streams[key]["spec"].transform, fit=self._fits.fits.get(key)) for key in sums}
        out.update(sums_in_chunks(seq, sums, transforms, self.chunk_tokens or chunk_tokens_for(seq)))
        return out

    def unit_statistics(self, view: str | ViewSpec, similarity: str = "frobenius") -> UnitStatistics:
        """The units of one view, with what ``similarity`` needs.

        "frobenius" (the default) and "token": the additive statistics (parts
        added), one unit per sequence with a token in the view. "cka": one
        unit per pair that entered the view, its cka keys and its two
        sequences' additive statistics added. What is left out (no token in
        the view; for cka a pair with fewer than 4 tokens in either sequence,
        or the odd last sequence) is counted by :meth:`left_out`. "cka-full": everything summed into a single unit
        plus the pooled keys, so the bootstrap gives no interval. Raises
        :class:`~effdepth.numerics.cka.ViewUnavailable` where the view has no
        value under that similarity (no sequence entered it).
        """
        spec = self._spec(view)
        unit = get_similarity(similarity).unit
        if spec.stream in self._fits.unfitted:
            raise ViewUnavailable(spec.name, similarity, self._fits.unfitted[spec.stream])
        total = self._additive(spec)
        if total is None:
            raise ViewUnavailable(spec.name, similarity, "no sequence with a real token was measured")
        if unit == "sequence":
            if get_similarity(similarity).needs_token_keys and "cos2_sum" not in self.statistics:
                raise EffdepthError(
                    f"token statistics were not accumulated (similarities {list(self.similarities)}); "
                    "accumulate with similarities including 'token'"
                )
            if self._stream_keys[spec.stream] != self.statistics:  # a transformed stream under kernel similarities
                raise EffdepthError(
                    f"{similarity} statistics of view {spec.name!r} were not accumulated (similarities "
                    f"{list(self.similarities)}): {NO_COSINE_SUMMARIES}"
                )
            keep = total.arrays["n"] > 0
            if not keep.any():
                raise ViewUnavailable(spec.name, similarity, f"no sequence has a token in this view{_selection_hint(spec)}")
            return total if keep.all() else total.subset(keep)
        key = self._kernel_key(spec, similarity)
        if unit == "pair":
            if not self._cka.firsts:
                raise ViewUnavailable(spec.name, "cka", "cka compares the sequences of a pair and fewer than two "
                                      "sequences were measured; measure at least two")
            cka = self._cka.statistics(key)
            keep = cka.arrays["cka_pairs"] > 0
            if not keep.any():
                raise ViewUnavailable(spec.name, "cka", f"no pair of sequences has at least {MIN_TOKENS} tokens in this "
                                      "view in both")
            joined = total.paired(self._cka.firsts).joined(cka)
            return joined if keep.all() else joined.subset(keep)
        pooled = self._pooled[key]
        if pooled.count < MIN_TOKENS:
            raise ViewUnavailable(spec.name, "cka-full", f"fewer than {MIN_TOKENS} tokens in this view")
        return total.pooled().joined(UnitStatistics.from_units([pooled.compute()]))

    def _additive(self, spec: ViewSpec) -> UnitStatistics | None:
        """The view's additive statistics, one unit per measured sequence (``None`` before any)."""
        total = None
        for p in spec.parts:
            units = self._units[(spec.stream, p)]
            if not units:
                return None
            stats = UnitStatistics.from_units(units)
            total = stats if total is None else total + stats
        return total

    def left_out(self, view: str | ViewSpec, similarity: str | None = None) -> int:
        """Sequences measured but left out of a view under ``similarity``: no token in the view
        (every similarity), or for cka both sequences of a pair where either has fewer than 4,
        and the odd last sequence.

        >>> acc = ViewAccumulator(["drop-pos0"], similarities=("cka",))
        >>> mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
        >>> acc.update(torch.randn(3, 5, 5, 4), mask)
        >>> acc.left_out("drop-pos0", "frobenius"), acc.left_out("drop-pos0", "cka")
        (1, 3)
        """
        spec = self._spec(view)
        if spec.stream in self._fits.unfitted:
            return self.sequences
        if similarity is not None and get_similarity(similarity).unit == "pair":
            return self.cka_left_out(spec)
        total = self._additive(spec)
        return 0 if total is None else int((total.arrays["n"] <= 0).sum())

    def cka_left_out(self, view: str | ViewSpec) -> int:
        """Sequences left out of a view's cka statistics (a pair with fewer than 4 tokens of the view
        in either sequence, or the odd last sequence)."""
        spec = self._spec(view)
        return self.sequences - 2 * self._cka.entered(self._kernel_key(spec, "cka"))

    def bootstrap_units(self, similarity: str | None = None) -> int:
        """How many independent units a similarity's bootstrap resamples: pairs under cka, else sequences.

        >>> acc = ViewAccumulator(["default"]); acc.update(torch.randn(3, 5, 6, 4))
        >>> acc.bootstrap_units("cka"), acc.bootstrap_units("frobenius")
        (2, 5)
        """
        paired = similarity is not None and get_similarity(similarity).unit == "pair"
        return len(self._cka.firsts) if paired else self.sequences

    def _kernel_key(self, spec: ViewSpec, similarity: str) -> tuple:
        unit = get_similarity(similarity).unit
        if unit == "sequence":
            raise ValueError(f"{similarity!r} is read from the additive statistics; kernel similarities: {', '.join(KERNEL_SIMILARITIES)}")
        require_cka_view(spec, similarity)
        store = self._cka.units if unit == "pair" else self._pooled
        if cka_set_key(spec) not in store:
            raise EffdepthError(
                f"{similarity} statistics were not accumulated (similarities {list(self.similarities)}); "
                f"accumulate with similarities including {similarity!r}"
            )
        return cka_set_key(spec)

    def compute(self) -> dict:
        """Every view's units under each of its similarities, ``{view name: {similarity: UnitStatistics}}``
        (:meth:`unit_statistics`); a similarity a view has no value under is left out of it, and
        :meth:`unit_statistics` says why.

        >>> acc = ViewAccumulator(["default", "pos0-only"], similarities=("cka", "frobenius"))
        >>> acc.update(torch.randn(3, 4, 5, 4))
        >>> {view: {s: u.units for s, u in by.items()} for view, by in acc.compute().items()}
        {'default': {'cka': 2, 'frobenius': 4}, 'pos0-only': {'frobenius': 4}}
        """
        out: dict = {}
        for spec in self.views:
            for similarity in self.similarities:
                try:
                    out.setdefault(spec.name, {})[similarity] = self.unit_statistics(spec, similarity)
                except ViewUnavailable:
                    continue
        return out

    def _spec(self, view) -> ViewSpec:
        name = view.name if isinstance(view, ViewSpec) else view
        for v in self.views:
            if v.name == name:
                return v
        raise KeyError(f"view {name!r} was not accumulated; have {[v.name for v in self.views]}")

    # -- saving and merging (resume, distributed) ------------------------------------

    def unit_arrays(self) -> dict:
        """Every per-unit array, keyed ``"<stream>|<part>|<key>"``: for saving and merging.

        cka units (one per pair) use the part ``cka`` (all positions) or ``cka-drop-pos0``; the
        index of each pair's first sequence is ``pairs|first``.
        """
        return {**self._additive_arrays(), **self._cka.unit_arrays()}

    def _additive_arrays(self) -> dict:
        out = {}
        for (key, part), units in self._units.items():
            if units:
                for name, arr in UnitStatistics.from_units(units).arrays.items():
                    out[f"{self.streams[key]['spec'].canonical}|{part}|{name}"] = arr
        return out

    def _set_label(self, key: tuple) -> str:
        """``"<stream>|cka"`` or ``"<stream>|cka-drop-pos0"`` for a cka token set."""
        stream, selection = key
        return f"{self.streams[stream]['spec'].canonical}|cka" + (f"-{selection}" if selection else "")

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: everything needed to continue later (units, fits, the sequence
        waiting for its cka partner); arrays are numpy (saved with ``np.savez``, never pickle),
        meta is JSON-serialisable.
        """
        pair_arrays, pair_meta = self._cka.state_dict()
        arrays = {**self._additive_arrays(), **pair_arrays}
        # Pooled cka-full sums are not per unit: merge them with merge(), never by concatenation.
        for key, pooled in self._pooled.items():
            for name, arr in pooled.state_dict()[0].items():
                arrays[f"full|{self._set_label(key)}|{name}"] = arr
        fit_arrays, fit_meta = self._fits.state_dict()
        arrays.update(fit_arrays)
        meta = {
            "views": [v.name for v in self.views],
            "include_embedding": self.include_embedding,
            "pc_estimate": self.pc_estimate,
            "similarities": list(self.similarities),
            **fit_meta,
            "sequences": self.sequences,
            "tokens": self.tokens,
            "padding_rows": self.padding_rows,
            **pair_meta,
        }
        return arrays, meta

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` of an accumulator with the same views."""
        if meta["views"] != [v.name for v in self.views] or meta["include_embedding"] != self.include_embedding:
            raise EffdepthError(
                f"saved statistics are for views {meta['views']} (include_embedding={meta['include_embedding']}), "
                f"not {[v.name for v in self.views]} (include_embedding={self.include_embedding}); rerun with the same options"
            )
        saved = [s for s in KERNEL_SIMILARITIES if s in meta.get("similarities", ())]
        wanted = [s for s in KERNEL_SIMILARITIES if s in self.similarities]
        if saved != wanted:
            raise EffdepthError(
                f"saved statistics were accumulated for kernel similarities {saved or 'none'}, this run needs {wanted or 'none'}; "
                "resume with the same similarities or start afresh without resuming"
            )
        for (key, part) in self._units:
            prefix = f"{self.streams[key]['spec'].canonical}|{part}|"
            keep = self._stream_keys[key]
            # Only the statistics this accumulator keeps (a saved state may carry more).
            cols = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix) and k[len(prefix):] in keep}
            n = len(cols["n"]) if cols else 0
            if n and set(cols) != set(keep):
                raise EffdepthError(
                    f"saved statistics of view stream {self.streams[key]['spec'].canonical!r} lack "
                    f"{', '.join(sorted(set(keep) - set(cols)))} (measured for other similarities); "
                    "resume with the same similarities or start afresh without resuming"
                )
            self._units[(key, part)] = [{k: v[i] for k, v in cols.items()} for i in range(n)]
        self._cka.load_state_dict(arrays, meta)
        for key in self._pooled:
            prefix = f"full|{self._set_label(key)}|"
            self._pooled[key] = PooledCka()
            self._pooled[key].load_state_dict({k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}, {})
        self._fits.load_state_dict(arrays, meta)
        self.sequences = int(meta["sequences"])
        self.tokens = int(meta["tokens"])
        self.padding_rows = int(meta.get("padding_rows", 0))

    def merge(self, other: "ViewAccumulator") -> None:
        """Append the units of ``other`` (the same views, e.g. another rank's share)."""
        if other.similarities != self.similarities or [v.name for v in other.views] != [v.name for v in self.views]:
            raise EffdepthError(
                f"cannot merge statistics of views {[v.name for v in other.views]} / similarities {list(other.similarities)} "
                f"into views {[v.name for v in self.views]} / similarities {list(self.similarities)}"
            )
        for key in self._units:
            self._units[key].extend(other._units[key])
        self._cka.merge(other._cka, offset=self.sequences, other_sequences=other.sequences)
        for key in self._pooled:
            self._pooled[key].merge(other._pooled[key])
        self.sequences += other.sequences
        self.tokens += other.tokens
        self.padding_rows += other.padding_rows


def _selection_hint(spec: ViewSpec) -> str:
    """Why a view that keeps all but position 0 has no token at all."""
    return f" (every sequence has a single token, and {spec.selection} removes it)" if spec.parts == ("rest",) else ""


def _empty_like(stats: dict) -> dict:
    return {k: np.zeros_like(v) for k, v in stats.items()}
