"""Work buffers reused from one sequence to the next within a batch.

A fresh tensor above 32 MiB on CPU comes from ``mmap`` (glibc's largest
dynamic threshold) and goes back to the system when freed, so every use
faults in and zeroes its pages anew: for a float64 copy of one sequence's
states that costs several times the arithmetic done in it. The per-sequence
temporaries of the statistics (a float64 copy of the states, the surrogate
streams) are therefore taken from a :class:`ScratchBuffers` that keeps their
storage from one sequence to the next, and released when the batch is done:
they are never held during the next forward pass, so peak memory does not
grow after the first batch.
"""

from __future__ import annotations

import torch


class ScratchBuffers:
    """Named, uninitialised work tensors whose storage is reused by later calls.

    >>> scratch = ScratchBuffers()
    >>> a = scratch.take("states", (2, 3)); b = scratch.take("states", (3, 2))
    >>> a.data_ptr() == b.data_ptr(), tuple(b.shape), b.dtype
    (True, (3, 2), torch.float64)
    """

    def __init__(self):
        self._buffers: dict = {}

    def take(self, name: str, shape, dtype: torch.dtype = torch.float64, device=None) -> torch.Tensor:
        """An uninitialised ``shape`` tensor; the storage of an earlier ``take`` of ``name`` when it is
        large enough, of the same dtype and on the same device. Two live tensors need two names."""
        numel = 1
        for size in shape:
            numel *= int(size)
        device = torch.device("cpu") if device is None else torch.device(device)
        held = self._buffers.get(name)
        if held is None or held.numel() < numel or held.dtype != dtype or held.device != device:
            held = torch.empty(numel, dtype=dtype, device=device)
            self._buffers[name] = held
        return held[:numel].view(*shape)

    def release(self) -> None:
        """Drop every buffer (call when a batch is done).

        >>> scratch = ScratchBuffers(); _ = scratch.take("x", (4,)); scratch.release(); scratch.names
        ()
        """
        self._buffers = {}

    # No __len__: an empty pool would then be falsy, and ``scratch or ScratchBuffers()`` would
    # silently replace the caller's pool by a fresh one at every call.
    @property
    def names(self) -> tuple:
        """The names of the buffers held now."""
        return tuple(self._buffers)

    def __deepcopy__(self, memo):
        # A copy of an accumulator (e.g. a rollback mark) needs no work buffers of its own.
        return ScratchBuffers()
