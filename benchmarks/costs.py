"""A flop model of token-mode cka against the forward pass it comes with.

For a pair of sequences of T_p and T_q tokens, cka forms the cross Gram
``Y_p Y_q^T`` of each of the M = L + 1 states and of their M increments
(float32 products, 2 * 2 * M * T_p * T_q * d flops) and the inner products of
those Grams (float64, 2 * 2 * M^2 * T_p * T_q flops). The decoder's forward
pass costs about 2 * T * P flops per sequence (P: the parameters of its L
blocks; no embedding lookup, no LM head) plus 2 * L * T^2 * d for causal
attention. Their ratio per sequence, about 0.08 * T / d for a standard block
(12 d^2 parameters), times the machine's throughput ratio of the forward's
dtype to float32 (1 for a float32 forward, 10 or more for bfloat16 on a
data-centre GPU), is the share of a forward pass's time cka adds.

    >>> round(cka_flop_share(num_layers=30, width=576, block_params=3_540_096, tokens=256), 4)   # SmolLM2-135M
    0.0435
"""

from __future__ import annotations


def pair_flops(num_states: int, tokens_p: int, tokens_q: int, width: int) -> dict:
    """Flops of one pair's cka: ``{"bmm": cross Grams (float32), "mm": their inner products (float64)}``.

    >>> pair_flops(31, 256, 256, 576)["bmm"] / (2 * 31 * 256 * 256 * 576)   # states and increments
    2.0
    """
    tiles = tokens_p * tokens_q
    return {"bmm": float(2 * 2 * num_states * tiles * width), "mm": float(2 * 2 * num_states * num_states * tiles)}


def forward_flops(num_layers: int, width: int, block_params: int, tokens: int) -> float:
    """Flops of one sequence's pass through the decoder blocks (``block_params`` each): weights
    and causal attention.

    >>> forward_flops(2, 4, 10, 3)
    264.0
    """
    return float(2 * tokens * num_layers * block_params + 2 * num_layers * tokens * tokens * width)


def cka_flop_share(*, num_layers: int, width: int, block_params: int, tokens: int) -> float:
    """Flops of cka per sequence (half a pair) over those of the decoder's forward pass."""
    per_pair = sum(pair_flops(num_layers + 1, tokens, tokens, width).values())
    return per_pair / 2 / forward_flops(num_layers, width, block_params, tokens)


def model_cka_flop_share(model, tokens: int) -> float:
    """:func:`cka_flop_share` of a loaded Hugging Face model (its blocks found as ``measure`` does)."""
    from effdepth.capture.registry import resolve_architecture

    blocks = resolve_architecture(model).blocks
    params = sum(p.numel() for p in blocks.parameters()) // len(blocks)
    return cka_flop_share(
        num_layers=len(blocks), width=int(model.config.hidden_size), block_params=params, tokens=tokens
    )
