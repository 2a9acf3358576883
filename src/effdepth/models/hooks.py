"""Hooks that read the residual stream S_0..S_L from the decoder blocks.

S_0 is the input of block 1 (so GPT-2's position embeddings and Gemma's embedding scale are included);
S_l is the output of block l, before the final norm.
"""

from __future__ import annotations

import torch

from effdepth.models.registry import ResolvedArchitecture


def hidden_from_input(args: tuple, kwargs: dict) -> torch.Tensor:
    """The hidden state a block receives, positionally or as ``hidden_states=``."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    h = kwargs.get("hidden_states")
    if isinstance(h, torch.Tensor):
        return h
    raise RuntimeError(
        "could not find the hidden state among the block's inputs; use --blocks-path to point at the blocks"
    )


def hidden_from_output(output, like: torch.Tensor) -> torch.Tensor:
    """The hidden state a block returns: a tensor, or the one shaped like its input inside a tuple or output."""
    if isinstance(output, torch.Tensor):
        return output
    candidates = output.values() if isinstance(output, dict) else output
    for item in candidates if isinstance(output, (tuple, list, dict)) else ():
        if isinstance(item, torch.Tensor) and item.shape == like.shape:
            return item
    for name in ("last_hidden_state", "hidden_states"):
        h = getattr(output, name, None)
        if isinstance(h, torch.Tensor):
            return h
    raise RuntimeError(f"could not find the hidden state in a block output of type {type(output).__name__}")


class HookSet:
    """Hooks registered on entering a ``with`` block and removed on leaving it, also when the forward
    pass or a registration fails. Subclasses yield handles from :meth:`register`, and undo anything
    else in :meth:`released`.

    >>> calls, layer = [], torch.nn.Linear(1, 1)
    >>> class Counted(HookSet):
    ...     def register(self):
    ...         yield layer.register_forward_hook(lambda *a: calls.append("in"))
    >>> with Counted():
    ...     _ = layer(torch.ones(1))
    >>> _ = layer(torch.ones(1)); calls
    ['in']
    >>> class HalfRegistered(HookSet):
    ...     def register(self):
    ...         yield layer.register_forward_hook(lambda *a: calls.append("half"))
    ...         raise RuntimeError("the second hook fails")
    >>> with HalfRegistered():
    ...     pass
    Traceback (most recent call last):
    RuntimeError: the second hook fails
    >>> _ = layer(torch.ones(1)); calls
    ['in']
    """

    _handles = ()  # each entry gets its own list

    def register(self):
        return iter(())

    def released(self) -> None:
        """What to undo besides the handles (nothing here)."""

    def __enter__(self):
        self._handles = []
        try:
            for handle in self.register():
                self._handles.append(handle)
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        try:
            for handle in self._handles:
                handle.remove()
        finally:
            self._handles = []
            self.released()


class ResidualCapture(HookSet):
    """Captures S_0..S_L of each forward pass into one reused buffer, ``states`` ``(L+1, batch, seq, d)``.

    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from effdepth.models.registry import resolve_architecture
    >>> m = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50)).eval()
    >>> with ResidualCapture(resolve_architecture(m)) as cap:
    ...     _ = m(torch.zeros(1, 4, dtype=torch.long))
    >>> tuple(cap.states.shape)
    (3, 1, 4, 16)
    """

    def __init__(self, arch: ResolvedArchitecture):
        self.arch = arch
        self.states: torch.Tensor | None = None
        self._input: torch.Tensor | None = None

    def register(self):
        yield self.arch.blocks[0].register_forward_pre_hook(self._on_input, with_kwargs=True)
        for layer, block in enumerate(self.arch.blocks, start=1):
            yield block.register_forward_hook(self._make_output_hook(layer))

    def _on_input(self, module, args, kwargs):
        h = hidden_from_input(args, kwargs)
        self._input = h
        shape = (self.arch.num_layers + 1,) + tuple(h.shape)
        if (
            self.states is None
            or tuple(self.states.shape) != shape
            or self.states.dtype != h.dtype
            # An inference-mode buffer cannot be written outside inference mode.
            or self.states.is_inference() != torch.is_inference_mode_enabled()
        ):
            self.states = torch.empty(shape, dtype=h.dtype, device=h.device)
        self.states[0].copy_(h.detach())
        return None

    def _make_output_hook(self, layer: int):
        def hook(module, args, output):
            h = hidden_from_output(output, self._input)
            self.states[layer].copy_(h.detach())
            return None

        return hook
