"""Batches -> states: one forward pass per batch, states captured by hooks, out-of-memory retried.

The states buffer is reused from batch to batch and never kept. Out of
memory in the forward pass halves the batch and retries it; statistics are
per sequence, so that changes no number. Only the forward pass is retried:
what the caller does with a batch runs after it is yielded.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tqdm.auto import tqdm

from ..errors import EffdepthError
from .forward import decoder_forward, model_forward_logits
from .hooks import ResidualCapture


class Batch(NamedTuple):
    states: torch.Tensor  # (L+1, batch, seq, d), a reused buffer
    mask: torch.Tensor | None
    input_ids: torch.Tensor
    logits: torch.Tensor | None


def input_device(arch, model) -> torch.device:
    """Where the token ids must go: the embedding's device (the first shard with ``device_map``)."""
    emb = arch.embedding
    params = list(emb.parameters()) if emb is not None else []
    return params[0].device if params else next(model.parameters()).device


def state_batches(
    model,
    arch,
    tokens,
    batch_size: int,
    *,
    label: str = "measuring",
    progress: bool = True,
    full_model: bool = False,
    start: int = 0,
    facts: dict | None = None,
):
    """Yield one :class:`Batch` per forward pass over ``tokens`` from sequence ``start`` on.

    ``facts`` records the batch size used and the out-of-memory retries.
    ``full_model`` runs the LM head too (for the loss).

    >>> from effdepth.tiny import tiny_model
    >>> from effdepth.capture.registry import resolve_architecture
    >>> from effdepth.data import load_corpus
    >>> lm = tiny_model("llama"); arch = resolve_architecture(lm)
    >>> [tuple(b.states.shape) for b in state_batches(lm, arch, load_corpus(torch.zeros(3, 5, dtype=torch.long)), 2, progress=False)]
    [(4, 2, 5, 64), (4, 1, 5, 64)]
    """
    ids = tokens.input_ids
    mask = tokens.attention_mask
    device = input_device(arch, model)

    def count(lo, hi):
        return int(mask[lo:hi].sum()) if mask is not None else (hi - lo) * ids.shape[1]

    facts = facts if facts is not None else {}
    size = batch_size
    # An architecture with its own hooks and forward pass (TransformerLens, capture/external.py).
    hooked = callable(getattr(arch, "run", None))
    with (
        arch.capture() if hooked else ResidualCapture(arch) as capture,
        tqdm(
            total=count(0, ids.shape[0]),
            initial=count(0, start),
            unit="tok",
            desc=label,
            disable=not progress,
            dynamic_ncols=True,
            leave=False,
        ) as bar,
    ):
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
            except EffdepthError:
                raise
            except (IndexError, RuntimeError) as exc:
                if not is_out_of_memory(exc):
                    raise EffdepthError(forward_error(exc, batch_ids)) from None
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
    """CUDA's OutOfMemoryError, or an allocator failure reported as RuntimeError.

    >>> is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory")), is_out_of_memory(ValueError("x"))
    (True, False)
    """
    if isinstance(exc, getattr(torch.cuda, "OutOfMemoryError", ())):
        return True
    text = str(exc).lower()
    return "out of memory" in text or "can't allocate memory" in text


def forward_error(exc: Exception, ids: torch.Tensor) -> str:
    """One line for a failed forward pass of a batch of ``ids``."""
    reason = " ".join(str(exc).split())[:240]
    if "out of memory" in reason.lower():
        return f"out of memory in a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}; lower --batch-size or --seq-len"
    return f"the model's forward pass failed on a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}"
