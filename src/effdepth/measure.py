"""``measure`` and ``from_states``: corpus -> batches -> states -> statistics -> metrics -> result."""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .version import __version__
from .capture.batches import is_out_of_memory, state_batches
from .capture.external import adapt_external
from .capture.registry import resolve_architecture
from .checkpoint import CheckpointMismatch, MeasurementInterrupted, graceful_interrupts, load_checkpoint, remove_checkpoint, save_checkpoint
from .errors import EffdepthError, tokenizer_hint
from .numerics.accumulate import statistics_for
from .numerics.loss import LossAccumulator
from .numerics.similarities import get_similarity
from .numerics.cka_full import check_cka_full_memory
from .numerics.streams import ViewAccumulator, calibration_prefix, fit_description, keeps_cosine_sums, real_counts
from .numerics.summary import view_summaries
from .numerics.surrogate import CalibratedReferences
from .options import DEFAULT_SIMILARITY, DEFAULTS, AnalysisOptions, LoadOptions, Options, RunOptions, validate_options
from .provenance import code_version, library_versions, machine, now
from .result import Result, view_results

__all__ = ["measure", "run_measurement", "prepare", "measure_prepared", "from_states", "Prepared", "accumulate", "result_from_accumulator",
           "validate_options", "DEFAULTS"]

SIZE_REFERENCE_EMBEDDING = "S_0 counted as one mean-size update"


def measure(model=None, corpus=None, *, checkpoint: str | Path | None = None, resume: bool = False,
            checkpoint_every_s: float = 30.0, progress: bool = True, **options) -> Result:
    """Measure the effective depth of a causal LM's residual stream.

    ``model``: a Hugging Face id, a local folder, a ``.gguf`` file, a loaded
    ``PreTrainedModel``, or ``None`` for the embedded SmolLM2-135M-Instruct.
    ``corpus``: ``None``/``"shakespeare"``, a text/JSONL file or folder,
    ``"hf:NAME[:CONFIG[:SPLIT]]"``, a list of strings, or a ``(batch, seq)``
    tensor of token ids used exactly as given.

    ``options`` are the fields of :class:`~effdepth.options.LoadOptions`
    (``revision``, ``tokenizer``, ``seq_len``, ``num_seqs``, ``seed``,
    ``add_bos``, ``dtype``, ``device``, ``device_map``, ``trust_remote_code``,
    ``allow_pickle``, ``blocks_path``, ``embedding_path``) and of
    :class:`~effdepth.options.AnalysisOptions` (``views``, ``similarity``,
    ``include_embedding``, ``pc_estimate``, ``bootstrap``, ``batch_size``),
    validated before anything loads. With ``checkpoint`` (a folder), an
    interrupted run keeps its statistics there and ``resume=True`` continues
    it. Pickle weights (``.bin``) are refused unless ``allow_pickle=True``;
    ``trust_remote_code`` is off unless asked for.

    ``model`` may also be a TransformerLens ``HookedTransformer`` /
    ``TransformerBridge`` (run through its own hooks; one with centred writing
    weights is refused unless ``allow_processed=True``) or an nnsight
    ``LanguageModel`` / ``TransformersModel`` (its Hugging Face module is
    measured); their own tokenizer is the default.

    >>> import effdepth, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64,
    ...     num_attention_heads=4, num_key_value_heads=4, vocab_size=100))
    >>> r = effdepth.measure(lm, torch.randint(0, 100, (4, 16)), bootstrap=0, progress=False)
    >>> r.default.reference
    1.5
    """
    opts = Options.build(model=model, corpus=corpus, **options)
    run = RunOptions(progress=progress, checkpoint=checkpoint, resume=resume, checkpoint_every_s=checkpoint_every_s)
    return run_measurement(opts, run)


def run_measurement(options: Options, run: RunOptions | None = None) -> Result:
    """:func:`measure` with its options already built: load, then measure.

    >>> import torch
    >>> from effdepth.tiny import tiny_model
    >>> opts = Options.build(model=tiny_model("gpt2"), corpus=torch.randint(0, 256, (4, 8)), bootstrap=0)
    >>> run_measurement(opts, RunOptions(progress=False)).default.num_states
    3
    """
    run = run or RunOptions()
    started = time.perf_counter()
    prepared = prepare(options.load, progress=run.progress, passages=options.analysis.passages)
    stored = stored_carry(prepared.lm.model)
    if options.analysis.passages:
        from .passage_measure import measure_passages

        result = measure_passages(prepared, options.analysis, run=run, started=started)
    else:
        result = measure_prepared(prepared, options.analysis, run=run, started=started)
    if stored is not None:
        result.extras["stored_carry"] = stored
    return result


def stored_carry(model) -> dict | None:
    """A checkpoint trained with a residual carry (``effdepth experiment carry``) records it in its config;
    a plain measurement runs it with lam = 1, which is not the trained model: say so (and record it)."""
    import warnings

    config = getattr(model, "config", None)
    lam = getattr(config, "effdepth_carry", None)
    if lam is None or float(lam) == 1.0:
        return None
    layers = getattr(config, "effdepth_carry_layers", None) or "all"
    layers = layers if isinstance(layers, str) else ",".join(str(x) for x in layers)
    warnings.warn(
        f"this checkpoint was trained with residual carry {float(lam):g} in blocks {layers}, but a plain measurement runs it "
        f"with carry 1 (the unmodified stream); to measure it as trained: effdepth intervene MODEL --carry {float(lam):g} "
        f"--layers {layers}, or effdepth.experiment.measure_checkpoint(path)", UserWarning, stacklevel=3)
    return {"carry": float(lam), "layers": layers, "applied": False}


@dataclass
class Prepared:
    """A loaded model, its resolved architecture, the token sequences to run and the options they came from."""

    lm: object
    arch: object
    tokens: object
    load: LoadOptions = field(default_factory=LoadOptions)

    @property
    def add_bos(self) -> bool:
        return self.load.add_bos


def prepare(load: LoadOptions | Options, *, progress: bool = True, passages: bool = False) -> Prepared:
    """Load the model and the corpus once, for one or several measurements
    (e.g. the carry values of an intervention). With ``passages``, the corpus
    becomes :class:`~effdepth.data.passages.Passages` (passage mode), else
    fixed-length token sequences (token mode).

    >>> import torch
    >>> from effdepth.tiny import tiny_model
    >>> p = prepare(LoadOptions(model=tiny_model("llama"), corpus=torch.randint(0, 256, (2, 8))), progress=False)
    >>> p.arch.num_layers, tuple(p.tokens.input_ids.shape)
    (3, (2, 8))
    """
    from .data.corpus import is_token_ids, load_corpus
    from .hub import check_measure_inputs
    from .models import (ModelSource, check_sequence_length, load_model, load_named_tokenizer, load_tokenizer, locate_model,
                         prepare_source, source_config)

    load = load.load if isinstance(load, Options) else load
    # TransformerLens and nnsight objects (None for anything else): measured through their own hooks or module.
    external = adapt_external(load.model, allow_processed=load.allow_processed)
    source, tokenizer = load.model, load.tokenizer
    if external is not None:
        source = external.model
        tokenizer = tokenizer if tokenizer is not None else external.tokenizer
    if isinstance(tokenizer, (str, Path)):  # --tokenizer PATH_OR_ID
        tokenizer = load_named_tokenizer(tokenizer)
    # Tokenizer and corpus first: a bad corpus fails in seconds, before the weights load.
    if not isinstance(source, torch.nn.Module):
        if not isinstance(source, ModelSource):
            source = locate_model(source, revision=load.revision, trust_remote_code=load.trust_remote_code)
    # Offline, or with no way to the hub: fail in seconds when the cache lacks the model or corpus.
    on_hub = isinstance(source, ModelSource) and source.info.get("source") == "hub"
    check_measure_inputs(source.info["id"] if on_hub else None, source.kwargs.get("revision") if on_hub else None,
                         load.corpus, allow_pickle=load.allow_pickle)
    if not isinstance(source, torch.nn.Module):
        # A .gguf file's first load: parsed once into a dequantised copy that config, tokenizer and weights load from.
        source = prepare_source(source, progress=progress)
        if not load.allow_long and not is_token_ids(load.corpus) and (config := source_config(source)) is not None:
            check_sequence_length(load.seq_len, config, source.info.get("id") or "the model")
        if tokenizer is None:
            tokenizer = load_tokenizer(source)
            if tokenizer is None and not is_token_ids(load.corpus):
                label = load.corpus if isinstance(load.corpus, str) else "shakespeare" if load.corpus is None else "texts"
                raise EffdepthError(f"model {source.info.get('id')!r} has no tokenizer effdepth can load, and corpus "
                                    f"'{label}' is text; {tokenizer_hint()}")
    if passages:
        from .data.passages import load_passages

        tokens = load_passages(load.corpus, tokenizer, max_len=load.seq_len, num_passages=load.num_seqs, seed=load.seed,
                               bos=load.bos, split=load.passage_split)
    else:
        tokens = load_corpus(load.corpus, tokenizer, seq_len=load.seq_len, num_seqs=load.num_seqs, seed=load.seed,
                             add_bos=load.add_bos)

    if external is not None and external.architecture is not None:  # TransformerLens runs through its own hooks
        lm, arch = external.loaded(dtype=load.dtype, device=load.device), external.architecture
    else:
        lm = load_model(
            source, dtype=load.dtype, device=load.device, device_map=load.device_map, tokenizer=tokenizer,
            allow_pickle=load.allow_pickle, progress=progress,
        )
        arch = resolve_architecture(lm.model, blocks_path=load.blocks_path, embedding_path=load.embedding_path)
        if external is not None:  # nnsight: recorded in the provenance
            lm.info.update(external.info)
    ids = torch.from_numpy(tokens.ids) if passages else tokens.input_ids
    _check_vocabulary(ids, lm.info.get("vocab_size"))
    if not load.allow_long:
        longest = int(tokens.lengths.max()) if passages else int(tokens.input_ids.shape[1])
        check_sequence_length(longest, getattr(lm.model, "config", None), lm.info.get("id") or "the model")
    return Prepared(lm, arch, tokens, load)


def measure_prepared(prepared: Prepared, analysis: AnalysisOptions | None = None, *, run: RunOptions | None = None,
                     with_loss: bool = False, started: float | None = None) -> Result:
    """Measure an already prepared model and corpus.

    ``with_loss`` runs the full model (LM head included) and records the mean
    next-token loss over the same tokens in ``result.extras["loss"]``.
    Interventions register their hooks on ``prepared.arch.blocks`` around
    this call (with ``prepend=True``, so capture sees the modified stream).

    With ``run.checkpoint`` (a folder), partial statistics are saved there every
    ``run.checkpoint_every_s`` seconds and on SIGINT/SIGTERM (then
    :class:`~effdepth.checkpoint.MeasurementInterrupted` is raised);
    ``run.resume`` continues from them.

    >>> import torch
    >>> from effdepth.tiny import tiny_model
    >>> p = prepare(LoadOptions(model=tiny_model("llama"), corpus=torch.randint(0, 256, (2, 8))), progress=False)
    >>> measure_prepared(p, AnalysisOptions(bootstrap=0, pooling="none"), run=RunOptions(progress=False)).default.num_states
    3
    """
    analysis = analysis or AnalysisOptions(pooling="none")
    if analysis.passages:
        raise EffdepthError("measure_prepared accumulates per-token statistics (token mode): give "
                            "AnalysisOptions(pooling='none', ...), or measure passage mode with effdepth.measure")
    run = run or RunOptions()
    started = time.perf_counter() if started is None else started
    check_kernel_memory(prepared, analysis)
    state = MeasurementState.new(analysis, with_loss=with_loss)
    fingerprint = run_fingerprint(prepared, analysis, with_loss)
    facts = accumulate(prepared, state, analysis.batch_size, run=run, fingerprint=fingerprint)
    return result_from_accumulator(prepared, state, analysis, started=started, run=facts)


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
    def new(cls, analysis: AnalysisOptions, *, with_loss: bool = False, first_sequence: int = 0,
            surrogate_limit: int | None = None) -> "MeasurementState":
        """Empty statistics for ``analysis``; ``first_sequence`` and ``surrogate_limit`` place a
        distributed rank's share among all sequences (the surrogate noise is drawn per global sequence)."""
        views = ViewAccumulator(analysis.view_specs, include_embedding=analysis.include_embedding,
                                pc_estimate=analysis.pc_estimate, similarities=analysis.similarity,
                                cka_full_budget_bytes=analysis.max_memory, statistics=statistics_for(analysis.similarity))
        calibrated = None
        # Not for a similarity without calibrated references (cka-full: its surrogates would double its memory).
        kernel_free = [s for s in analysis.similarity if get_similarity(s).calibrated]
        if analysis.surrogate_seqs != 0 and kernel_free:
            limit = analysis.surrogate_seqs if surrogate_limit is None else surrogate_limit
            calibrated = CalibratedReferences(analysis.view_specs, include_embedding=analysis.include_embedding,
                                              similarities=kernel_free, seed=analysis.seed, max_seqs=limit,
                                              fit_seqs=analysis.surrogate_seqs, first_sequence=first_sequence)
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
            self.calibrated.load_state_dict({k[4:]: v for k, v in arrays.items() if k.startswith("cal/")}, meta["calibrated"])
        if self.loss is not None and meta.get("loss"):
            self.loss.load_state_dict({}, meta["loss"])


def check_kernel_memory(prepared: Prepared, analysis: AnalysisOptions) -> None:
    """cka-full needs (L+1)(L+2)/2 d x d float64 cross-products per view token set: refuse before the first batch."""
    if "cka-full" not in analysis.similarity:
        return
    embedding = prepared.lm.model.get_input_embeddings() if hasattr(prepared.lm.model, "get_input_embeddings") else None
    hidden = getattr(embedding, "embedding_dim", None) or getattr(getattr(prepared.lm.model, "config", None), "hidden_size", None)
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
    (:func:`~effdepth.numerics.streams.calibration_prefix`) or, for the exact estimate, all."""
    return tokens.num_seqs if pc_estimate == "exact" else calibration_prefix(tokens.lengths())


def fit_views(prepared: Prepared, state: MeasurementState, batch_size: int, *, progress: bool = True,
              facts: dict | None = None, stop=None) -> None:
    """The fit phase: forward passes over the fitted sequences (:func:`fitted_rows`), fed to the
    fits of the views that need one; nothing when none does or the fits exist (a resumed run).
    ``stop()`` true between batches ends it early (an interrupted run), with no fit."""
    if state.fitted:
        return
    tokens = prepared.tokens.rows(0, fitted_rows(prepared.tokens, state.views.pc_estimate))
    sequences = real = 0
    for batch in state_batches(prepared.lm.model, prepared.arch, tokens, batch_size, label="fitting views",
                               progress=progress, facts=facts):
        state.fit_batch(batch.states, batch.mask)
        counts = real_counts(batch.states, batch.mask)
        sequences, real = sequences + counts[0], real + counts[1]
        if stop is not None and stop():
            return
    state.finalize_fit(sequences=sequences, tokens=real)


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


def accumulate(prepared: Prepared, state: MeasurementState, batch_size: int, *, run: RunOptions | None = None,
               fingerprint: dict | None = None) -> dict:
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
            fit_views(prepared, state, batch_size, progress=run.progress, facts=facts, stop=lambda: bool(interrupted))
            if interrupted:
                raise KeyboardInterrupt
            for batch in state_batches(lm.model, arch, tokens, batch_size, progress=run.progress,
                                       full_model=state.loss is not None, start=acc.rows, facts=facts):
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
            raise MeasurementInterrupted(f"interrupted by {name} while fitting the views, before any sequence was measured; "
                                         "nothing to resume: run it again", interrupted.signal)
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


def result_from_accumulator(prepared: Prepared, state: MeasurementState, analysis: AnalysisOptions, *,
                            started: float | None = None, run: dict | None = None) -> Result:
    """Metrics, intervals, config and provenance from accumulated statistics."""
    lm, arch, tokens = prepared.lm, prepared.arch, prepared.tokens
    acc = state.views
    views, others, unavailable = summarise(state, analysis)
    config = {
        "seq_len": int(tokens.input_ids.shape[1]),
        "num_seqs": int(tokens.input_ids.shape[0]),
        **analysis_config(analysis, acc),
        "add_bos": prepared.add_bos,
        "num_layers": arch.num_layers,
        "blocks_path": arch.paths.get("blocks"),
        "embedding_path": arch.paths.get("embedding"),
        "architecture_source": arch.paths.get("source"),
    }
    provenance = {
        "model": lm.info,
        "corpus": {"name": tokens.name, "sha256": tokens.sha256, **tokens.info},
        "code": code_version(),
        "libraries": library_versions(),
        "machine": machine(),
        "created": now(),
        "elapsed_s": round(time.perf_counter() - started, 3) if started is not None else None,
        "tokens_measured": acc.tokens,
        "padding_rows_skipped": acc.padding_rows,
        "run": run or {},
    }
    extras = {"loss": state.loss.result()} if state.loss is not None else {}
    return Result(views=views, config=config, provenance=provenance, extras=extras, others=others, unavailable=unavailable)


def summarise(state: MeasurementState, analysis: AnalysisOptions) -> tuple:
    """``(primary views, {other similarity: views}, {similarity: {view: reason}})`` of a measurement."""
    by_similarity, unavailable = {}, {}
    for sim in analysis.similarity:
        done, missing = view_summaries(state.views, similarity=sim, include_embedding=analysis.include_embedding,
                                       bootstrap=analysis.bootstrap, seed=analysis.seed, calibrated=state.calibrated)
        by_similarity[sim] = view_results(done)
        if missing:
            unavailable[sim] = missing
    primary, *rest = analysis.similarity
    if not by_similarity[primary]:
        other = "" if get_similarity(primary).additive else ", or put frobenius or token first in --similarity"
        if primary == "cka" and state.views.bootstrap_units("cka") == 0:  # no pair at all: every view says so
            raise EffdepthError("token-mode cka compares the sequences of a pair, and fewer than two sequences were "
                                f"measured; measure at least two sequences{other}")
        reasons = "; ".join(f"{v}: {r}" for v, r in unavailable.get(primary, {}).items())
        raise EffdepthError(f"no view has a {primary} value ({reasons}); use longer sequences (--seq-len) "
                            f"or a view that keeps position 0{other}")
    return by_similarity[primary], {s: by_similarity[s] for s in rest}, unavailable


def analysis_config(analysis: AnalysisOptions, acc: ViewAccumulator) -> dict:
    """The analysis part of a result's config: every analysis option (``similarity`` is the
    primary one, ``similarities`` all of them; ``pc_estimate`` what was fitted, on which
    sequences), and the choices behind the numbers."""
    options = analysis.to_dict()
    return {
        **options,
        "similarity": analysis.primary_similarity,
        "similarities": options["similarity"],
        "bootstrap_fits": "fixed: means and principal directions are not refitted per resample (fit uncertainty is not in the view intervals)",
        "pc_estimate": acc.fit_info,
        "size_reference_embedding": SIZE_REFERENCE_EMBEDDING if analysis.include_embedding else None,
        "cka": CKA_CHOICES if {"cka", "cka-full"} & set(analysis.similarity) else None,
        "max_memory": analysis.max_memory if "cka-full" in analysis.similarity else None,
        "zero_states": "a zero state is orthogonal to every other state (similarity 0) and identical to itself",
        "cosine_summaries": cosine_summaries(analysis.similarity),
    }


def cosine_summaries(similarities) -> str:
    """Which views carry the update summaries and related measures (docs/method.md#no-cosine-summaries).

    >>> cosine_summaries(("cka",))[:24], cosine_summaries(("cka", "frobenius"))
    ('untransformed views only', 'every view')
    """
    if keeps_cosine_sums(similarities):
        return "every view"
    return ("untransformed views only (default, drop-pos0, pos0-only): under kernel similarities alone the "
            "transformed views keep no cosine sums")


CKA_CHOICES = {
    "hsic": "cross-sequence: <Y_p Y_q^T, Y_p Y_q^T> / (T_p T_q) over pairs of consecutive sequences, summed over pairs",
    "pairs": "(0, 1), (2, 3), ... in sequence order; an odd last sequence is left out",
    "precision": "centred states multiplied in float32 (float64 states: float64), inner products summed in float64",
    "min_tokens": 4,
    "energies": "covariance norms: square roots of the summed update cross-HSIC diagonal",
    "center_view": "a no-op: per-sequence centring removes any constant shift",
}


def from_states(states, *, mask=None, views=("default",), similarity=DEFAULT_SIMILARITY, include_embedding: bool = False,
                bootstrap: int = 0, seed: int = 0, pc_estimate: str = "calibration", surrogate_seqs: int | None = 0) -> Result:
    """D_eff and everything else from states you already have.

    ``states`` is ``(L+1, tokens, d)`` (one sequence) or ``(L+1, batch, seq,
    d)`` (each row a sequence, the bootstrap's unit), ``states[0]`` = S_0.
    ``mask`` (``(batch, seq)``, or ``(tokens,)`` for one sequence) marks real
    tokens. Unlike :func:`measure` (1000 resamples), ``bootstrap`` defaults to
    0 here: ask for intervals explicitly, with several sequences.

    >>> import effdepth, torch
    >>> s = torch.zeros(5, 2, 8, 4, dtype=torch.float64)
    >>> s[:] = torch.randn(2, 8, 4, dtype=torch.float64)  # every state identical
    >>> round(effdepth.from_states(s).default.deff, 12)
    1.0
    """
    analysis = AnalysisOptions(pooling="none", views=views, similarity=similarity, include_embedding=include_embedding,
                               bootstrap=bootstrap, seed=seed, pc_estimate=pc_estimate, surrogate_seqs=surrogate_seqs)
    s = torch.as_tensor(states)
    if not torch.is_floating_point(s):
        s = s.to(torch.float64)
    if s.dim() == 3:
        s = s[:, None]
    if s.dim() != 4 or s.shape[0] < 2 or s.shape[2] < 1:
        raise EffdepthError(
            f"states must be shaped (L+1, tokens, d) or (L+1, batch, seq, d) with L >= 1, got {tuple(torch.as_tensor(states).shape)}"
        )
    m = _checked_mask(mask, s, three_d=torch.as_tensor(states).dim() == 3)
    _check_user_states(s, bootstrap)
    state = MeasurementState.new(analysis)
    if not state.fitted:  # the fit phase, on the sequences measure() would fit on
        lengths = [s.shape[2]] * s.shape[1] if m is None else [int(n) for n in m.sum(dim=1)]
        rows = s.shape[1] if pc_estimate == "exact" else calibration_prefix(lengths)
        fit_states, fit_mask = s[:, :rows], None if m is None else m[:rows]
        state.fit_batch(fit_states, fit_mask)
        state.finalize_fit(**_real_size(fit_states, fit_mask))
    state.update(s, m)
    return states_result(state, analysis, num_layers=int(s.shape[0]) - 1)


def states_result(state: MeasurementState, analysis: AnalysisOptions, *, num_layers: int, model: dict | None = None) -> Result:
    """The :class:`Result` of statistics accumulated from states a user brought (``from_states``,
    ``effdepth.Accumulator``); ``model`` is the provenance of the states."""
    views, others, unavailable = summarise(state, analysis)
    config = {**analysis_config(analysis, state.views), "num_layers": num_layers}
    provenance = {"model": model or {"source": "states"}, "code": code_version(), "libraries": library_versions(), "created": now(),
                  "padding_rows_skipped": state.views.padding_rows}
    return Result(views=views, config=config, provenance=provenance, others=others, unavailable=unavailable)


def _real_size(states: torch.Tensor, mask: torch.Tensor | None) -> dict:
    """``sequences`` (non-empty) and real ``tokens`` of a batch, for the record of a fit."""
    sequences, tokens = real_counts(states, mask)
    return {"sequences": sequences, "tokens": tokens}


def _checked_mask(mask, states: torch.Tensor, three_d: bool) -> torch.Tensor | None:
    """The mask as ``(batch, seq)`` booleans, or a one-line error when it does not fit the states."""
    if mask is None:
        return None
    m = torch.as_tensor(mask)
    batch, seq = int(states.shape[1]), int(states.shape[2])
    if three_d and m.dim() == 1:
        m = m[None]
    if tuple(m.shape) != (batch, seq):
        want = f"({seq},) or (1, {seq})" if three_d else f"({batch}, {seq})"
        raise EffdepthError(
            f"mask of shape {tuple(torch.as_tensor(mask).shape)} does not match states of shape {tuple(states.shape) if not three_d else (states.shape[0],) + tuple(states.shape[2:])}: "
            f"it must be {want}, one entry per token (True/1 = real token)"
        )
    if not bool(m.any()):
        raise EffdepthError("the mask marks no real token (every row is padding): nothing to measure; "
                            "mark real tokens with True/1")
    return m.bool()


def _check_user_states(states: torch.Tensor, bootstrap: int) -> None:
    """Problems with states a user brings, said in their terms (no model ran here)."""
    import warnings

    finite = torch.isfinite(states).flatten(1).all(dim=1)
    if not bool(finite.all()):
        layer = int(torch.nonzero(~finite)[0])
        raise EffdepthError(
            f"states[{layer}] contains NaN or infinite values; from_states takes them as given, so check how they were computed"
        )
    if not bool(states.flatten(1).abs().amax(dim=1).gt(0).any()):
        warnings.warn("every state is zero: D_eff is then N by convention (zero states count as orthogonal) and says nothing about a model",
                      stacklevel=3)
    if bootstrap > 0 and states.shape[1] < 2:
        warnings.warn(f"bootstrap={bootstrap} but the states hold one sequence, and sequences are the bootstrap's units: "
                      "no interval; pass (L+1, batch, seq, d) with several sequences", stacklevel=3)


def _check_vocabulary(input_ids: torch.Tensor, vocab_size: int | None) -> None:
    if vocab_size is not None and input_ids.numel() and int(input_ids.max()) >= vocab_size:
        raise EffdepthError(
            f"token id {int(input_ids.max())} is outside the model's vocabulary of {vocab_size}; "
            "were the ids made with another tokenizer?"
        )
