"""cka-full: linear CKA over every analysed token of a view pooled (docs/method.md#cka-full).

Streamed d x d cross-products of every layer pair, so memory grows with
M^2 d^2, not with the tokens; :func:`check_cka_full_memory` refuses a run
whose sums would not fit before a model is loaded. For checking small
models against token-mode ``cka``.

Keys (one unit): ``hsic_full`` (M, M), ``cka_full_energy`` (M,) and
``cka_full_tokens`` (): the biased HSIC of the pooled, centred view states,
the energies of the pooled centred increments (each over n - 1) and n.
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import EffdepthError
from ..files import binary_size
from .cka import cka_token_sets

FULL_BUDGET_BYTES = 4 << 30
FULL_KEYS = ("hsic_full", "cka_full_energy", "cka_full_tokens")


def centred_energies(y: torch.Tensor) -> torch.Tensor:
    """``|Y_0|^2`` and ``|Y_l - Y_{l-1}|^2`` of states ``(M, n, d)``, from explicit differences.

    Consecutive states are nearly parallel: expanding ``|Y_l|^2 - 2<Y_l,
    Y_{l-1}> + |Y_{l-1}|^2`` would cancel catastrophically.

    >>> y = torch.tensor([[[1.0, 0.0]], [[1.0, 2.0]]], dtype=torch.float64)
    >>> centred_energies(y).tolist()
    [1.0, 4.0]
    """
    out = torch.empty(y.shape[0], dtype=torch.float64, device=y.device)
    out[0] = y[0].square().sum()
    if y.shape[0] > 1:
        steps = (y[1:] - y[:-1]).flatten(1)
        out[1:] = torch.linalg.vecdot(steps, steps)
    return out


def _pair_offset(i: int, m: int) -> int:
    """Index of the pair (i, i) in the list of pairs i <= j, row by row."""
    return i * m - i * (i - 1) // 2


def check_cka_full_memory(views, num_states: int, hidden_size: int, budget_bytes: int = FULL_BUDGET_BYTES) -> int:
    """Bytes cka-full needs for these views; a one-line error when over ``budget_bytes``.

    Every view token set keeps M(M+1)/2 float64 d x d cross-products; call
    this before loading a model.

    >>> check_cka_full_memory(["default"], 3, 4)
    768
    >>> check_cka_full_memory(["default"], 31, 576, budget_bytes=1 << 30)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: cka-full needs 1.2 GiB (1 view token set(s) x 496 layer pairs x 576^2 float64 cross-products), over its 1.0 GiB budget; use --similarity cka (cross-sequence linear CKA, the default) or fewer views
    """
    sets = len(cka_token_sets(views))
    pairs = num_states * (num_states + 1) // 2
    needed = sets * pairs * hidden_size * hidden_size * 8
    if needed > budget_bytes:
        raise EffdepthError(
            f"cka-full needs {binary_size(needed)} ({sets} view token set(s) x {pairs} layer pairs x "
            f"{hidden_size}^2 float64 cross-products), over its {binary_size(budget_bytes)} budget; "
            "use --similarity cka (cross-sequence linear CKA, the default) or fewer views"
        )
    return needed


class PooledCka:
    """Streamed pooled statistics of one view token set for cka-full.

    Keeps the token count, per-layer sums and the d x d cross-products of
    every layer pair i <= j, all of states shifted by a fixed reference (the
    mean of the first update): centring at the end then subtracts only the
    small residual mean, so a dominant mean cannot cancel digits away. Update
    energies are summed from explicit differences of the shifted states.

    >>> acc = PooledCka()
    >>> acc.update(torch.randn(3, 10, 4, dtype=torch.float64))
    >>> st = acc.compute(); st["hsic_full"].shape, float(st["cka_full_tokens"])
    ((3, 3), 10.0)
    """

    FIELDS = ("count", "shift", "sums", "cross", "increment_sq")

    def __init__(self):
        self.count = 0
        self.shift = None  # (M, d)
        self.sums = None  # (M, d): sum of shifted states
        self.cross = None  # (M(M+1)/2, d, d): sum of shifted z_i^T z_j, pairs i <= j
        self.increment_sq = None  # (M,): sum of |z_0|^2 and |z_l - z_{l-1}|^2

    def _allocate(self, shift: torch.Tensor) -> None:
        m, d = shift.shape
        self.shift = shift.clone()
        self.sums = torch.zeros_like(shift)
        self.cross = torch.zeros(m * (m + 1) // 2, d, d, dtype=torch.float64, device=shift.device)
        self.increment_sq = torch.zeros(m, dtype=torch.float64, device=shift.device)

    def update(self, y: torch.Tensor) -> None:
        """Add view states ``(M, n, d)`` (uncentred, any n)."""
        self.commit(self.prepare(y))

    def prepare(self, y: torch.Tensor) -> tuple | None:
        """Everything an update of ``y`` allocates (the shifted states, their sums and energies), for
        :meth:`commit`: a failure here (out of memory) leaves the sums as they were."""
        y = y.to(torch.float64)
        if y.shape[1] == 0:
            return None
        if self.shift is None:
            self._allocate(y.mean(dim=1))  # zero sums over zero tokens: valid whatever follows
        self._move(y.device)
        z = y - self.shift[:, None]
        return z, z.sum(dim=1), centred_energies(z)

    def commit(self, prepared: tuple | None) -> None:
        """Add a :meth:`prepare` d update, in place only (no allocation, so it cannot fail half-way)."""
        if prepared is None:
            return
        z, sums, energies = prepared
        m, n, d = z.shape
        self.sums += sums
        self.increment_sq += energies
        for i in range(m):
            at = _pair_offset(i, m)
            # In place: no (M-i, d, d) temporary per layer.
            self.cross[at : at + m - i].baddbmm_(z[i].T.expand(m - i, d, n), z[i:])
        self.count += n

    def _move(self, device: torch.device) -> None:
        """Keep everything on the device of the states (e.g. after loading a CPU checkpoint)."""
        if self.shift.device != device:
            for k in ("shift", "sums", "cross", "increment_sq"):
                setattr(self, k, getattr(self, k).to(device))

    def merge(self, other: "PooledCka") -> None:
        """Add another accumulator's tokens (e.g. another rank's), re-expressed on this shift."""
        if other.count == 0:
            return
        if self.shift is None:
            self._allocate(other.shift)
            self.cross.copy_(other.cross)
            self.sums.copy_(other.sums)
            self.increment_sq.copy_(other.increment_sq)
            self.count = other.count
            return
        m = self.shift.shape[0]
        nb = float(other.count)
        delta = other.shift.to(self.shift) - self.shift  # z_self = z_other + delta
        sums_b = other.sums.to(self.shift)
        for i in range(m):
            at = _pair_offset(i, m)
            block = other.cross[at : at + m - i].to(self.shift)
            block = block + delta[i][None, :, None] * sums_b[i:, None, :]
            block = block + sums_b[i][None, :, None] * delta[i:, None, :]
            block = block + nb * delta[i][None, :, None] * delta[i:, None, :]
            self.cross[at : at + m - i] += block
        step = torch.cat([delta[:1], delta[1:] - delta[:-1]])
        step_sums = torch.cat([sums_b[:1], sums_b[1:] - sums_b[:-1]])
        self.increment_sq += (
            other.increment_sq.to(self.shift) + 2.0 * (step * step_sums).sum(-1) + nb * step.square().sum(-1)
        )
        self.sums += sums_b + nb * delta
        self.count += other.count

    def compute(self) -> dict:
        """``hsic_full``, ``cka_full_energy`` and ``cka_full_tokens`` (see the module docstring)."""
        n = self.count
        if n < 2:
            raise ValueError(f"cka-full needs at least 2 pooled tokens, have {n}")
        m = self.shift.shape[0]
        mean = self.sums / n
        hsic = torch.zeros(m, m, dtype=torch.float64, device=self.shift.device)
        for i in range(m):
            at = _pair_offset(i, m)
            c = self.cross[at : at + m - i] - n * mean[i][None, :, None] * mean[i:, None, :]
            row = c.square().sum(dim=(1, 2))
            hsic[i, i:] = row
            hsic[i:, i] = row
        step_mean = torch.cat([mean[:1], mean[1:] - mean[:-1]])
        energy = self.increment_sq - n * step_mean.square().sum(-1)
        return {
            "hsic_full": (hsic / float(n - 1) ** 2).cpu().numpy(),
            "cka_full_energy": (energy / float(n - 1)).cpu().numpy(),
            "cka_full_tokens": np.asarray(float(n)),
        }

    def copy(self) -> "PooledCka":
        """An independent copy on the same device."""
        out = PooledCka()
        out.count = self.count
        for k in ("shift", "sums", "cross", "increment_sq"):
            value = getattr(self, k)
            setattr(out, k, None if value is None else value.clone())
        return out

    def state_dict(self) -> tuple:
        """``(arrays, meta)``: float64 numpy arrays for saving (none when nothing was added), no meta."""
        if self.shift is None:
            return {}, {}
        out = {k: getattr(self, k).cpu().numpy() for k in ("shift", "sums", "cross", "increment_sq")}
        out["count"] = np.asarray(float(self.count))
        return out, {}

    def load_state_dict(self, arrays: dict, meta: dict) -> None:
        """Continue from :meth:`state_dict`."""
        self.__init__()
        if arrays:
            for k in ("shift", "sums", "cross", "increment_sq"):
                setattr(self, k, torch.from_numpy(np.asarray(arrays[k], dtype=np.float64)).clone())
            self.count = int(arrays["count"])
