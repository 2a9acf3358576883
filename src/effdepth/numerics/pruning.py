"""Which blocks to skip first (docs/method.md#pruning): ShortGPT's block influence and the local D_eff order.

Both rank the L blocks from a saved result, no forward pass:

- block influence (Men et al. 2024, ShortGPT): ``BI_l = 1 - mean_t cos(s_{l-1}^t, s_l^t)``;
  the block that changes its input least (lowest BI) is skipped first;
- local D_eff: ``change_l = D_eff(without state l) - D_eff``; the block leaving the highest D_eff
  behind (the most redundant) is skipped first.
"""

from __future__ import annotations

import numpy as np

from effdepth.numerics.similarity import deff


def leave_one_out_deff(similarity: np.ndarray) -> np.ndarray:
    """D_eff of ``similarity`` (N x N) with each state left out in turn, ``(N,)``.

    >>> s = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    >>> leave_one_out_deff(s).round(4).tolist()   # leaving out either twin leaves two orthogonal states
    [2.0, 2.0, 1.0526]
    """
    s = np.asarray(similarity, dtype=np.float64)
    keep = ~np.eye(len(s), dtype=bool)
    return np.array([float(deff(s[np.ix_(keep[l], keep[l])])) for l in range(len(s))])


def local_deff_order(similarity: np.ndarray) -> tuple:
    """``(order, change)``: 1-based blocks, most redundant first, and each block's ``D_eff(without l) - D_eff``.

    >>> s = np.array([[1.0, 0.9, 0.0], [0.9, 1.0, 0.0], [0.0, 0.0, 1.0]])
    >>> order, change = local_deff_order(s); order, change.round(3).tolist()
    ([1, 2, 3], [0.125, 0.125, -0.822])
    """
    change = leave_one_out_deff(similarity) - float(deff(similarity))
    return [int(i) + 1 for i in np.argsort(-change, kind="stable")], change


def block_influence_order(block_influence) -> list:
    """1-based blocks, lowest block influence first (ShortGPT's pruning order).

    >>> block_influence_order([0.3, 0.1, 0.2])
    [2, 3, 1]
    """
    return [int(i) + 1 for i in np.argsort(np.asarray(block_influence, dtype=np.float64), kind="stable")]


def order_positions(order: list) -> np.ndarray:
    """Each block's position in a skip order (1 = skipped first), by block number.

    >>> order_positions([2, 3, 1]).tolist()
    [3.0, 1.0, 2.0]
    """
    positions = np.empty(len(order), dtype=np.float64)
    positions[np.asarray(order) - 1] = np.arange(1, len(order) + 1)
    return positions
