"""One forward pass of the decoder stack, without the LM head: the hooks read the blocks' outputs, and the
head's logits (batch x tokens x vocabulary) would only cost time and memory."""

from __future__ import annotations

import torch

from effdepth.models.registry import ResolvedArchitecture


def position_ids_for(attention_mask: torch.Tensor) -> torch.Tensor:
    """Positions that skip padding (left padding breaks absolute-position models otherwise).

    >>> position_ids_for(torch.tensor([[0, 1, 1]])).tolist()
    [[0, 0, 1]]
    """
    return (attention_mask.long().cumsum(-1) - 1).clamp_min(0)


def decoder_forward(
    model, arch: ResolvedArchitecture, input_ids: torch.Tensor, attention_mask: torch.Tensor | None
) -> None:
    """Run the blocks on a batch; the LM head is skipped when the registry knows the decoder module."""
    kwargs = {"input_ids": input_ids, "use_cache": False}
    if attention_mask is not None and not bool(attention_mask.all()):
        kwargs["attention_mask"] = attention_mask
        kwargs["position_ids"] = position_ids_for(attention_mask)
    runner = arch.decoder if arch.decoder is not None else model
    with torch.inference_mode():
        runner(**kwargs)
