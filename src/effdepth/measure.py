"""``measure`` and ``from_states``: corpus -> batches -> states -> statistics -> metrics -> result."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from dataclasses import dataclass
from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from .capture.forward import decoder_forward, model_forward_logits
from .numerics.loss import LossAccumulator
from .capture.hooks import ResidualCapture
from .capture.registry import resolve_architecture
from .checkpoint import CheckpointMismatch, MeasurementInterrupted, graceful_interrupts, load_checkpoint, remove_checkpoint, save_checkpoint
from .errors import EffdepthError
from .numerics.metrics import SIMILARITIES
from .numerics.streams import PC_ESTIMATES, ViewAccumulator
from .numerics.views import parse_views
from .provenance import code_version, library_versions, machine, now
from .result import Result, view_results
from . import __version__

MAX_BOOTSTRAP = 100_000
DEFAULTS = {"seq_len": 256, "num_seqs": 32, "batch_size": 8, "bootstrap": 1000, "seed": 0}


def measure(
    model=None,
    corpus=None,
    *,
    revision: str | None = None,
    seq_len: int = DEFAULTS["seq_len"],
    num_seqs: int = DEFAULTS["num_seqs"],
    batch_size: int = DEFAULTS["batch_size"],
    similarity: str = "frobenius",
    include_embedding: bool = False,
    bootstrap: int = DEFAULTS["bootstrap"],
    seed: int = DEFAULTS["seed"],
    dtype=None,
    device: str | None = None,
    views=("default",),
    pc_estimate: str = "calibration",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    tokenizer=None,
    add_bos: bool = True,
    blocks_path: str | None = None,
    embedding_path: str | None = None,
    allow_pickle: bool = False,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 30.0,
    progress: bool = True,
    allow_processed: bool = False,
) -> Result:
    """Measure the effective depth of a causal LM's residual stream.

    ``model``: a Hugging Face id, a local folder, a ``.gguf`` file, a loaded
    ``PreTrainedModel``, or ``None`` for the embedded SmolLM2-135M-Instruct;
    also a TransformerLens ``HookedTransformer``/``TransformerBridge`` (run
    through its own hooks; one with centred writing weights is refused unless
    ``allow_processed=True``) or an nnsight ``LanguageModel``/``TransformersModel``
    (its Hugging Face module is measured). Their own tokenizer is the default.
    ``corpus``: ``None``/``"shakespeare"``, a text/JSONL file or folder,
    ``"hf:NAME[:CONFIG[:SPLIT]]"``, a list of strings, or a ``(batch, seq)``
    tensor of token ids used exactly as given. With ``checkpoint`` (a folder),
    an interrupted run keeps its statistics there and ``resume=True``
    continues it. Pickle weights (``.bin``) are refused unless
    ``allow_pickle=True``; ``trust_remote_code`` is off unless asked for.

    >>> import effdepth, torch
    >>> from transformers import LlamaConfig, LlamaForCausalLM
    >>> lm = LlamaForCausalLM(LlamaConfig(num_hidden_layers=3, hidden_size=32, intermediate_size=64,
    ...     num_attention_heads=4, num_key_value_heads=4, vocab_size=100))
    >>> r = effdepth.measure(lm, torch.randint(0, 100, (4, 16)), bootstrap=0, progress=False)
    >>> r.default.reference
    1.5
    """
    validate_options(seq_len=seq_len, num_seqs=num_seqs, batch_size=batch_size, bootstrap=bootstrap, similarity=similarity, pc_estimate=pc_estimate)
    view_specs = parse_views(views)
    started = time.perf_counter()

    prepared = prepare(
        model,
        corpus,
        revision=revision,
        seq_len=seq_len,
        num_seqs=num_seqs,
        seed=seed,
        dtype=dtype,
        device=device,
        device_map=device_map,
        trust_remote_code=trust_remote_code,
        tokenizer=tokenizer,
        add_bos=add_bos,
        blocks_path=blocks_path,
        embedding_path=embedding_path,
        allow_pickle=allow_pickle,
        progress=progress,
        allow_processed=allow_processed,
    )
    return measure_prepared(
        prepared,
        views=view_specs,
        batch_size=batch_size,
        similarity=similarity,
        include_embedding=include_embedding,
        bootstrap=bootstrap,
        seed=seed,
        pc_estimate=pc_estimate,
        progress=progress,
        checkpoint=checkpoint,
        resume=resume,
        checkpoint_every_s=checkpoint_every_s,
        started=started,
    )


@dataclass
class Prepared:
    """A loaded model, its resolved architecture and the token sequences to run."""

    lm: object
    arch: object
    tokens: object
    add_bos: bool = True


def prepare(
    model=None,
    corpus=None,
    *,
    revision=None,
    seq_len=DEFAULTS["seq_len"],
    num_seqs=DEFAULTS["num_seqs"],
    seed=DEFAULTS["seed"],
    dtype=None,
    device=None,
    device_map=None,
    trust_remote_code=False,
    tokenizer=None,
    add_bos=True,
    blocks_path=None,
    embedding_path=None,
    allow_pickle=False,
    progress=True,
    allow_processed=False,
) -> Prepared:
    """Load the model and the corpus once, for one or several measurements
    (e.g. the carry values of an intervention)."""
    from .data.corpus import load_corpus
    from .models import load_model, load_tokenizer, locate_model

    validate_options(seq_len=seq_len, num_seqs=num_seqs)
    # --- lens: TransformerLens / nnsight objects (capture/external.py); None for anything else.
    from .capture.external import adapt_external

    external = adapt_external(model, allow_processed=allow_processed)
    if external is not None:
        model = external.model
        tokenizer = tokenizer if tokenizer is not None else external.tokenizer
    # --- end lens
    # Tokenizer and corpus first: a bad corpus fails in seconds, before the weights load.
    source = model
    if not isinstance(model, torch.nn.Module):
        source = locate_model(model, revision=revision, trust_remote_code=trust_remote_code)
        if tokenizer is None:
            tokenizer = load_tokenizer(source)
    tokens = load_corpus(corpus, tokenizer, seq_len=seq_len, num_seqs=num_seqs, seed=seed, add_bos=add_bos)

    if external is not None and external.architecture is not None:  # lens: TransformerLens runs through its own hooks
        lm, arch = external.loaded(dtype=dtype, device=device), external.architecture
    else:
        lm = load_model(
            source, dtype=dtype, device=device, device_map=device_map, tokenizer=tokenizer, allow_pickle=allow_pickle, progress=progress
        )
        arch = resolve_architecture(lm.model, blocks_path=blocks_path, embedding_path=embedding_path)
        if external is not None:  # lens: nnsight, recorded in the provenance
            lm.info.update(external.info)
    _check_vocabulary(tokens.input_ids, lm.info.get("vocab_size"))
    return Prepared(lm, arch, tokens, add_bos)


def measure_prepared(
    prepared: Prepared,
    *,
    views=("default",),
    batch_size: int = DEFAULTS["batch_size"],
    similarity: str = "frobenius",
    include_embedding: bool = False,
    bootstrap: int = DEFAULTS["bootstrap"],
    seed: int = DEFAULTS["seed"],
    pc_estimate: str = "calibration",
    progress: bool = True,
    with_loss: bool = False,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 30.0,
    started: float | None = None,
) -> Result:
    """Measure an already prepared model and corpus.

    ``with_loss`` runs the full model (LM head included) and records the mean
    next-token loss over the same tokens in ``result.extras["loss"]``.
    Interventions register their hooks on ``prepared.arch.blocks`` around
    this call (with ``prepend=True``, so capture sees the modified stream).

    With ``checkpoint`` (a folder), partial statistics are saved there every
    ``checkpoint_every_s`` seconds and on SIGINT/SIGTERM (then
    :class:`~effdepth.checkpoint.MeasurementInterrupted` is raised);
    ``resume=True`` continues from them.
    """
    validate_options(batch_size=batch_size, bootstrap=bootstrap, similarity=similarity, pc_estimate=pc_estimate)
    started = time.perf_counter() if started is None else started
    view_specs = parse_views(views)
    acc = ViewAccumulator(view_specs, include_embedding=include_embedding, pc_estimate=pc_estimate)
    loss = LossAccumulator() if with_loss else None
    fingerprint = run_fingerprint(prepared, acc, with_loss)
    run = accumulate(
        prepared,
        acc,
        loss=loss,
        batch_size=batch_size,
        progress=progress,
        checkpoint=checkpoint,
        resume=resume,
        checkpoint_every_s=checkpoint_every_s,
        fingerprint=fingerprint,
    )
    return result_from_accumulator(
        prepared, acc, loss=loss, similarity=similarity, bootstrap=bootstrap, seed=seed, batch_size=batch_size, started=started, run=run
    )


def run_fingerprint(prepared: Prepared, acc: ViewAccumulator, with_loss: bool) -> dict:
    """What partial statistics belong to: a resume with anything else is refused."""
    info = prepared.lm.info
    return {
        "model": info.get("id"),
        "revision": info.get("revision"),
        "commit": info.get("commit"),
        "corpus_sha256": prepared.tokens.sha256,
        "views": [v.name for v in acc.views],
        "include_embedding": acc.include_embedding,
        "pc_estimate": acc.pc_estimate,
        "num_layers": prepared.arch.num_layers,
        "with_loss": with_loss,
        "effdepth": __version__,  # not code_version(): no git call per run just for this
    }


def accumulate(
    prepared: Prepared,
    acc: ViewAccumulator,
    *,
    loss: LossAccumulator | None = None,
    batch_size: int = DEFAULTS["batch_size"],
    progress: bool = True,
    checkpoint: str | Path | None = None,
    resume: bool = False,
    checkpoint_every_s: float = 30.0,
    fingerprint: dict | None = None,
) -> dict:
    """Feed every sequence of ``prepared`` to ``acc`` (and ``loss``); returns run facts.

    Out of memory in a batch halves the batch size and retries it (the
    statistics are per sequence, so the numbers do not change).
    """
    lm, arch, tokens = prepared.lm, prepared.arch, prepared.tokens
    device = _input_device(arch, lm.model)
    folder = Path(checkpoint) if checkpoint is not None else None
    facts = {"batch_size_used": batch_size, "oom_retries": 0, "resumed_from": 0}
    if resume:
        if folder is None:
            raise EffdepthError("resume needs the folder of the interrupted run (--resume DIR)")
        _restore(folder, acc, loss, fingerprint)
        facts["resumed_from"] = acc.sequences
    if acc.needs_fit and not acc.fitted and acc.pc_estimate == "exact":
        for batch in _state_batches(lm.model, arch, tokens, batch_size, device, progress, "fitting PCs", facts=facts):
            acc.fit_batch(batch.states, batch.mask)
        acc.finalize_fit("exact, an extra pass over every sequence")

    def consume(batch):
        acc.update(batch.states, batch.mask)
        if loss is not None:
            loss.update(batch.logits, batch.input_ids, batch.mask)

    last_save = time.monotonic()
    with graceful_interrupts() as interrupted:
        try:
            for _ in _state_batches(
                lm.model, arch, tokens, batch_size, device, progress, "measuring",
                full_model=loss is not None, start=acc.sequences, consume=consume, facts=facts,
            ):
                if folder is not None and (interrupted or time.monotonic() - last_save > checkpoint_every_s):
                    _save(folder, acc, loss, fingerprint)
                    last_save = time.monotonic()
                if interrupted:
                    break
        except KeyboardInterrupt:
            interrupted.signal = signal.SIGINT
            if folder is not None:
                _save(folder, acc, loss, fingerprint)
    if interrupted:
        where = f"; partial statistics saved in {folder}, continue with --resume {folder.parent}" if folder else ""
        raise MeasurementInterrupted(
            f"interrupted by {signal.Signals(interrupted.signal).name} after {acc.sequences} of {tokens.input_ids.shape[0]} sequences{where}"
        )
    if folder is not None:
        remove_checkpoint(folder)
    return facts


def _save(folder, acc, loss, fingerprint):
    arrays, meta = acc.state()
    meta = {"fingerprint": fingerprint, "accumulator": meta, "loss": vars(loss) if loss is not None else None}
    save_checkpoint(folder, arrays, meta)


def _restore(folder, acc, loss, fingerprint):
    arrays, meta = load_checkpoint(folder)
    saved = meta.get("fingerprint", {})
    differ = sorted(k for k in set(saved) | set(fingerprint or {}) if saved.get(k) != (fingerprint or {}).get(k))
    if differ:
        raise CheckpointMismatch(
            f"cannot resume: the saved run differs in {', '.join(differ)}; rerun with the same model, corpus and options, "
            "or start over without --resume"
        )
    acc.load_state(arrays, meta["accumulator"])
    if loss is not None and meta.get("loss"):
        loss.total, loss.count = meta["loss"]["total"], meta["loss"]["count"]


def result_from_accumulator(
    prepared: Prepared,
    acc: ViewAccumulator,
    *,
    loss: LossAccumulator | None = None,
    similarity: str = "frobenius",
    bootstrap: int = DEFAULTS["bootstrap"],
    seed: int = DEFAULTS["seed"],
    batch_size: int = DEFAULTS["batch_size"],
    started: float | None = None,
    run: dict | None = None,
) -> Result:
    """Metrics, intervals, config and provenance from accumulated statistics."""
    lm, arch, tokens = prepared.lm, prepared.arch, prepared.tokens
    results = view_results(acc, similarity=similarity, include_embedding=acc.include_embedding, bootstrap=bootstrap, seed=seed)
    config = {
        "seq_len": int(tokens.input_ids.shape[1]),
        "num_seqs": int(tokens.input_ids.shape[0]),
        "batch_size": batch_size,
        "similarity": similarity,
        "include_embedding": acc.include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
        "views": [v.name for v in acc.views],
        "pc_estimate": acc.fit_info,
        "add_bos": prepared.add_bos,
        "num_layers": arch.num_layers,
        "size_reference_embedding": "S_0 counted as one mean-size update" if acc.include_embedding else None,
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
        "run": run or {},
    }
    extras = {"loss": loss.result()} if loss is not None else {}
    return Result(views=results, config=config, provenance=provenance, extras=extras)


def from_states(
    states,
    *,
    include_embedding: bool = False,
    similarity: str = "frobenius",
    views=("default",),
    bootstrap: int = 0,
    seed: int = 0,
    mask=None,
    pc_estimate: str = "calibration",
) -> Result:
    """D_eff and everything else from states you already have.

    ``states`` is ``(L+1, tokens, d)`` (one sequence) or ``(L+1, batch, seq,
    d)`` (each row a sequence, the bootstrap's unit), ``states[0]`` = S_0.
    ``mask`` (batch, seq) marks real tokens.

    >>> import effdepth, torch
    >>> s = torch.zeros(5, 8, 4, dtype=torch.float64)
    >>> s[:] = torch.randn(8, 4, dtype=torch.float64)     # every state identical
    >>> round(effdepth.from_states(s).default.deff, 12)
    1.0
    """
    validate_options(bootstrap=bootstrap, similarity=similarity, pc_estimate=pc_estimate)
    s = torch.as_tensor(states)
    if not torch.is_floating_point(s):
        s = s.to(torch.float64)
    if s.dim() == 3:
        s = s[:, None]
    if s.dim() != 4 or s.shape[0] < 2 or s.shape[2] < 1:
        raise EffdepthError(
            f"states must be shaped (L+1, tokens, d) or (L+1, batch, seq, d) with L >= 1, got {tuple(torch.as_tensor(states).shape)}"
        )
    m = None if mask is None else torch.as_tensor(mask).bool()
    acc = ViewAccumulator(views, include_embedding=include_embedding, pc_estimate=pc_estimate)
    if acc.needs_fit and pc_estimate == "exact":
        acc.fit_batch(s, m)
        acc.finalize_fit("exact, over every sequence")
    acc.update(s, m)
    return states_result(acc, similarity=similarity, bootstrap=bootstrap, seed=seed, num_layers=int(s.shape[0]) - 1)


def states_result(acc: ViewAccumulator, *, similarity: str, bootstrap: int, seed: int, num_layers: int, model=None) -> Result:
    """The :class:`Result` of statistics accumulated from states (``from_states``,
    ``effdepth.Accumulator``); ``model`` is the provenance of the states."""
    results = view_results(acc, similarity=similarity, include_embedding=acc.include_embedding, bootstrap=bootstrap, seed=seed)
    config = {
        "similarity": similarity,
        "include_embedding": acc.include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
        "views": [v.name for v in acc.views],
        "pc_estimate": acc.fit_info,
        "num_layers": num_layers,
        "size_reference_embedding": "S_0 counted as one mean-size update" if acc.include_embedding else None,
    }
    provenance = {"model": model or {"source": "states"}, "code": code_version(), "libraries": library_versions(), "created": now()}
    return Result(views=results, config=config, provenance=provenance)


def validate_options(**args) -> None:
    """One-line errors for measurement options, before anything is loaded.

    >>> validate_options(seq_len=256, bootstrap=1000)
    """
    checks = {
        "seq_len": (lambda v: int(v) >= 2, "--seq-len must be at least 2 (D_eff needs a token after BOS), got {v}"),
        "num_seqs": (lambda v: int(v) >= 1, "--num-seqs must be at least 1, got {v}"),
        "batch_size": (lambda v: int(v) >= 1, "--batch-size must be at least 1, got {v}"),
        "bootstrap": (
            lambda v: 0 <= int(v) <= MAX_BOOTSTRAP,
            "--bootstrap must be 0 (off) or a number of resamples up to " + f"{MAX_BOOTSTRAP:,}" + ", got {v}",
        ),
        "similarity": (lambda v: v in SIMILARITIES, "--similarity must be one of " + ", ".join(SIMILARITIES) + ", got {v!r}"),
        "pc_estimate": (lambda v: v in PC_ESTIMATES, "--pc-estimate must be one of " + ", ".join(PC_ESTIMATES) + ", got {v!r}"),
    }
    for name, value in args.items():
        ok, message = checks[name]
        try:
            good = ok(value)
        except (TypeError, ValueError):
            good = False
        if not good:
            raise EffdepthError(message.format(v=value))


def _check_vocabulary(input_ids: torch.Tensor, vocab_size: int | None) -> None:
    if vocab_size is not None and input_ids.numel() and int(input_ids.max()) >= vocab_size:
        raise EffdepthError(
            f"token id {int(input_ids.max())} is outside the model's vocabulary of {vocab_size}; "
            "were the ids made with another tokenizer?"
        )


def _input_device(arch, model) -> torch.device:
    emb = arch.embedding
    params = list(emb.parameters()) if emb is not None else []
    return params[0].device if params else next(model.parameters()).device


class Batch(NamedTuple):
    states: torch.Tensor  # (L+1, batch, seq, d), a reused buffer
    mask: torch.Tensor | None
    input_ids: torch.Tensor
    logits: torch.Tensor | None


def _state_batches(
    model, arch, tokens, batch_size, device, progress, label, full_model=False, start=0, consume=None, facts=None
):
    """Yield one :class:`Batch` per forward pass from sequence ``start`` on.

    The states buffer is reused, never kept. ``consume(batch)`` runs inside
    the out-of-memory guard, so a failure there also halves the batch size.
    """
    ids = tokens.input_ids
    mask = tokens.attention_mask
    count = lambda lo, hi: int(mask[lo:hi].sum()) if mask is not None else (hi - lo) * ids.shape[1]
    facts = facts if facts is not None else {}
    size = batch_size
    # lens: an architecture with its own hooks and forward pass (TransformerLens, capture/external.py).
    hooked = callable(getattr(arch, "run", None))
    with (arch.capture() if hooked else ResidualCapture(arch)) as capture, tqdm(
        total=count(0, ids.shape[0]), initial=count(0, start), unit="tok", desc=label,
        disable=not progress, dynamic_ncols=True, leave=False,
    ) as bar:
        i = start
        while i < ids.shape[0]:
            batch_ids = ids[i : i + size].to(device)
            batch_mask = mask[i : i + size].to(device) if mask is not None else None
            try:
                if hooked:
                    logits = arch.run(batch_ids, batch_mask, logits=full_model)
                elif full_model:
                    logits = model_forward_logits(model, batch_ids, batch_mask)
                else:
                    decoder_forward(model, arch, batch_ids, batch_mask)
                    logits = None
                batch = Batch(capture.states, batch_mask, batch_ids, logits)
                if consume is not None:
                    consume(batch)
            except EffdepthError:
                raise
            except (IndexError, RuntimeError) as exc:
                if not is_out_of_memory(exc):
                    raise EffdepthError(_forward_error(exc, batch_ids)) from None
                if size == 1:
                    raise EffdepthError(
                        f"out of memory on a single sequence of {ids.shape[1]} tokens; lower --seq-len, "
                        "use --dtype bfloat16, or spread the model with --device-map auto"
                    ) from None
                size = max(1, size // 2)
                facts["oom_retries"] = facts.get("oom_retries", 0) + 1
                facts["batch_size_used"] = size
                del batch_ids, batch_mask
                capture.states = None  # let the buffer be reallocated at the smaller size
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            yield batch
            bar.update(count(i, i + batch_ids.shape[0]))
            i += batch_ids.shape[0]


def is_out_of_memory(exc: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or an allocator failure reported as RuntimeError."""
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


def _forward_error(exc: Exception, ids: torch.Tensor) -> str:
    reason = " ".join(str(exc).split())[:240]
    if "out of memory" in reason.lower():
        return f"out of memory in a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}; lower --batch-size or --seq-len"
    return f"the model's forward pass failed on a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}"


