"""Closed-form references for D_eff (docs/method.md#references).

Every function accepts leading batch axes, so the bootstrap evaluates its resamples in one call; the
energy functions take numpy arrays or float64 tensors on any device and give back the same kind.
"""

from __future__ import annotations

import numpy as np
import torch


def _float64(values) -> tuple:
    """``(tensor, back)``: the values as a float64 tensor, and what turns a result into the caller's type."""
    if isinstance(values, torch.Tensor):
        return values.to(torch.float64), lambda t: t
    array = np.asarray(values, dtype=np.float64)
    if not array.flags.writeable:  # a broadcast view: torch wants memory it may own
        array = array.copy()
    return torch.from_numpy(array), lambda t: t.numpy()


def reference_fl(n: int) -> float:
    """The structural reference F_N = 2N/(N+1) of N orthogonal equal updates.

    >>> reference_fl(30)
    1.935483870967742
    """
    if n < 1:
        raise ValueError(f"need at least one state, got N={n}")
    return 2.0 * n / (n + 1.0)


def headline(deff, reference) -> dict:
    """The headline of a D_eff against its structural reference: their ratio and the gap in percent.

    >>> {k: round(v, 6) for k, v in headline(1.2, 1.5).items()}
    {'ratio': 0.8, 'gap_pct': 20.0}
    """
    ratio = deff / reference
    return {"ratio": ratio, "gap_pct": 100.0 * (1.0 - ratio)}


def energy_ratio_matrix(energies: np.ndarray) -> np.ndarray:
    """Pairwise ``min(E_i, E_j) / max(E_i, E_j)``: the similarity of two states
    of an orthogonal-increment process with cumulative energies ``E``.

    Two zero-energy states are identical (ratio 1), not undefined.

    >>> energy_ratio_matrix(np.array([1.0, 2.0]))
    array([[1. , 0.5],
           [0.5, 1. ]])
    """
    e, back = _float64(energies)
    lo = torch.minimum(e[..., :, None], e[..., None, :])
    hi = torch.maximum(e[..., :, None], e[..., None, :])
    positive = hi > 0
    return back(torch.where(positive, lo / torch.where(positive, hi, 1.0), 1.0))


def reference_from_energies(energies: np.ndarray) -> np.ndarray:
    """R(E) = N^2 / sum_ij min(E_i,E_j)/max(E_i,E_j) for cumulative energies E.

    With E_l = l this is F_N:

    >>> float(reference_from_energies(np.arange(1.0, 31.0)))
    1.935483870967742
    """
    e = np.asarray(energies, dtype=np.float64)
    n = e.shape[-1]
    return n * n / energy_ratio_matrix(e).sum(axis=(-2, -1))


def matched_energies(initial: np.ndarray, updates: np.ndarray, include_embedding: bool) -> dict:
    """Cumulative energies of the three matched references (docs/method.md#matched-references).

    ``initial`` is |S_0|^2 (shape ``(...)``), ``updates`` |U_1|^2..|U_L|^2 (shape ``(..., L)``). Returns
    ``(..., N)`` arrays for ``init`` (E_l = a + l), ``size`` (E_l = sum_{k<=l} |U_k|^2) and ``matched``
    (E_l = |S_0|^2 + sum_{k<=l} |U_k|^2). With ``include_embedding`` each gains E_0: ``a`` for ``init``,
    |S_0|^2 for ``matched``, and for ``size`` S_0 counts as one update of mean size, as F_N counts it
    (recorded as ``size_reference_embedding``). When every update is zero, ``a`` is infinite and
    R_init = R_matched = 1: the whole gap is booked as initial state.

    >>> e = matched_energies(np.array(2.0), np.array([1.0, 1.0]), False)
    >>> e["init"], e["matched"]
    (array([3., 4.]), array([3., 4.]))
    >>> matched_energies(np.array(2.0), np.array([0.0, 0.0]), False)["init"]
    array([1., 1.])
    """
    initial, back = _float64(initial)
    updates, _ = _float64(updates)
    mean_update = updates.mean(dim=-1)
    moves = mean_update > 0
    a = initial / torch.where(moves, mean_update, 1.0)
    steps = torch.arange(1, updates.shape[-1] + 1, dtype=torch.float64, device=updates.device)
    cumulative = torch.cumsum(updates, dim=-1)
    # a = inf (no update at all): E_l = a + l is one constant, written as 1 (R is scale-free).
    init = torch.where(moves[..., None], a[..., None] + steps, 1.0)
    size = cumulative
    matched = initial[..., None] + cumulative
    if include_embedding:
        init = torch.cat([torch.where(moves, a, 1.0)[..., None], init], dim=-1)
        size = torch.cat([mean_update[..., None], mean_update[..., None] + cumulative], dim=-1)
        matched = torch.cat([initial[..., None].expand_as(matched[..., :1]), matched], dim=-1)
    return {"init": back(init), "size": back(size), "matched": back(matched)}


def gap_attribution(fl, r_init, r_matched, d_eff) -> dict:
    """Split F_N - D_eff into three terms that add up exactly (docs/method.md#matched-references).

    >>> parts = gap_attribution(1.9, 1.5, 1.4, 1.2)
    >>> round(float(parts["correlated_updates"]), 12), round(float(sum(parts.values())), 12)
    (0.2, 0.7)
    """
    return {
        "initial_state": np.asarray(fl) - np.asarray(r_init),
        "size_imbalance": np.asarray(r_init) - np.asarray(r_matched),
        "correlated_updates": np.asarray(r_matched) - np.asarray(d_eff),
    }
