"""``measure`` and ``from_states``: corpus -> batches -> states -> statistics -> metrics -> result.

The public entry points of a measurement. Loading (either mode) is
:mod:`effdepth.measure.prepare`; token mode's pass over the batches is
:mod:`effdepth.measure.state`, its result :mod:`effdepth.measure.results`;
passage mode (the default) is :mod:`effdepth.passage_measure`.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from ..errors import EffdepthError
from ..numerics.fits import calibration_prefix
from ..numerics.sequences import real_counts
from ..options import DEFAULT_SIMILARITY, DEFAULTS, AnalysisOptions, Options, RunOptions, validate_options
from ..result import Result
from .prepare import Prepared, prepare, stored_carry
from .results import result_from_accumulator, states_result, summarise, token_result
from .state import MeasurementState, accumulate, check_kernel_memory, fit_views, run_fingerprint

__all__ = [
    "measure",
    "run_measurement",
    "prepare",
    "measure_prepared",
    "from_states",
    "Prepared",
    "MeasurementState",
    "accumulate",
    "fit_views",
    "result_from_accumulator",
    "states_result",
    "summarise",
    "token_result",
    "validate_options",
    "DEFAULTS",
]


def measure(
    model=None,
    corpus=None,
    *,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 30.0,
    progress: bool = True,
    **options,
) -> Result:
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
        from ..passage_measure import measure_passages

        result = measure_passages(prepared, options.analysis, run=run, started=started)
    else:
        result = measure_prepared(prepared, options.analysis, run=run, started=started)
    if stored is not None:
        result.extras["stored_carry"] = stored
    return result


def measure_prepared(
    prepared: Prepared,
    analysis: AnalysisOptions | None = None,
    *,
    run: RunOptions | None = None,
    with_loss: bool = False,
    started: float | None = None,
) -> Result:
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
    >>> from effdepth.options import LoadOptions
    >>> from effdepth.tiny import tiny_model
    >>> p = prepare(LoadOptions(model=tiny_model("llama"), corpus=torch.randint(0, 256, (2, 8))), progress=False)
    >>> measure_prepared(p, AnalysisOptions(bootstrap=0, pooling="none"), run=RunOptions(progress=False)).default.num_states
    3
    """
    analysis = analysis or AnalysisOptions(pooling="none")
    if analysis.passages:
        raise EffdepthError(
            "measure_prepared accumulates per-token statistics (token mode): give "
            "AnalysisOptions(pooling='none', ...), or measure passage mode with effdepth.measure"
        )
    run = run or RunOptions()
    started = time.perf_counter() if started is None else started
    check_kernel_memory(prepared, analysis)
    state = MeasurementState.new(analysis, with_loss=with_loss)
    fingerprint = run_fingerprint(prepared, analysis, with_loss)
    facts = accumulate(prepared, state, analysis.batch_size, run=run, fingerprint=fingerprint)
    return result_from_accumulator(prepared, state, analysis, started=started, run=facts)


def from_states(
    states,
    *,
    mask=None,
    views=("default",),
    similarity=DEFAULT_SIMILARITY,
    include_embedding: bool = False,
    bootstrap: int = 0,
    seed: int = 0,
    pc_estimate: str = "calibration",
    surrogate_seqs: int | None = 0,
    pooling: str = "none",
) -> Result:
    """D_eff and everything else from states you already have.

    ``states`` is ``(L+1, tokens, d)`` (one sequence) or ``(L+1, batch, seq,
    d)`` (each row a sequence, the bootstrap's unit), ``states[0]`` = S_0.
    ``mask`` (``(batch, seq)``, or ``(tokens,)`` for one sequence) marks real
    tokens. Unlike :func:`measure` (1000 resamples), ``bootstrap`` defaults to
    0 here: ask for intervals explicitly, with several sequences.
    ``pooling="mean"`` takes each row as a passage and gives
    :func:`measure`'s passage-mode number over the same passages (its pooling,
    analysis, confounds and sample-size curve); the default here is still token
    mode's.

    >>> import effdepth, torch
    >>> walk = torch.randn(4, 16, 6, 8, dtype=torch.float64).cumsum(0)   # S_0..S_3 of 16 passages of 6 tokens
    >>> r = effdepth.from_states(walk, pooling="mean")
    >>> r.passages, r.default.sequences, r.extras["passage_lengths"]["equal"]
    (True, 16, True)

    >>> import effdepth, torch
    >>> s = torch.zeros(5, 2, 8, 4, dtype=torch.float64)
    >>> s[:] = torch.randn(2, 8, 4, dtype=torch.float64)  # every state identical
    >>> round(effdepth.from_states(s).default.deff, 12)
    1.0
    """
    if pooling == "mean":
        return _pooled_states(
            states,
            mask,
            views,
            None if similarity == DEFAULT_SIMILARITY else similarity,
            include_embedding,
            bootstrap,
            seed,
        )
    analysis = AnalysisOptions(
        pooling=pooling,
        views=views,
        similarity=similarity,
        include_embedding=include_embedding,
        bootstrap=bootstrap,
        seed=seed,
        pc_estimate=pc_estimate,
        surrogate_seqs=surrogate_seqs,
    )
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


def _pooled_states(states, mask, views, similarity, include_embedding: bool, bootstrap: int, seed: int) -> Result:
    """:func:`from_states` in passage mode: each row a passage, pooled and analysed as measure does."""
    from ..passage_measure import PooledBatches

    s = torch.as_tensor(states)
    s = (s.to(torch.float64) if not torch.is_floating_point(s) else s)[:, None] if s.dim() == 3 else s
    if s.dim() != 4 or s.shape[0] < 2 or s.shape[2] < 1:
        raise EffdepthError(f"states must be shaped (L+1, batch, seq, d) with L >= 1, got {tuple(s.shape)}")
    m = _checked_mask(mask, s, three_d=torch.as_tensor(states).dim() == 3)
    _check_user_states(s, bootstrap)
    options = {
        "views": views,
        "similarity": similarity,
        "include_embedding": include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
    }
    analysis = AnalysisOptions(pooling="mean", **{k: v for k, v in options.items() if v is not None})
    pooled = PooledBatches(analysis)
    pooled.reset()
    pooled.update(s.detach(), m)
    return pooled.result(analysis, int(s.shape[0]) - 1, {"source": "states"})


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
        raise EffdepthError(
            "the mask marks no real token (every row is padding): nothing to measure; mark real tokens with True/1"
        )
    return m.bool()


def _check_user_states(states: torch.Tensor, bootstrap: int) -> None:
    """Problems with states a user brings, said in their terms (no model ran here)."""
    finite = torch.isfinite(states).flatten(1).all(dim=1)
    if not bool(finite.all()):
        layer = int(torch.nonzero(~finite)[0])
        raise EffdepthError(
            f"states[{layer}] contains NaN or infinite values; from_states takes them as given, so check how they were computed"
        )
    if not bool(states.flatten(1).abs().amax(dim=1).gt(0).any()):
        warnings.warn(
            "every state is zero: D_eff is then N by convention (zero states count as orthogonal) and says nothing about a model",
            stacklevel=3,
        )
    if bootstrap > 0 and states.shape[1] < 2:
        warnings.warn(
            f"bootstrap={bootstrap} but the states hold one sequence, and sequences are the bootstrap's units: "
            "no interval; pass (L+1, batch, seq, d) with several sequences",
            stacklevel=3,
        )
