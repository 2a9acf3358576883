"""The default path, top to bottom: passages -> forward with hooks -> samples -> store -> analysis -> result."""

from __future__ import annotations

import shutil
import signal
import time
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from effdepth.data.passages import take_identity
from effdepth.errors import EffdepthError
from effdepth.measurement.checkpoint import (
    CheckpointMismatch,
    MeasurementInterrupted,
    graceful_interrupts,
    load_checkpoint,
    remove_checkpoint,
    save_checkpoint,
)
from effdepth.measurement.pooling import PassageForward, pad_id, pool_into, pooled_batches
from effdepth.numerics.analysis import SIMILARITIES, SizedPlan, analyse_pooled, one_pass_bytes, sized_plan
from effdepth.numerics.confounds import length_distribution
from effdepth.numerics.hsic_plan import byte_size
from effdepth.options import AnalysisOptions
from effdepth.results.provenance import provenance_record
from effdepth.results.result import Result, view_results
from effdepth.results.store import POOLED_DIR, PooledStore, mark_movable, temporary_folder
from effdepth.results.version import __version__

#: What ``states="hidden"`` measures, as a result's config says it.
HIDDEN_MEANING = "transformers' hidden_states[1:]: the blocks' outputs, the last through the final norm"
#: More passes than this over the pooled vectors per stack, and a run says how much memory reads them once.
MANY_PASSES = 16


def measure_passages(prepared, analysis: AnalysisOptions, *, run, started: float | None = None) -> Result:
    """Measure prepared passages (``prepared.tokens`` is :class:`~effdepth.data.passages.Passages`).

    With ``run.checkpoint`` (a folder) the samples are written under it and a stopped run resumes
    (``run.resume``); without one they go to a temporary folder that :meth:`Result.save` moves beside
    ``result.json``.
    """
    started = time.perf_counter() if started is None else started
    plan = measurement_plan(
        prepared.tokens, prepared.arch.num_layers, hidden_size(prepared.lm), analysis, device=analysis_device()
    )
    fingerprint = {**passage_fingerprint(prepared, analysis, plan.variants), **plan.reduction.fingerprint()}
    folder = _store_folder(run)
    try:
        return _measure_into(folder, prepared, plan, run, fingerprint, started)
    except BaseException:
        _discard_unsaved(folder, run)
        raise


@dataclass(frozen=True)
class MeasurementPlan:
    """What one measurement does, made once before its first forward pass."""

    analysis: AnalysisOptions
    reduction: object  # MeanReduction or TokenReduction (numerics.pooling, numerics.sampling)
    variants: tuple  # the stored variants
    passages: object
    sized: SizedPlan  # the analysis sized for the passages' samples (their offsets under the token reduction)

    def pooler(self):
        return self.reduction.pooler(self.variants, self.sized.num_layers)

    def store(self, folder, rows=None, extra: dict | None = None) -> PooledStore:
        """A new store for the passages' samples, or for those of ``rows`` (a torchrun rank's shard)."""
        rows = slice(None) if rows is None else rows
        lengths, bos = self.passages.lengths[rows], self.passages.starts_with_bos[rows]
        return PooledStore.create(
            folder,
            self.variants,
            layers=self.sized.num_layers + 1,
            width=self.sized.width,
            lengths=lengths,
            starts_with_bos=bos,
            extra=extra,
            offsets=self.reduction.offsets(lengths, bos, self.variants),
            identity=take_identity(self.passages.identity, rows),
        )


def measurement_plan(passages, num_layers: int, width: int, analysis: AnalysisOptions, device: str = "cpu"):
    """The :class:`MeasurementPlan` of ``passages``, after everything the analysis will refuse is refused
    before the first forward pass and the first file.

    >>> from effdepth.data.passages import Passages
    >>> p = Passages.from_rows([[1, 2]] * 4)
    >>> measurement_plan(p, 1, 8, AnalysisOptions(bootstrap=0))
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: the model has one layer: D_eff compares at least two states; add --include-embedding to compare S_0 with S_1, or measure a deeper model
    """
    reduction = analysis.reduction
    variants = reduction.variants(analysis.view_specs)
    plan = analysis.analysis_plan(device=device)
    sized = sized_plan(
        plan,
        passages.num_passages,
        num_layers,
        width,
        reduction.offsets(passages.lengths, passages.starts_with_bos, variants),
    )
    passes = sized.memory["stack"]["passes"]
    if passes > MANY_PASSES:
        need = byte_size(one_pass_bytes(sized.units.samples, num_layers, width, plan, sized.units), round_up=True)
        warnings.warn(
            f"within --max-memory {byte_size(plan.max_memory)} the analysis reads each stack of pooled "
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
    return MeasurementPlan(analysis, reduction, variants, passages, sized)


def _measure_into(folder: Path, prepared, plan: MeasurementPlan, run, fingerprint: dict, started: float) -> Result:
    """The forward passes into the store in ``folder``, then the analysis (see :func:`measure_passages`)."""
    lm, arch, passages = prepared.lm, prepared.arch, prepared.tokens
    store, facts = _open_store(folder, run, fingerprint, plan)
    facts["batch_size_used"] = plan.analysis.batch_size
    order = np.argsort(-passages.lengths, kind="stable")  # longest first: memory trouble shows at once
    forward = PassageForward.of(lm, plan.analysis, run.progress)
    with graceful_interrupts() as interrupted:
        batches = pooled_batches(
            lm.model, arch, passages, order, plan.pooler(), forward, start=store.written, facts=facts
        )
        try:
            pool_into(
                store, batches, dtype=forward.dtype, after_batch=_checkpoints(store, run, fingerprint, interrupted)
            )
        except KeyboardInterrupt:
            interrupted.signal = interrupted.signal or signal.SIGINT
            if run.checkpoint is not None:
                _save_progress(store, run, fingerprint)
    if interrupted:
        where = ""
        if run.checkpoint is not None:
            command = (run.record or {}).get("command") or f"--resume {Path(run.checkpoint).parent}"
            where = f"; pooled vectors saved in {run.checkpoint}, continue with: {command}"
        raise MeasurementInterrupted(
            f"interrupted by {signal.Signals(interrupted.signal).name} after {store.filled} of "
            f"{passages.num_passages} passages{where}",
            interrupted.signal,
        )
    if run.checkpoint is None:
        store.commit()
        result = measured_result(store, plan, prepared, started=started, facts=facts, progress=run.progress)
        _remove_with(result, store.folder.parent)
        return result
    _save_progress(store, run, fingerprint)  # every passage pooled: a failed analysis resumes without a forward pass
    result = measured_result(store, plan, prepared, started=started, facts=facts, progress=run.progress)
    remove_checkpoint(Path(run.checkpoint))  # its files; the pooled vectors stay until the result is saved
    return result


def _checkpoints(store: PooledStore, run, fingerprint: dict, interrupted):
    """After each batch: a checkpoint when due or at an interrupt; true at an interrupt."""
    last_save = time.monotonic()

    def after_batch() -> bool:
        nonlocal last_save
        if run.checkpoint is not None and (interrupted or time.monotonic() - last_save > run.checkpoint_every_s):
            _save_progress(store, run, fingerprint)
            last_save = time.monotonic()
        return bool(interrupted)

    return after_batch


def measured_result(store: PooledStore, plan: MeasurementPlan, prepared, *, started: float, facts: dict, progress=True):
    """The :class:`Result` of a measurement's store: its analysis, what was measured, and provenance."""
    result = analyse_store(store, plan.analysis, progress=progress, seq_len=prepared.load.seq_len, sized=plan.sized)
    result.config.update(passage_config(prepared, plan.analysis))
    result.provenance = provenance_record(model=prepared.lm.info, passages=prepared.tokens, started=started, run=facts)
    result.pooled = store.folder
    mark_movable(store.folder)
    return result


def analyse_store(
    store: PooledStore,
    analysis: AnalysisOptions,
    *,
    progress: bool = True,
    device: str | None = None,
    seq_len: int | None = None,
    sized: SizedPlan | None = None,
) -> Result:
    """The :class:`Result` of the pooled vectors in ``store`` under ``analysis`` (``sized``: the plan a
    measurement made before its forward passes); the caller adds what was measured."""
    arrays = store.arrays()
    return analysed_result(
        arrays,
        analysis,
        sized=sized,
        token_sums=np.asarray(store.token_sums),
        lengths=store.lengths,
        seq_len=seq_len,
        progress=progress,
        device=device or analysis_device(),
        offsets={v: store.offsets(v) for v in arrays} if store.reduction == "tokens" else None,
    )


def analysed_result(
    pooled: dict,
    analysis: AnalysisOptions,
    *,
    sized: SizedPlan | None = None,
    token_sums=None,
    lengths=None,
    seq_len: int | None = None,
    progress: bool = True,
    device: str = "cpu",
    offsets: dict | None = None,
) -> Result:
    """The :class:`Result` of pooled vectors (``{variant: (L+1, N, d)}``) under ``analysis``: every view
    under every similarity, and in ``extras`` the passage lengths, the confounds table and the sample-size
    curve; config and provenance hold only the analysis."""
    plan = sized or analysis.analysis_plan(device=device)
    with tqdm(total=len(analysis.views), desc="analysing views", unit="view", disable=not progress, leave=False) as bar:
        out = analyse_pooled(
            pooled, plan, token_sums=token_sums, lengths=lengths, progress=_view_started(bar), offsets=offsets
        )
        bar.update(bar.total - bar.n)
    by_sim = {sim: view_results(views) for sim, views in out["similarities"].items()}
    primary, *rest = analysis.similarity
    config = {
        **analysis.to_dict(),
        "similarity": primary,
        "similarities": list(analysis.similarity),
        "passage_analysis": out["analysis"],
        "similarity_labels": {s: SIMILARITIES[s].label for s in analysis.similarity},
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
    analysis options (:data:`ANALYSIS_CHANGES`); unchanged options give the saved numbers exactly.

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
    analysis = saved_analysis(c, **changes)
    store = PooledStore.open(saved.pooled)
    check_stored_variants(analysis, store.meta["variants"], c.get("views") or ["default"])
    result = analyse_store(store, analysis, progress=progress, device=device, seq_len=c.get("seq_len"))
    measured = {k: v for k, v in c.items() if k not in result.config}
    result.config = {**measured, **result.config}
    result.provenance = provenance_record(
        saved=saved.provenance, changes={k: list(v) if isinstance(v, tuple) else v for k, v in changes.items()}
    )
    result.extras = {**saved.extras, **result.extras}
    result.pooled = saved.pooled
    return result


def saved_analysis(config: dict, **changes) -> AnalysisOptions:
    """The analysis options a saved result was measured with (its ``config``), with ``changes`` to those
    that apply after the forward pass (:data:`ANALYSIS_CHANGES`)."""
    kept = {
        name: config.get("similarities" if name == "similarity" else name)
        for name in ANALYSIS_CHANGES
        if config.get("similarities" if name == "similarity" else name) is not None
    }
    options = {**kept, **changes}
    return AnalysisOptions(
        pooling=config.get("pooling", "mean"),
        tokens_per_passage=(config.get("reduction") or {}).get("tokens_per_passage"),
        states=config.get("states", "blocks"),
        protocol=config.get("protocol"),
        batch_size=config.get("batch_size", 8),
        **{k: tuple(v) if isinstance(v, list) else v for k, v in options.items()},
    )


def check_stored_variants(analysis: AnalysisOptions, stored, measured_views) -> None:
    """Views whose tokens pool otherwise than the stored variants need a forward pass: say so in one line.

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


def passage_config(prepared, analysis: AnalysisOptions) -> dict:
    """What was measured: sizes, special tokens, which states, the architecture's paths."""
    passages, arch = prepared.tokens, prepared.arch
    return {
        "pooling": analysis.pooling,
        "corpus": corpus_spec(prepared.load.corpus),
        "seq_len": int(prepared.load.seq_len),
        "num_seqs": passages.num_passages,
        "num_passages": passages.num_passages,
        "mean_passage_tokens": round(float(passages.lengths.mean()), 2),
        "bos": passages.info.get("bos"),
        "passage_split": passages.info.get("split"),
        "states": analysis.states,
        "states_meaning": "hooks on the decoder blocks, before the final norm"
        if analysis.states == "blocks"
        else HIDDEN_MEANING,
        "num_layers": arch.num_layers,
        "blocks_path": arch.paths.get("blocks"),
        "embedding_path": arch.paths.get("embedding"),
        "architecture_source": arch.paths.get("source"),
        "protocol": analysis.protocol,
    }


def corpus_spec(corpus) -> str | None:
    """The corpus as the command line names it (``shakespeare`` by default), ``None`` for one given as Python
    objects (texts, token ids), which only Python can give again.

    >>> corpus_spec(None), corpus_spec("hf:wikitext"), corpus_spec(["some text"])
    ('shakespeare', 'hf:wikitext', None)
    """
    if corpus is None:
        return "shakespeare"
    return str(corpus) if isinstance(corpus, (str, Path)) else None


def passage_fingerprint(prepared, analysis: AnalysisOptions, variants) -> dict:
    """What stored pooled vectors belong to: a resume with anything else is refused."""
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


def _open_store(folder: Path, run, fingerprint: dict, plan: MeasurementPlan) -> tuple:
    """``(store, facts)``: the store of a resumed run (its fingerprint checked), or a new one."""
    facts = {"oom_retries": 0, "resumed_from": 0}
    store_dir = folder / POOLED_DIR
    if not run.resume:
        return plan.store(store_dir, extra={"fingerprint": fingerprint}), facts
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


def _save_progress(store: PooledStore, run, fingerprint: dict) -> None:
    store.commit()
    save_checkpoint(
        Path(run.checkpoint),
        {"fingerprint": fingerprint, "run": run.record, "pooled": POOLED_DIR, "written": store.written},
    )


def _store_folder(run) -> Path:
    """The checkpoint folder, or a new temporary one."""
    if run.checkpoint is None:
        return temporary_folder()
    folder = Path(run.checkpoint)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _discard_unsaved(folder: Path, run) -> None:
    """After a failure: pooled vectors that no checkpoint names cannot be resumed, so they go; a saved
    checkpoint stays for ``--resume``."""
    if run.checkpoint is None:
        shutil.rmtree(folder, ignore_errors=True)
        return
    if run.resume or (folder / "state.json").is_file():
        return
    shutil.rmtree(folder / POOLED_DIR, ignore_errors=True)
    try:
        folder.rmdir()
    except OSError:
        pass


def _remove_with(result: Result, folder: Path) -> None:
    """A temporary store lives as long as its result, unless :meth:`Result.save` moved it."""
    weakref.finalize(result, shutil.rmtree, str(folder), True)


def hidden_size(lm) -> int:
    """The width of the model's residual stream: its config's ``hidden_size``, else its input embedding's."""
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


def analysis_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def passage_loss(prepared, passages, batch_size: int) -> dict:
    """Mean next-token loss and perplexity of the full model (LM head included) over ``passages``, padding
    masked, longest first; any hooks registered on the model (a carry, skipped blocks) apply."""
    from effdepth.numerics.loss import LossAccumulator

    model = prepared.lm.model
    device = next(model.parameters()).device
    pad = pad_id(prepared.lm)
    loss = LossAccumulator()
    order = np.argsort(-passages.lengths, kind="stable")
    step = max(1, int(batch_size))
    with torch.no_grad():
        for start in range(0, len(order), step):
            ids, mask = passages.batch(order[start : start + step], pad_id=pad)
            ids, mask = ids.to(device), mask.to(device)
            loss.update(model(input_ids=ids, attention_mask=mask).logits, ids, mask)
    return loss.compute()
