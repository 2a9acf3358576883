"""``measure`` and ``from_states``: corpus -> passages -> samples -> analysis -> result.

The public entry points of a measurement. Loading is
:mod:`effdepth.measurement.prepare`; the forward passes, the store and the
analysis are :mod:`effdepth.measurement.run`, for the mean of each passage
(the default) and for its tokens (``pooling="none"``) alike.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from effdepth.errors import EffdepthError
from effdepth.measurement.prepare import Prepared, prepare, stored_carry
from effdepth.options import DEFAULTS, AnalysisOptions, Options, RunOptions, validate_options
from effdepth.results.result import Result

__all__ = ["measure", "run_measurement", "prepare", "from_states", "Prepared", "validate_options", "DEFAULTS"]


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
    ``include_embedding``, ``pooling``, ``tokens_per_passage``, ``bootstrap``, ``batch_size``),
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
    >>> from effdepth.models.tiny import tiny_model
    >>> opts = Options.build(model=tiny_model("gpt2"), corpus=torch.randint(0, 256, (4, 8)), bootstrap=0)
    >>> run_measurement(opts, RunOptions(progress=False)).default.num_states
    3
    """
    from effdepth.measurement.run import measure_passages

    run = run or RunOptions()
    started = time.perf_counter()
    prepared = prepare(options.load, progress=run.progress)
    stored = stored_carry(prepared.lm.model)
    result = measure_passages(prepared, options.analysis, run=run, started=started)
    if stored is not None:
        result.extras["stored_carry"] = stored
    return result


def from_states(
    states,
    *,
    mask=None,
    views=("default",),
    similarity=None,
    pooling: str = "mean",
    tokens_per_passage: int | None = None,
    include_embedding: bool = False,
    bootstrap: int = 0,
    seed: int = 0,
) -> Result:
    """D_eff and everything else from states you already have, each row a passage.

    ``states`` is ``(L+1, batch, seq, d)`` (``states[0]`` = S_0), at least 4
    passages (the bootstrap's units); ``mask`` (``(batch, seq)``) marks real
    tokens. Each passage is pooled and analysed as
    :func:`effdepth.measure` does (``pooling="none"``: its tokens are the
    samples, ``tokens_per_passage`` of them drawn as measure draws them), so
    the same passages give measure's number, with its confounds and
    sample-size curve. Unlike :func:`measure` (1000 resamples), ``bootstrap``
    defaults to 0 here: ask for intervals explicitly.

    >>> import effdepth, torch
    >>> walk = torch.randn(4, 16, 6, 8, dtype=torch.float64).cumsum(0)   # S_0..S_3 of 16 passages of 6 tokens
    >>> r = effdepth.from_states(walk)
    >>> r.passages, r.default.sequences, r.extras["passage_lengths"]["equal"]
    (True, 16, True)
    >>> effdepth.from_states(walk[:, :4], pooling="none").config["reduction"]["per_variant"]   # 24 tokens
    {'default': 24}
    """
    from effdepth.measurement.notebook import Accumulator

    s = torch.as_tensor(states)
    three_d = s.dim() == 3
    s = s[:, None] if three_d else s
    if s.dim() != 4 or s.shape[0] < 2 or s.shape[2] < 1:
        raise EffdepthError(
            f"states must be shaped (L+1, batch, seq, d) or (L+1, seq, d) with L >= 1, got {tuple(torch.as_tensor(states).shape)}"
        )
    if not torch.is_floating_point(s):
        s = s.to(torch.float64)
    m = _checked_mask(mask, s, three_d=three_d)
    _check_user_states(s)
    acc = Accumulator(
        views,
        similarity,
        pooling=pooling,
        tokens_per_passage=tokens_per_passage,
        include_embedding=include_embedding,
        bootstrap=bootstrap,
        seed=seed,
    )
    acc.update(s.detach(), m)
    result = acc.result()
    result.config["given"] = "states (effdepth.from_states)"
    return result


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


def _check_user_states(states: torch.Tensor) -> None:
    """Problems with states a user brings, said in their terms (no model ran here)."""
    finite = torch.isfinite(states).flatten(1).all(dim=1)
    if not bool(finite.all()):
        layer = int(torch.nonzero(~finite)[0])
        raise EffdepthError(
            f"states[{layer}] contains NaN or infinite values; from_states takes them as given, so check how they were computed"
        )
    if not bool(states.flatten(1).abs().amax(dim=1).gt(0).any()):
        warnings.warn(
            "every state is zero: nothing varies across samples, so every similarity is undefined (NaN) and "
            "D_eff says nothing about a model",
            stacklevel=3,
        )
