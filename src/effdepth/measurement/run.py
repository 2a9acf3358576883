"""Passage mode, the default: passages -> pooled vectors on disk -> the analysis -> a result (docs/method.md#passage-mode).

One forward pass per batch of passages (longest first, so an out-of-memory
retry happens early); every layer is pooled by a hook as the blocks produce
it (:mod:`effdepth.measurement.pooling`) and written to a memory-mapped store
(:mod:`effdepth.results.store`), so memory stays flat in the number of passages.
The analysis (:mod:`effdepth.numerics.analysis`) then reads the
store; :func:`analyse_saved` runs it again on a saved result, without a model.
"""

from __future__ import annotations

import shutil
import signal
import time
import warnings
import weakref
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from effdepth.errors import EffdepthError
from effdepth.measurement.checkpoint import (
    CheckpointMismatch,
    MeasurementInterrupted,
    graceful_interrupts,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from effdepth.measurement.pooling import PassageForward, pooled_batches
from effdepth.numerics.analysis import (
    SIMILARITIES,
    analyse_pooled,
    analysis_memory,
    analysis_units,
    check_analysis_memory,
    check_samples,
    one_pass_bytes,
)
from effdepth.numerics.confounds import length_distribution
from effdepth.numerics.hsic_plan import binary_size
from effdepth.numerics.pooling import PassagePooler
from effdepth.numerics.sampling import TokenSampler
from effdepth.numerics.views import variants_for, views_variants
from effdepth.options import AnalysisOptions
from effdepth.results.provenance import code_version, now, provenance_record
from effdepth.results.result import Result, view_results
from effdepth.results.store import POOLED_DIR, PooledStore, mark_movable, temporary_folder
from effdepth.results.version import __version__

__all__ = ["measure_passages", "analyse_store", "analyse_saved", "analysed_result", "from_pooled", "passage_config"]

#: More passes than this over the pooled vectors per stack, and a run says how much memory reads them once.
MANY_PASSES = 16


def measure_passages(prepared, analysis: AnalysisOptions, *, run, started: float | None = None) -> Result:
    """Measure prepared passages (``prepared.tokens`` is :class:`~effdepth.data.passages.Passages`).

    With ``run.checkpoint`` (a folder) the samples are written under it and a
    stopped run resumes (``run.resume``); without one they go to a temporary
    folder that :meth:`Result.save` moves beside ``result.json``. Under
    ``pooling="none"`` each passage gives its tokens as samples instead of
    their mean (:mod:`effdepth.numerics.sampling`: the token reduction, the
    same store, views, estimators, references and bootstrap).
    """
    started = time.perf_counter() if started is None else started
    lm, arch, passages = prepared.lm, prepared.arch, prepared.tokens
    tokens = analysis.token_reduction
    variants = variants_for(analysis.view_specs) if tokens is None else views_variants(analysis.view_specs)
    width = _hidden_size(lm)
    check_before_forward(passages, arch.num_layers, width, analysis)
    fingerprint = passage_fingerprint(prepared, analysis, variants)
    if tokens is not None:
        fingerprint["tokens"] = tokens.describe()
    folder, temporary = _store_folder(run)
    try:
        return _measure_into(folder, temporary, prepared, analysis, run, fingerprint, variants, width, started)
    except BaseException:
        _discard_unsaved(folder, temporary, run)
        raise


def check_before_forward(passages, num_layers: int, width: int, analysis: AnalysisOptions) -> None:
    """Everything the analysis will refuse, refused before the first forward pass and the first file:
    too few passages, a model with one analysed state, a top-k view beyond the rank, a memory budget
    below the analysis's least working set, a drop-bos view of a passage that is BOS alone, and a drop-pos0
    view of a passage of one token.

    >>> from effdepth.data.passages import Passages
    >>> p = Passages.from_rows([[1, 2]] * 4)
    >>> check_before_forward(p, 1, 8, AnalysisOptions(bootstrap=0))
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: the model has one layer: D_eff compares at least two states; add --include-embedding to compare S_0 with S_1, or measure a deeper model
    """
    plan = analysis.analysis_plan()
    check_samples(passages.num_passages, width, num_layers, plan)
    units = _analysis_units(passages, analysis, plan)
    check_analysis_memory(units.samples, num_layers, width, plan, units)
    passes = analysis_memory(units.samples, num_layers, width, plan, units)["stack"]["passes"]
    if passes > MANY_PASSES:
        need = binary_size(one_pass_bytes(units.samples, num_layers, width, plan, units), round_up=True)
        warnings.warn(
            f"within --max-memory {binary_size(plan.max_memory)} the analysis reads each stack of pooled "
            f"vectors {passes} times (the same numbers, more time); --max-memory {need.replace(' ', '')} reads "
            "it once",
            UserWarning,
            stacklevel=3,
        )
    if any(v.has("drop-bos") for v in plan.specs):
        alone = np.flatnonzero(passages.starts_with_bos & (passages.lengths < 2))
        if len(alone):
            raise EffdepthError(
                f"drop-bos pools from the token after BOS, but passage(s) {', '.join(map(str, alone[:8]))} "
                "hold BOS alone and would pool to zero vectors; drop them or leave out drop-bos views"
            )
    if any(v.has("drop-pos0") for v in plan.specs):
        single = np.flatnonzero(passages.lengths < 2)
        if len(single):
            raise EffdepthError(
                f"drop-pos0 pools from the second token, but passage(s) {', '.join(map(str, single[:8]))} "
                "hold one token and would pool to zero vectors; give passages of 2+ tokens (--seq-len 2 "
                "or more) or leave out drop-pos0 views"
            )


def _analysis_units(passages, analysis: AnalysisOptions, plan):
    """The bootstrap's units of the largest stack the analysis will form (their samples: one per passage, or
    the token reduction's most)."""
    tokens = analysis.token_reduction
    offsets = None
    if tokens is not None:
        offsets = tokens.offsets(passages.lengths, passages.starts_with_bos, views_variants(analysis.view_specs))
    return analysis_units(passages.num_passages, plan, offsets)


def _discard_unsaved(folder: Path, temporary: bool, run) -> None:
    """After a failure: pooled vectors that no checkpoint names cannot be resumed, so they go (and the
    folder made for them, when that leaves it empty). A checkpoint that was saved (an interrupted or
    long run, or any --resume) stays for ``--resume``."""
    if temporary:
        shutil.rmtree(folder, ignore_errors=True)
        return
    if run.resume or (folder / "state.json").is_file():
        return
    shutil.rmtree(folder / POOLED_DIR, ignore_errors=True)
    try:
        folder.rmdir()
    except OSError:
        pass


def _measure_into(
    folder: Path,
    temporary: bool,
    prepared,
    analysis: AnalysisOptions,
    run,
    fingerprint: dict,
    variants,
    width: int,
    started: float,
) -> Result:
    """The forward passes into the store in ``folder``, then the analysis (see :func:`measure_passages`)."""
    lm, arch, passages = prepared.lm, prepared.arch, prepared.tokens
    tokens = analysis.token_reduction
    order = np.argsort(-passages.lengths, kind="stable")  # longest first: memory trouble shows at once
    offsets = None if tokens is None else tokens.offsets(passages.lengths, passages.starts_with_bos, variants)
    store, facts = _open_store(folder, run, fingerprint, passages, variants, arch.num_layers + 1, width, offsets)
    facts["batch_size_used"] = analysis.batch_size
    pooler = (
        PassagePooler(variants, arch.num_layers)
        if tokens is None
        else TokenSampler(variants, arch.num_layers, k=tokens.k, seed=tokens.seed)
    )
    pad_id = _pad_id(lm)
    written = store.written
    last_save = time.monotonic()
    with graceful_interrupts() as interrupted:
        try:
            forward = PassageForward(analysis.batch_size, analysis.states, pad_id, run.progress)
            for indices, pooled, sums in pooled_batches(
                lm.model, arch, passages, order, pooler, forward, start=written, facts=facts
            ):
                _check_finite(pooled, indices, lm)
                store.write(indices, as_numpy(pooled), sums.numpy())
                written += len(indices)
                if run.checkpoint is not None and (
                    interrupted or time.monotonic() - last_save > run.checkpoint_every_s
                ):
                    _save_progress(store, written, run, fingerprint)
                    last_save = time.monotonic()
                if interrupted:
                    break
        except KeyboardInterrupt:
            interrupted.signal = interrupted.signal or signal.SIGINT
            if run.checkpoint is not None:
                _save_progress(store, written, run, fingerprint)
    if interrupted:
        where = ""
        if run.checkpoint is not None:
            command = (run.record or {}).get("command") or f"--resume {Path(run.checkpoint).parent}"
            where = f"; pooled vectors saved in {run.checkpoint}, continue with: {command}"
        raise MeasurementInterrupted(
            f"interrupted by {signal.Signals(interrupted.signal).name} after {written} of "
            f"{passages.num_passages} passages{where}",
            interrupted.signal,
        )
    if run.checkpoint is not None:  # every passage pooled: a failed analysis resumes without a forward pass
        _save_progress(store, written, run, fingerprint)
    else:
        store.commit(written)
    result = analyse_store(store, analysis, progress=run.progress, seq_len=prepared.load.seq_len)
    result.config.update(passage_config(prepared, analysis))
    result.provenance.update(_provenance(prepared, started, facts))
    result.pooled = store.folder
    mark_movable(store.folder)
    if temporary:
        _remove_with(result, store.folder.parent)
    elif run.checkpoint is not None:
        remove_checkpoint(Path(run.checkpoint))  # its files; the pooled vectors stay until the result is saved
    return result


def analyse_store(
    store: PooledStore,
    analysis: AnalysisOptions,
    *,
    progress: bool = True,
    device: str | None = None,
    seq_len: int | None = None,
) -> Result:
    """The :class:`Result` of the pooled vectors in ``store`` under ``analysis`` (config and provenance
    hold only the analysis; the caller adds what was measured). ``extras`` holds the passage lengths
    (``seq_len``: the longest a passage could be), the confounds table and the sample-size curve."""
    arrays = store.arrays()
    check_stored_variants(analysis, list(arrays), list(arrays))
    offsets = {v: store.offsets(v) for v in arrays} if store.reduction == "tokens" else None
    return analysed_result(
        arrays,
        analysis,
        token_sums=np.asarray(store.token_sums),
        lengths=store.lengths,
        seq_len=seq_len,
        progress=progress,
        device=device or _analysis_device(),
        offsets=offsets,
    )


def analysed_result(
    pooled: dict,
    analysis: AnalysisOptions,
    *,
    token_sums=None,
    lengths=None,
    seq_len: int | None = None,
    progress: bool = True,
    device: str = "cpu",
    offsets: dict | None = None,
) -> Result:
    """The :class:`Result` of pooled vectors (``{variant: (L+1, N, d)}``) under ``analysis``: every view
    under every similarity, and in ``extras`` the passage lengths, the confounds table and the sample-size
    curve (docs/method.md#passage-mode); config and provenance hold only the analysis. ``offsets``: the
    token reduction's samples (:func:`~effdepth.numerics.analysis.analyse_pooled`)."""
    plan = analysis.analysis_plan(device=device)
    with tqdm(total=len(plan.specs), desc="analysing views", unit="view", disable=not progress, leave=False) as bar:
        out = analyse_pooled(
            pooled, plan, token_sums=token_sums, lengths=lengths, progress=_view_started(bar), offsets=offsets
        )
        bar.update(bar.total - bar.n)
    by_sim = {sim: view_results(views) for sim, views in out["similarities"].items()}
    primary, *rest = plan.similarities
    config = {
        **analysis.to_dict(),
        "similarity": primary,
        "similarities": list(plan.similarities),
        "passage_analysis": out["analysis"],
        "similarity_labels": {s: SIMILARITIES[s].label for s in plan.similarities},
    }
    extras = {"confounds": out["confounds"], "sample_size": out["sample_size"]}
    if offsets is not None:  # the samples are tokens: the confounds of a passage's mean do not apply
        config["reduction"] = {
            "samples": "tokens",
            "tokens_per_passage": analysis.tokens_per_passage,
            "per_variant": {v: int(o[-1]) for v, o in offsets.items()},
        }
        extras = {"sample_size": out["sample_size"]}
    if lengths is not None:
        extras = {"passage_lengths": length_distribution(lengths, seq_len), **extras}
    return Result(
        views=by_sim[primary], config=config, provenance={}, others={s: by_sim[s] for s in rest}, extras=extras
    )


class PooledBatches:
    """States given batch by batch (:class:`effdepth.Accumulator`, :func:`effdepth.from_states`): each
    passage's samples as :func:`effdepth.measure` takes them (its mean, float64 sums kept float32 as its store
    keeps them; or under ``pooling="none"`` its tokens, drawn as the token reduction draws them), and the
    passages' lengths; ``result`` analyses them as measure does."""

    def __init__(self, analysis: AnalysisOptions):
        bos = [v.name for v in analysis.view_specs if v.has("drop-bos")]
        if bos:
            raise EffdepthError(
                f"view {bos[0]} needs to know which passages start with BOS, and states do not say; use "
                "drop-pos0 (position 0 left out, whatever it holds) or effdepth.measure"
            )
        self.tokens = analysis.token_reduction
        self.variants = (
            variants_for(analysis.view_specs) if self.tokens is None else views_variants(analysis.view_specs)
        )
        self.reset()

    def reset(self) -> None:
        self._pooled, self._sums, self._lengths = [], [], []

    @property
    def sequences(self) -> int:
        return int(sum(len(n) for n in self._lengths))

    @property
    def tokens_seen(self) -> int:
        return int(sum(n.sum() for n in self._lengths))

    def update(self, states: torch.Tensor, mask: torch.Tensor | None) -> None:
        real = torch.ones(states.shape[1:3], dtype=torch.bool) if mask is None else mask
        lengths = real.sum(dim=1)
        if bool((lengths == 0).any()):
            raise EffdepthError(
                f"passage {int(torch.nonzero(lengths == 0)[0])} of this batch has no real token by its "
                "mask; leave it out, or mark its tokens with True/1"
            )
        num_layers, bos = int(states.shape[0]) - 1, torch.zeros(states.shape[1], dtype=torch.bool)
        if self.tokens is None:
            pooler = PassagePooler(self.variants, num_layers)
            pooler.start(real.to(states.device), bos)
        else:
            pooler = TokenSampler(self.variants, num_layers, k=self.tokens.k, seed=self.tokens.seed)
            pooler.start(real.to(states.device), bos, range(self.sequences, self.sequences + len(lengths)))
        for layer in range(states.shape[0]):
            pooler.layer(layer, states[layer])
        pooler.finish()
        if self.tokens is None:  # (V, L+1, B, d), as the store keeps it
            self._pooled.append(pooler.pooled.cpu().numpy().astype(np.float32))
        else:
            self._pooled.append({v: x.numpy().astype(np.float32) for v, x in pooler.output().items()})
        self._sums.append(pooler.sums.cpu().numpy())
        self._lengths.append(lengths.cpu().numpy().astype(np.int64))

    def result(self, analysis: AnalysisOptions, num_layers: int, model: dict) -> Result:
        lengths = np.concatenate(self._lengths)
        if self.tokens is None:
            pooled = np.concatenate(self._pooled, axis=2)
            arrays, offsets = {v: pooled[i] for i, v in enumerate(self.variants)}, None
        else:
            arrays = {v: np.concatenate([batch[v] for batch in self._pooled], axis=1) for v in self.variants}
            offsets = self.tokens.offsets(lengths, np.zeros(len(lengths), dtype=bool), self.variants)
        width = next(iter(arrays.values())).shape[-1]
        check_samples(len(lengths), width, num_layers, analysis.analysis_plan())
        result = analysed_result(
            arrays,
            analysis,
            token_sums=np.concatenate(self._sums, axis=1).transpose(1, 0, 2),
            lengths=lengths,
            seq_len=int(lengths.max()),
            progress=False,
            offsets=offsets,
        )
        result.config.update(
            {
                "pooling": analysis.pooling,
                "num_layers": num_layers,
                "num_passages": len(lengths),
                "num_seqs": len(lengths),
                "seq_len": int(lengths.max()),
                "mean_passage_tokens": round(float(lengths.mean()), 2),
                "states": "blocks",
                "given": "states (effdepth.Accumulator)",
            }
        )
        result.provenance = provenance_record(model=model, tokens_measured=int(lengths.sum()))
        return result


def from_pooled(
    pooled,
    *,
    lengths=None,
    views=("default",),
    similarity=None,
    include_embedding: bool = False,
    bootstrap: int = 1000,
    seed: int = 0,
    bootstrap_units: int | None = None,
    progress: bool = False,
) -> Result:
    """The paper's number from pooled vectors you already have: one vector per passage and state.

    ``pooled`` is ``(L+1, N, d)`` (S_0..S_L of N passages) or a list of L+1 ``(N, d)`` matrices;
    ``lengths`` each passage's token count (for the ``length`` control and the length distribution);
    the analysis is :func:`effdepth.measure`'s passage mode (both CKA estimators, the references,
    the confounds table without the drop-pos0 control, whose pooling needs the tokens, and the
    sample-size curve), so the same pooled vectors give measure's numbers.

    >>> import effdepth, numpy as np
    >>> walk = np.cumsum(np.random.default_rng(0).normal(size=(4, 64, 16)), axis=0)   # S_0..S_3 of 64 passages
    >>> r = effdepth.from_pooled(walk, bootstrap=0)
    >>> r.passages, r.default.num_states, round(r.default.reference, 3)
    (True, 3, 1.5)
    >>> effdepth.from_pooled(walk[:, :3])
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: pooled vectors of 3 passage(s): similarity across passages needs at least 4 (the debiased estimator pairs four distinct passages); give 4 or more rows per state
    """
    from effdepth.numerics.pooled_input import checked_pooled

    array = checked_pooled(pooled, lengths)
    options = {
        "views": views,
        "include_embedding": include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
        "similarity": similarity,
        "bootstrap_units": bootstrap_units,
    }
    analysis = AnalysisOptions(pooling="mean", **{k: v for k, v in options.items() if v is not None})
    missing = [v.name for v in analysis.view_specs if v.variant != "default"]
    if missing:
        raise EffdepthError(
            f"view(s) {', '.join(missing)} pool tokens otherwise than the mean, and only the mean pooled "
            "vectors were given; use views made of default, length and top{k}pc"
        )
    check_samples(array.shape[1], array.shape[2], array.shape[0] - 1, analysis.analysis_plan())
    result = analysed_result(
        {"default": array}, analysis, lengths=None if lengths is None else np.asarray(lengths), progress=progress
    )
    result.config.update(
        {
            "num_layers": array.shape[0] - 1,
            "num_passages": array.shape[1],
            "given": "pooled vectors (effdepth.from_pooled)",
        }
    )
    result.provenance = provenance_record(model={"id": "pooled vectors", "source": "given"})
    return result


def _view_started(bar):
    """The analysis's progress callback: a view starting means the one before it is done."""
    started = False

    def view_started(name: str) -> None:
        nonlocal started
        if started:
            bar.update(1)
        started = True
        bar.set_postfix_str(name)

    return view_started


#: The analysis options ``analyse_saved`` may change: what applies after the forward pass.
ANALYSIS_CHANGES = AnalysisOptions.AFTER_FORWARD


def analyse_saved(path, *, progress: bool = True, device: str | None = None, **changes) -> Result:
    """A saved passage-mode result analysed again from its pooled vectors, with ``changes`` to its
    analysis options (:data:`ANALYSIS_CHANGES`); no model is loaded. Unchanged options give the
    saved numbers exactly.

    >>> import tempfile, torch, effdepth
    >>> from effdepth.models.tiny import tiny_model
    >>> r = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=0, progress=False)
    >>> folder = tempfile.mkdtemp(); _ = r.save(folder)
    >>> analyse_saved(folder, progress=False).default.deff == r.default.deff
    True
    """
    from effdepth.results.loading import load

    saved = load(path)
    if not isinstance(saved, Result) or not saved.passages:
        raise EffdepthError(
            f"{path} is an old token-mode result (statistics summed over tokens, no samples kept); effdepth "
            "analyse re-analyses the samples a measurement keeps: measure again"
        )
    if saved.pooled is None:
        raise EffdepthError(
            f"{path} has no pooled vectors beside its result.json (a folder pooled/); measure again with "
            "--out DIR to keep them"
        )
    unknown = sorted(set(changes) - set(ANALYSIS_CHANGES))
    if unknown:
        raise EffdepthError(
            f"effdepth analyse cannot change {', '.join(unknown)}: it applies before the forward pass; measure again"
        )
    c = saved.config
    kept = {
        name: c.get("similarities" if name == "similarity" else name)
        for name in ANALYSIS_CHANGES
        if c.get("similarities" if name == "similarity" else name) is not None
    }
    options = {**kept, **changes}
    analysis = AnalysisOptions(
        pooling=c.get("pooling", "mean"),
        tokens_per_passage=(c.get("reduction") or {}).get("tokens_per_passage"),
        states=c.get("states", "blocks"),
        protocol=c.get("protocol"),
        batch_size=c.get("batch_size", 8),
        **{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()},
    )
    store = PooledStore.open(saved.pooled)
    check_stored_variants(analysis, store.meta["variants"], c.get("views") or ["default"])
    result = analyse_store(store, analysis, progress=progress, device=device, seq_len=c.get("seq_len"))
    measured = {k: v for k, v in c.items() if k not in result.config}
    result.config = {**measured, **result.config}
    result.provenance = dict(saved.provenance)
    result.provenance["analysed"] = {
        "created": now(),
        "code": code_version(),
        "changes": {k: _plain(v) for k, v in changes.items()},
    }
    result.extras = {**saved.extras, **result.extras}
    result.pooled = saved.pooled
    return result


def check_stored_variants(analysis: AnalysisOptions, stored, measured_views) -> None:
    """Views whose tokens pool otherwise than the stored variants need a forward pass: one line that
    says what was stored and the --views that store it.

    >>> check_stored_variants(AnalysisOptions(views="top5pc,drop-bos"), ["default"], ["default", "top1pc"])
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view drop-bos pools tokens as drop-bos, but the forward pass stored only default; measure again with --views default,top1pc,drop-bos to store it (effdepth analyse recomputes top{k}pc views, similarities, intervals, the embedding state and the calibrated references, not what was pooled)
    """
    missing = [v for v in analysis.view_specs if v.variant not in stored]
    if not missing:
        return
    names = ", ".join(v.name for v in missing)
    variants = ", ".join(dict.fromkeys(v.variant for v in missing))
    views = ",".join(dict.fromkeys([*measured_views, *(v.name for v in missing)]))
    plural = len(missing) > 1
    raise EffdepthError(
        f"view{'s' if plural else ''} {names} pool{'' if plural else 's'} tokens as {variants}, but the "
        f"forward pass stored only {', '.join(stored)}; measure again with --views {views} to store "
        f"{'them' if plural else 'it'} (effdepth analyse recomputes top{{k}}pc views, similarities, "
        "intervals, the embedding state and the calibrated references, not what was pooled)"
    )


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


def passage_config(prepared, analysis: AnalysisOptions) -> dict:
    """What was measured: sizes, special tokens, which states, the architecture's paths."""
    passages, arch = prepared.tokens, prepared.arch
    return {
        "pooling": analysis.pooling,
        "seq_len": int(prepared.load.seq_len),
        "num_seqs": passages.num_passages,
        "num_passages": passages.num_passages,
        "mean_passage_tokens": round(float(passages.lengths.mean()), 2),
        "bos": passages.info.get("bos"),
        "passage_split": passages.info.get("split"),
        "states": analysis.states,
        "states_meaning": (
            "hooks on the decoder blocks, before the final norm"
            if analysis.states == "blocks"
            else "transformers' hidden_states[1:]: the blocks' outputs, the last through the final norm"
        ),
        "num_layers": arch.num_layers,
        "blocks_path": arch.paths.get("blocks"),
        "embedding_path": arch.paths.get("embedding"),
        "architecture_source": arch.paths.get("source"),
        "protocol": analysis.protocol,
    }


def passage_fingerprint(prepared, analysis: AnalysisOptions, variants) -> dict:
    """What stored pooled vectors belong to: a resume with anything else is refused. The analysis
    options (views beyond their pooling, similarities, intervals) are not in it: they apply afterwards."""
    info = prepared.lm.info
    local = info.get("source") in ("local", "gguf")
    return {
        "model": info.get("path") if local else info.get("id"),
        "revision": info.get("revision"),
        "commit": info.get("commit"),
        "passages_sha256": prepared.tokens.sha256,
        "states": analysis.states,
        "variants": list(variants),
        "num_layers": prepared.arch.num_layers,
        "effdepth": __version__,
    }


def _open_store(
    folder: Path, run, fingerprint: dict, passages, variants, layers: int, width: int, offsets: dict | None = None
) -> tuple:
    facts = {"oom_retries": 0, "resumed_from": 0}
    store_dir = folder / POOLED_DIR
    if run.resume:
        if run.checkpoint is None:
            raise EffdepthError("resume needs the folder of the interrupted run (--resume DIR)")
        load_checkpoint(folder)  # one line when nothing was saved there, or it is damaged
        store = PooledStore.open(store_dir, writable=True)
        saved = store.meta.get("fingerprint", {})
        differ = sorted(k for k in set(saved) | set(fingerprint) if saved.get(k) != fingerprint.get(k))
        if differ:
            raise CheckpointMismatch(
                f"cannot resume: the saved run differs in {', '.join(differ)}; rerun with the same "
                "model, corpus and options, or start over without --resume"
            )
        facts["resumed_from"] = store.written
        return store, facts
    store = PooledStore.create(
        store_dir,
        variants,
        layers=layers,
        width=width,
        lengths=passages.lengths,
        starts_with_bos=passages.starts_with_bos,
        extra={"fingerprint": fingerprint},
        offsets=offsets,
    )
    return store, facts


def _save_progress(store: PooledStore, written: int, run, fingerprint: dict) -> None:
    store.commit(written)
    save_checkpoint(
        Path(run.checkpoint),
        {},
        {"fingerprint": fingerprint, "run": run.record, "pooled": POOLED_DIR, "written": written},
    )


def _store_folder(run) -> tuple:
    """``(folder, temporary)``: the checkpoint folder, or a new temporary one."""
    if run.checkpoint is not None:
        folder = Path(run.checkpoint)
        folder.mkdir(parents=True, exist_ok=True)
        return folder, False
    return temporary_folder(), True


def _remove_with(result: Result, folder: Path) -> None:
    """A temporary store lives as long as its result, unless :meth:`Result.save` moved it."""
    weakref.finalize(result, shutil.rmtree, str(folder), True)


def _hidden_size(lm) -> int:
    width = lm.info.get("hidden_size")
    if not width:
        embedding = lm.model.get_input_embeddings() if hasattr(lm.model, "get_input_embeddings") else None
        width = getattr(embedding, "embedding_dim", None)
    if not width:
        raise EffdepthError(
            "cannot tell the model's hidden size (no hidden_size in its config, no input embedding); "
            "passage mode needs it to store pooled vectors"
        )
    return int(width)


def passage_loss(prepared, passages, batch_size: int) -> dict:
    """Mean next-token loss and perplexity of the full model (LM head included) over ``passages``, padding
    masked, longest first; any hooks registered on the model (a carry, skipped blocks) apply."""
    from effdepth.numerics.loss import LossAccumulator

    model = prepared.lm.model
    device = next(model.parameters()).device
    pad = _pad_id(prepared.lm)
    loss = LossAccumulator()
    order = np.argsort(-passages.lengths, kind="stable")
    step = max(1, int(batch_size))
    with torch.no_grad():
        for start in range(0, len(order), step):
            ids, mask = passages.batch(order[start : start + step], pad_id=pad)
            ids, mask = ids.to(device), mask.to(device)
            loss.update(model(input_ids=ids, attention_mask=mask).logits, ids, mask)
    return loss.compute()


def _pad_id(lm) -> int:
    tok = getattr(lm, "tokenizer", None)
    for name in ("pad_token_id", "eos_token_id"):
        value = getattr(tok, name, None)
        if isinstance(value, int):
            return value
    return 0


def as_numpy(pooled):
    """A batch's pooled vectors (a tensor) or the token reduction's samples (a dict of tensors) as numpy."""
    return {v: x.numpy() for v, x in pooled.items()} if isinstance(pooled, dict) else pooled.numpy()


def _check_finite(pooled, indices, lm) -> None:
    """One line for non-finite states in a batch: ``pooled`` (V, L+1, B, d), or the token reduction's
    ``{variant: (L+1, s, d)}``."""
    parts = list(pooled.values()) if isinstance(pooled, dict) else [pooled.transpose(0, 1)]  # each (L+1, ...)
    finite = torch.stack([torch.isfinite(x.reshape(x.shape[0], -1)).all(dim=1) for x in parts])  # (parts, L+1)
    if bool(finite.all()):
        return
    layer = int(torch.nonzero(~finite.all(dim=0))[0])
    dtype = lm.info.get("dtype")
    hint = " (float16 overflows on massive activations: use --dtype bfloat16 or float32)" if dtype == "float16" else ""
    shown = ", ".join(str(int(i)) for i in list(indices)[:4]) + (", ..." if len(indices) > 4 else "")
    raise EffdepthError(
        f"non-finite states at layer {layer} (S_{layer}, model dtype {dtype}) in passages {shown}: the model "
        f"overflowed or was given non-finite weights{hint}"
    )


def _analysis_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _provenance(prepared, started: float, facts: dict) -> dict:
    passages = prepared.tokens
    corpus = {"name": passages.name, "sha256": passages.sha256, **passages.info}
    return provenance_record(
        model=prepared.lm.info, corpus=corpus, started=started, tokens_measured=passages.tokens, run=facts
    )
