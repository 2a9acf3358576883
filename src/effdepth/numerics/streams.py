"""From batches of states to per-sequence statistics of every view, in one pass.

The additive statistics are kept per sequence and view stream
(:class:`~effdepth.numerics.sequence_units.SequenceUnits`: views that differ
only in which tokens they keep share one stream, position 0 and the rest
accumulated apart and added back together). token-norm is a per-token
transform of the batch. center and top-k PC need a per-layer fit first, a
phase of its own before any sequence is measured: the caller feeds
:meth:`ViewAccumulator.fit_batch` either the calibration set
("calibration", :func:`~effdepth.numerics.fits.calibration_prefix`) or
every sequence ("exact"), then calls :meth:`ViewAccumulator.finalize_fit`.
Nothing is held inside the accumulator while it waits for a fit.

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

import torch

from ..errors import EffdepthError
from .accumulate import STAT_KEYS
from .cka import GRAM_BUDGET_BYTES, MIN_TOKENS, CkaPairs, ViewUnavailable, cka_set_key, cka_token_sets, require_cka_view
from .cka_full import FULL_BUDGET_BYTES, PooledCka, check_cka_full_memory
from .fits import PC_ESTIMATES, ViewFits, fit_description
from .metrics import NO_COSINE_SUMMARIES
from .sequence_units import SequenceUnits
from .sequences import real_counts, real_sequences
from .similarities import KERNEL_SIMILARITIES, get_similarity, validate_similarities
from .statistics import UnitStatistics
from .views import ViewSpec, check_width, parse_views


class ViewAccumulator:
    """Accumulates per-sequence statistics for a list of views.

    The additive statistics (frobenius, token and every related measure) are
    kept, or only those named in ``statistics`` (see
    :func:`~effdepth.numerics.accumulate.statistics_for` and
    :func:`~effdepth.numerics.accumulate.deff_statistics`), and for a
    transformed stream under kernel similarities alone only the token counts
    (:func:`~effdepth.numerics.sequence_units.stream_statistics`); ``similarities``
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
        if chunk_tokens is not None and (
            isinstance(chunk_tokens, bool) or not isinstance(chunk_tokens, int) or chunk_tokens < 1
        ):
            raise ValueError(f"chunk_tokens must be a whole number >= 1 or None (by device), got {chunk_tokens!r}")
        self._width_checked = None
        self.similarities = validate_similarities(similarities)
        unknown = set(statistics) - set(STAT_KEYS)
        if unknown:
            raise ValueError(f"unknown statistics {sorted(unknown)}; choose from {', '.join(STAT_KEYS)}")
        self.statistics = tuple(k for k in STAT_KEYS if k in statistics or k == "n")
        self._additive = SequenceUnits(
            self.views,
            similarities=self.similarities,
            statistics=self.statistics,
            include_embedding=include_embedding,
            chunk_tokens=chunk_tokens,
        )
        self.gram_budget_bytes = gram_budget_bytes
        self.cka_full_budget_bytes = cka_full_budget_bytes
        units = {get_similarity(s).unit for s in self.similarities}
        self.cka_sets: dict = cka_token_sets(self.views) if units - {"sequence"} else {}
        pair_sets = self.cka_sets if "pair" in units else {}
        self._cka = CkaPairs({key: self._set_label(key) for key in pair_sets}, gram_budget_bytes)
        self._pooled: dict = {k: PooledCka() for k in self.cka_sets} if "run" in units else {}
        self._fits = ViewFits({key: info["spec"] for key, info in self.streams.items()}, pc_estimate)
        self.sequences = 0
        self.tokens = 0
        self.padding_rows = 0

    @property
    def streams(self) -> dict:
        """Each view stream's first view and the parts its views keep (see :class:`SequenceUnits`)."""
        return self._additive.streams

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

    def finalize_fit(
        self, how: str, *, sequences: int | None = None, tokens: int | None = None, warn: bool = True
    ) -> None:
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
        self.finalize_fit(
            fit_description("calibration", sequences=sequences, tokens=tokens, whole_run=False),
            sequences=sequences,
            tokens=tokens,
        )

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
        measured: list = []
        pooled_states: dict = {k: [] for k in self._pooled}
        kernel_views = self._kernel_views()
        pairs = self._cka.pending(kernel_views)
        sequences = tokens = 0
        for seq in real_sequences(states, mask):
            index = self.sequences + sequences
            sequences += 1
            tokens += seq.shape[1]
            measured.append(self._additive.measure(seq, self._fits.fits, skip=self._fits.unfitted))
            pairs.add(index, seq)
            for key in pooled_states:
                if key in kernel_views:
                    spec, fit = kernel_views[key]
                    pooled_states[key].append(spec.view_states(seq, fit, centred=True))
        pooled = {k: self._pooled[k].prepare(torch.cat(parts, dim=1)) for k, parts in pooled_states.items() if parts}
        # The pairs first: holding this batch's unpaired sequence copies it, the last allocation.
        self._cka.commit(pairs)
        self._additive.commit(measured)
        # Last: the pooled cross-products are added in place (no allocation, so no failure half-way).
        for k, prepared in pooled.items():
            self._pooled[k].commit(prepared)
        self.sequences += sequences
        self.tokens += tokens
        self.padding_rows += states.shape[1] - sequences

    def _kernel_views(self) -> dict:
        """Each kernel token set's view and its stream's fit, ``(spec, fit)`` (not for an unfitted stream)."""
        return {
            key: (spec, self._fits.fits.get(spec.stream))
            for key, spec in self.cka_sets.items()
            if spec.stream not in self._fits.unfitted
        }

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
        total = self._additive.view(spec)
        if total is None:
            raise ViewUnavailable(spec.name, similarity, "no sequence with a real token was measured")
        if unit == "sequence":
            if get_similarity(similarity).needs_token_keys and "cos2_sum" not in self.statistics:
                raise EffdepthError(
                    f"token statistics were not accumulated (similarities {list(self.similarities)}); "
                    "accumulate with similarities including 'token'"
                )
            if self._additive.keys[spec.stream] != self.statistics:  # a transformed stream under kernel similarities
                raise EffdepthError(
                    f"{similarity} statistics of view {spec.name!r} were not accumulated (similarities "
                    f"{list(self.similarities)}): {NO_COSINE_SUMMARIES}"
                )
            keep = total.arrays["n"] > 0
            if not keep.any():
                raise ViewUnavailable(
                    spec.name, similarity, f"no sequence has a token in this view{_selection_hint(spec)}"
                )
            return total if keep.all() else total.subset(keep)
        key = self._kernel_key(spec, similarity)
        if unit == "pair":
            if not self._cka.firsts:
                raise ViewUnavailable(
                    spec.name,
                    "cka",
                    "cka compares the sequences of a pair and fewer than two "
                    "sequences were measured; measure at least two",
                )
            cka = self._cka.statistics(key)
            keep = cka.arrays["cka_pairs"] > 0
            if not keep.any():
                raise ViewUnavailable(
                    spec.name, "cka", f"no pair of sequences has at least {MIN_TOKENS} tokens in this view in both"
                )
            joined = total.paired(self._cka.firsts).joined(cka)
            return joined if keep.all() else joined.subset(keep)
        pooled = self._pooled[key]
        if pooled.count < MIN_TOKENS:
            raise ViewUnavailable(spec.name, "cka-full", f"fewer than {MIN_TOKENS} tokens in this view")
        return total.pooled().joined(UnitStatistics.from_units([pooled.compute()]))

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
        total = self._additive.view(spec)
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
            raise ValueError(
                f"{similarity!r} is read from the additive statistics; kernel similarities: {', '.join(KERNEL_SIMILARITIES)}"
            )
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
        return {**self._additive.state_dict()[0], **self._cka.unit_arrays()}

    def _set_label(self, key: tuple) -> str:
        """``"<stream>|cka"`` or ``"<stream>|cka-drop-pos0"`` for a cka token set."""
        stream, selection = key
        return f"{self._additive.label(stream)}|cka" + (f"-{selection}" if selection else "")

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: everything needed to continue later (units, fits, the sequence
        waiting for its cka partner); arrays are numpy (saved with ``np.savez``, never pickle),
        meta is JSON-serialisable.
        """
        pair_arrays, pair_meta = self._cka.state_dict()
        arrays = {**self._additive.state_dict()[0], **pair_arrays}
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
        self._additive.load_state_dict(arrays, {})
        self._cka.load_state_dict(arrays, meta)
        for key in self._pooled:
            prefix = f"full|{self._set_label(key)}|"
            self._pooled[key] = PooledCka()
            self._pooled[key].load_state_dict(
                {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}, {}
            )
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
        self._additive.merge(other._additive)
        self._cka.merge(other._cka, offset=self.sequences, other_sequences=other.sequences)
        for key in self._pooled:
            self._pooled[key].merge(other._pooled[key])
        self.sequences += other.sequences
        self.tokens += other.tokens
        self.padding_rows += other.padding_rows


def _selection_hint(spec: ViewSpec) -> str:
    """Why a view that keeps all but position 0 has no token at all."""
    return f" (every sequence has a single token, and {spec.selection} removes it)" if spec.parts == ("rest",) else ""
