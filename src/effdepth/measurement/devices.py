"""Where a forward pass runs, and what its failures mean: the input device, out of memory, one-line errors."""

from __future__ import annotations

import torch

from effdepth.errors import one_line


def input_device(arch, model) -> torch.device:
    """Where the token ids must go: the embedding's device (the first shard with ``device_map``)."""
    emb = arch.embedding
    params = list(emb.parameters()) if emb is not None else []
    return params[0].device if params else next(model.parameters()).device


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
    reason = one_line(exc, 240)
    if "out of memory" in reason.lower():
        return f"out of memory in a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}; lower --batch-size or --seq-len"
    return f"the model's forward pass failed on a batch of {ids.shape[0]} x {ids.shape[1]} tokens: {reason}"
