"""A flop model of cka's float64 token Grams against the forward pass they come with.

Per sequence of T tokens, cka forms one T x T Gram for each of the M = L + 1
states, over its upper triangle in row blocks
(:func:`effdepth.numerics.cka.gram_blocks`: 2 * rows * (T - start) * d flops
per block and state). The decoder's forward pass costs about 2 * T * P flops
(P: the parameters of its L blocks; no embedding lookup, no LM head) plus
2 * L * T^2 * d for causal attention. Their ratio, about 0.05 * T / d for a
standard block (12 d^2 parameters), times the machine's throughput ratio of
the forward's dtype to float64 (about 2 for float32 on a CPU, 10 or more for
bfloat16 on a data-centre GPU) is the share of a forward pass's time the
Grams add: the part of the cka / frobenius ratio no code change can remove
while the statistics stay float64.

    >>> round(gram_flop_share(num_layers=30, width=576, block_params=3_540_096, tokens=256), 4)   # SmolLM2-135M
    0.0258
"""

from __future__ import annotations


def gram_flops(num_states: int, tokens: int, width: int) -> float:
    """Flops of one sequence's token Grams as cka forms them (upper triangle, row blocks).

    >>> gram_flops(31, 256, 576) / (2 * 31 * 256 * 256 * 576)   # four row blocks: 10 of 16 tiles
    0.625
    """
    from effdepth.numerics.cka import gram_blocks

    return float(sum(2 * num_states * (stop - start) * (tokens - start) * width
                     for start, stop in gram_blocks(num_states, tokens)))


def forward_flops(num_layers: int, width: int, block_params: int, tokens: int) -> float:
    """Flops of one sequence's pass through the decoder blocks (``block_params`` each): weights
    and causal attention.

    >>> forward_flops(2, 4, 10, 3)
    264.0
    """
    return float(2 * tokens * num_layers * block_params + 2 * num_layers * tokens * tokens * width)


def gram_flop_share(*, num_layers: int, width: int, block_params: int, tokens: int) -> float:
    """Flops of the token Grams over those of the decoder's forward pass, for one sequence."""
    return gram_flops(num_layers + 1, tokens, width) / forward_flops(num_layers, width, block_params, tokens)


def model_gram_flop_share(model, tokens: int) -> float:
    """:func:`gram_flop_share` of a loaded Hugging Face model (its blocks found as ``measure`` does)."""
    from effdepth.capture.registry import resolve_architecture

    blocks = resolve_architecture(model).blocks
    params = sum(p.numel() for p in blocks.parameters()) // len(blocks)
    return gram_flop_share(num_layers=len(blocks), width=int(model.config.hidden_size), block_params=params, tokens=tokens)
