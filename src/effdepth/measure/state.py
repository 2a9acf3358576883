"""One pass of a token-mode measurement: batches -> states -> statistics, resumable.

:class:`MeasurementState` is everything one pass feeds (the views'
statistics, the surrogate streams of the calibrated references, the loss).
Views that fit a mean or principal directions are fitted first, in a phase
of their own (:func:`fit_views`, over the calibration set or every
sequence); then :func:`accumulate` feeds every batch, saving partial
statistics to a checkpoint on a timer and on a signal, and resuming from
one.
"""

from __future__ import annotations

import itertools
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..capture.batches import is_out_of_memory, state_batches
from ..checkpoint import (
    CheckpointMismatch,
    MeasurementInterrupted,
    graceful_interrupts,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from ..errors import EffdepthError
from ..numerics.accumulate import statistics_for
from ..numerics.cka_full import check_cka_full_memory
from ..numerics.fits import calibration_prefix, fit_description
from ..numerics.loss import LossAccumulator
from ..numerics.sequences import real_counts
from ..numerics.similarities import get_similarity
from ..numerics.streams import ViewAccumulator
from ..numerics.surrogate import CalibratedReferences
from ..options import AnalysisOptions, RunOptions
from ..version import __version__
from .prepare import Prepared


@dataclass
class MeasurementState:
    """Everything one pass over the batches feeds: the views' statistics, the surrogate
    streams of the calibrated references (docs/method.md#calibrated-references) and the loss.

    Views that fit a mean or principal directions are fitted first, in a phase
    of their own (:meth:`fit_batch` over the fitted set, then
    :meth:`finalize_fit`; :func:`fit_views` drives it for a corpus), then
    measured (:meth:`update`).

    >>> st = MeasurementState.new(AnalysisOptions(views="default,drop-pos0", surrogate_seqs=2, pooling="none"))
    >>> st.update(torch.randn(4, 3, 6, 8), None)
    >>> st.views.sequences, st.calibrated.sequences
    (3, 2)
    """

    views: ViewAccumulator
    calibrated: CalibratedReferences | None = None
    loss: LossAccumulator | None = None

    @classmethod
    def new(
        cls,
        analysis: AnalysisOptions,
        *,
        with_loss: bool = False,
        first_sequence: int = 0,
        surrogate_limit: int | None = None,
    ) -> "MeasurementState":
        """Empty statistics for ``analysis``; ``first_sequence`` and ``surrogate_limit`` place a
        distributed rank's share among all sequences (the surrogate noise is drawn per global sequence)."""
        views = ViewAccumulator(
            analysis.view_specs,
            include_embedding=analysis.include_embedding,
            pc_estimate=analysis.pc_estimate,
            similarities=analysis.similarity,
            cka_full_budget_bytes=analysis.max_memory,
            statistics=statistics_for(analysis.similarity),
        )
        calibrated = None
        # Not for a similarity without calibrated references (cka-full: its surrogates would double its memory).
        kernel_free = [s for s in analysis.similarity if get_similarity(s).calibrated]
        if analysis.surrogate_seqs != 0 and kernel_free:
            limit = analysis.surrogate_seqs if surrogate_limit is None else surrogate_limit
            calibrated = CalibratedReferences(
                analysis.view_specs,
                include_embedding=analysis.include_embedding,
                similarities=kernel_free,
                seed=analysis.seed,
                max_seqs=limit,
                fit_seqs=analysis.surrogate_seqs,
                first_sequence=first_sequence,
            )
        return cls(views, calibrated, LossAccumulator() if with_loss else None)

    @property
    def sequences(self) -> int:
        return self.views.sequences

    @property
    def fitted(self) -> bool:
        """Whether the views that need a fit (center, top-k PC) have it, in every stream."""
        return self.views.fitted and (self.calibrated is None or self.calibrated.fitted)

    def fit_batch(self, states: torch.Tensor, mask: torch.Tensor | None) -> None:
        """Feed one batch of the fitted set to the real and the surrogate streams' fits."""
        self.views.fit_batch(states, mask)
        if self.calibrated is not None:
            self.calibrated.fit_batch(states, mask)

    def finalize_fit(self, *, sequences: int, tokens: int) -> None:
        """The fits, from the batches fed to :meth:`fit_batch` (``sequences``, ``tokens``: their size).

        >>> st = MeasurementState.new(AnalysisOptions(views="top1pc", surrogate_seqs=0, pooling="none"))
        >>> st.fit_batch(torch.randn(4, 2, 6, 8), None); st.finalize_fit(sequences=2, tokens=12)
        >>> st.views.fit_info["how"]
        'calibration on all 2 sequences (12 tokens): fewer than a calibration set of 8 sequences and 2048 tokens'
        """
        how = fit_description(self.views.pc_estimate, sequences=sequences, tokens=tokens)
        self.views.finalize_fit(how, sequences=sequences, tokens=tokens)
        if self.calibrated is not None:
            self.calibrated.finalize_fit()

    def update(self, states: torch.Tensor, mask: torch.Tensor | None, logits=None, input_ids=None) -> None:
        """Measure one batch in every stream."""
        if self.calibrated is not None:
            self.calibrated.update(states, mask)
        self.views.update(states, mask)
        if self.loss is not None:
            self.loss.update(logits, input_ids, mask)

    def merge(self, other: "MeasurementState") -> None:
        """Add another measurement of the same options (e.g. the next share of the sequences)."""
        self.views.merge(other.views)
        if self.calibrated is not None:
            self.calibrated.merge(other.calibrated)
        if self.loss is not None:
            self.loss.merge(other.loss)

    def compute(self) -> dict:
        """What every stream gives: ``views`` (their units, ``ViewAccumulator.compute``), ``calibrated``
        (the surrogates', by kind) and ``loss`` (``None`` where not measured)."""
        return {
            "views": self.views.compute(),
            "calibrated": None if self.calibrated is None else self.calibrated.compute(),
            "loss": None if self.loss is None else self.loss.compute(),
        }

    def state_dict(self) -> tuple:
        """``(arrays, meta)`` of every stream, for a checkpoint."""
        arrays, meta = self.views.state_dict()
        out_meta = {"accumulator": meta, "loss": self.loss.state_dict()[1] if self.loss is not None else None}
        if self.calibrated is not None:
            cal_arrays, out_meta["calibrated"] = self.calibrated.state_dict()
            arrays.update({f"cal/{k}": v for k, v in cal_arrays.items()})
        return arrays, out_meta

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict` of a measurement with the same options."""
        self.views.load_state_dict({k: v for k, v in arrays.items() if not k.startswith("cal/")}, meta["accumulator"])
        if self.calibrated is not None:
            self.calibrated.load_state_dict(
                {k[4:]: v for k, v in arrays.items() if k.startswith("cal/")}, meta["calibrated"]
            )
        if self.loss is not None and meta.get("loss"):
            self.loss.load_state_dict({}, meta["loss"])


def check_kernel_memory(prepared: Prepared, analysis: AnalysisOptions) -> None:
    """cka-full needs (L+1)(L+2)/2 d x d float64 cross-products per view token set: refuse before the first batch."""
    if not any(get_similarity(s).memory_check for s in analysis.similarity):
        return
    embedding = prepared.lm.model.get_input_embeddings() if hasattr(prepared.lm.model, "get_input_embeddings") else None
    hidden = getattr(embedding, "embedding_dim", None) or getattr(
        getattr(prepared.lm.model, "config", None), "hidden_size", None
    )
    if hidden:
        check_cka_full_memory(analysis.view_specs, prepared.arch.num_layers + 1, int(hidden), analysis.max_memory)


def run_fingerprint(prepared: Prepared, analysis: AnalysisOptions, with_loss: bool) -> dict:
    """What partial statistics belong to: a resume with anything else is refused."""
    info = prepared.lm.info
    local = info.get("source") in ("local", "gguf")  # the folder or file itself, however its path was typed
    return {
        "model": info.get("path") if local else info.get("id"),
        "revision": info.get("revision"),
        "commit": info.get("commit"),
        "corpus_sha256": prepared.tokens.sha256,
        **analysis.statistics_dict(),
        "num_layers": prepared.arch.num_layers,
        "with_loss": with_loss,
        "effdepth": __version__,  # not code_version(): no git call per run just for this
    }


def fitted_rows(tokens, pc_estimate: str) -> int:
    """How many of the first sequences the fit phase runs over: the calibration set
    (:func:`~effdepth.numerics.fits.calibration_prefix`) or, for the exact estimate, all."""
    return tokens.num_seqs if pc_estimate == "exact" else calibration_prefix(tokens.lengths())


def fit_views(
    prepared: Prepared,
    state: MeasurementState,
    batch_size: int,
    *,
    progress: bool = True,
    facts: dict | None = None,
    stop=None,
    keep: bool = False,
) -> list:
    """The fit phase: forward passes over the fitted sequences (:func:`fitted_rows`), fed to the
    fits of the views that need one; nothing when none does or the fits exist (a resumed run).
    ``stop()`` true between batches ends it early (an interrupted run), with no fit.

    With ``keep``, returns copies of the fitted batches, for the caller to measure once the fits
    exist, so the calibration set is not passed through the model twice. It holds at most the calibration set
    (a few thousand tokens, whatever the run's size). Nothing is returned for the exact estimate
    (every sequence: the second pass is what it costs) or when the loss is measured too (the
    copies would have to keep the logits).
    """
    if state.fitted:
        return []
    tokens = prepared.tokens.rows(0, fitted_rows(prepared.tokens, state.views.pc_estimate))
    keep = keep and state.views.pc_estimate == "calibration" and state.loss is None
    held, sequences, real = [], 0, 0
    for batch in state_batches(
        prepared.lm.model, prepared.arch, tokens, batch_size, label="fitting views", progress=progress, facts=facts
    ):
        state.fit_batch(batch.states, batch.mask)
        if keep:  # the capture buffer is reused by the next forward pass
            held.append(batch._replace(states=batch.states.clone()))
        counts = real_counts(batch.states, batch.mask)
        sequences, real = sequences + counts[0], real + counts[1]
        if stop is not None and stop():
            return []
    state.finalize_fit(sequences=sequences, tokens=real)
    return held


def _drained(batches: list):
    """Yield and forget each batch in turn, so a measured copy is freed at once."""
    while batches:
        yield batches.pop(0)


def update_statistics(state: MeasurementState, batch) -> None:
    """One batch's statistics; out of memory here (not in the forward pass, which is retried at a
    smaller batch) is a one-line error."""
    try:
        state.update(batch.states, batch.mask, batch.logits, batch.input_ids)
    except (RuntimeError, IndexError) as exc:
        if not is_out_of_memory(exc):
            raise
        raise EffdepthError(
            f"out of memory while adding the statistics of a batch of {batch.input_ids.shape[0]} sequences: "
            f"{' '.join(str(exc).split())[:200]}; lower --batch-size, use fewer --views, or set --max-memory"
        ) from None


def accumulate(
    prepared: Prepared,
    state: MeasurementState,
    batch_size: int,
    *,
    run: RunOptions | None = None,
    fingerprint: dict | None = None,
) -> dict:
    """Fit the views that need it (:func:`fit_views`), then feed every sequence of ``prepared`` to
    ``state``; returns run facts.

    Out of memory in a forward pass halves the batch size and retries it
    (the statistics are per sequence, so the numbers do not change). A
    signal stops after the batch in hand (a second one after its statistics
    are added) and saves a checkpoint when ``run.checkpoint`` is set.
    """
    lm, arch, tokens = prepared.lm, prepared.arch, prepared.tokens
    acc = state.views
    run = run or RunOptions()
    folder = Path(run.checkpoint) if run.checkpoint is not None else None
    facts = {"batch_size_used": batch_size, "oom_retries": 0, "resumed_from": 0}
    if run.resume:
        if folder is None:
            raise EffdepthError("resume needs the folder of the interrupted run (--resume DIR)")
        _restore(folder, state, fingerprint)
        facts["resumed_from"] = acc.rows
    last_save = time.monotonic()
    with graceful_interrupts() as interrupted:
        try:
            fitted = fit_views(
                prepared,
                state,
                batch_size,
                progress=run.progress,
                facts=facts,
                stop=lambda: bool(interrupted),
                keep=True,
            )
            if interrupted:
                raise KeyboardInterrupt
            passes = state_batches(
                lm.model,
                arch,
                tokens,
                batch_size,
                progress=run.progress,
                full_model=state.loss is not None,
                start=acc.rows + sum(b.input_ids.shape[0] for b in fitted),
                facts=facts,
            )
            for batch in itertools.chain(_drained(fitted), passes):
                with interrupted.deferred():
                    update_statistics(state, batch)
                if folder is not None and (interrupted or time.monotonic() - last_save > run.checkpoint_every_s):
                    _save(folder, state, fingerprint, run.record)
                    last_save = time.monotonic()
                if interrupted:
                    break
        except KeyboardInterrupt:
            interrupted.signal = interrupted.signal or signal.SIGINT
            if folder is not None and state.fitted:
                _save(folder, state, fingerprint, run.record)
    if interrupted:
        name = signal.Signals(interrupted.signal).name
        if not state.fitted:
            raise MeasurementInterrupted(
                f"interrupted by {name} while fitting the views, before any sequence was measured; "
                "nothing to resume: run it again",
                interrupted.signal,
            )
        command = (run.record or {}).get("command") or f"--resume {folder.parent}" if folder else ""
        where = f"; partial statistics saved in {folder}, continue with: {command}" if folder else ""
        raise MeasurementInterrupted(
            f"interrupted by {name} after {acc.rows} of {tokens.input_ids.shape[0]} sequences{where}",
            interrupted.signal,
        )
    if folder is not None:
        remove_checkpoint(folder)
    return facts


def _save(folder, state: MeasurementState, fingerprint, record=None):
    arrays, meta = state.state_dict()
    save_checkpoint(folder, arrays, {"fingerprint": fingerprint, "run": record, **meta})


def _restore(folder, state: MeasurementState, fingerprint):
    arrays, meta = load_checkpoint(folder)
    saved = dict(meta.get("fingerprint", {}))
    model = saved.get("model")
    if isinstance(model, str) and model and Path(model).exists():  # saved before paths were made absolute
        saved["model"] = str(Path(model).resolve())
    differ = sorted(k for k in set(saved) | set(fingerprint or {}) if saved.get(k) != (fingerprint or {}).get(k))
    if differ:
        raise CheckpointMismatch(
            f"cannot resume: the saved run differs in {', '.join(differ)}; rerun with the same model, corpus and options, "
            "or start over without --resume"
        )
    state.load_state_dict(arrays, meta)
