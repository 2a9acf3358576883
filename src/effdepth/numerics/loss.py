"""Next-token loss over the measured tokens, accumulated in float64."""

from __future__ import annotations

import math

import torch


class LossAccumulator:
    """Mean next-token cross-entropy over every real (token, next token) pair.

    >>> acc = LossAccumulator()
    >>> acc.update(torch.zeros(1, 3, 4), torch.tensor([[0, 1, 2]]), None)
    >>> round(acc.compute()["mean"], 6) == round(math.log(4), 6)
    True
    """

    def __init__(self):
        self.total = 0.0
        self.count = 0

    def update(self, logits: torch.Tensor, input_ids: torch.Tensor, mask: torch.Tensor | None) -> None:
        logp = torch.log_softmax(logits[:, :-1].to(torch.float64), dim=-1)
        target = input_ids[:, 1:]
        nll = -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        if mask is not None:
            keep = (mask[:, :-1] * mask[:, 1:]).bool()
            nll = nll[keep]
        self.total += float(nll.sum())
        self.count += int(nll.numel())

    def compute(self) -> dict:
        """The mean loss, its perplexity and the tokens it is over (NaN before any)."""
        mean = self.total / self.count if self.count else float("nan")
        return {"mean": mean, "perplexity": math.exp(mean) if self.count else float("nan"), "tokens": self.count}
