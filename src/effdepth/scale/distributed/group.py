"""The torchrun process group: joining it, and every rank agreeing on each step's success."""

from __future__ import annotations

import os
from contextlib import contextmanager

import torch

from effdepth.errors import EffdepthError

UNDER_TORCHRUN = (
    "run it under torchrun, e.g. torchrun --nproc-per-node 2 -m effdepth.scale.distributed measure MODEL --out DIR"
)


class PeerFailed(EffdepthError):
    """Another rank failed; its own message says why (this one is not worth printing twice)."""


def _all_gather_ints(values: list[int], device) -> list[list[int]]:
    import torch.distributed as dist

    mine = torch.tensor(values, dtype=torch.int64, device=device)
    out = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
    dist.all_gather(out, mine)
    return [t.tolist() for t in out]


def agreed(fn, what: str, device):
    """Run ``fn`` on every rank; if any rank fails, every rank raises (none waits forever)."""
    error = None
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - re-raised below, after the others know
        error, value = exc, None
    failed = _all_gather_ints([int(error is not None)], device)
    if error is not None:
        raise error
    bad = [r for r, (f,) in enumerate(failed) if f]
    if bad:
        raise PeerFailed(f"rank {', '.join(map(str, bad))} failed while {what}")
    return value


def comm_device() -> torch.device:
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


@contextmanager
def process_group(backend: str | None = None):
    """Join the process group torchrun set up; leave it at the end."""
    import torch.distributed as dist

    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise EffdepthError(f"not started by torchrun (no RANK / WORLD_SIZE); {UNDER_TORCHRUN}")
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    _import_before_the_group()
    dist.init_process_group(backend)
    try:
        yield dist.get_rank()
    finally:
        dist.destroy_process_group()


def _import_before_the_group() -> None:
    """Import what would otherwise keep the process group alive past ``destroy_process_group``.

    ``torch.distributed.nn.functional`` (imported by ``torch._dynamo``, which transformers imports) takes
    ``group.WORLD`` as a default argument at import. Imported after the group exists, it keeps gloo's
    threads alive, and one can abort the process at shutdown ("terminate called without an active
    exception"), so torchrun stops every rank. Imported first, its defaults are ``None``.
    """
    import torch.distributed.nn.functional  # noqa: F401
