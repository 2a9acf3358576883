"""One measurement spread over several processes or nodes, with ``torchrun``.

::

    torchrun --nproc-per-node 4 -m effdepth.distributed measure EleutherAI/pythia-1b --num-seqs 512 --out runs/p1b

Passage mode (the default): every rank loads the model and the same
passages, pools its share of the batches one process would run, and writes
them to a shard under the output folder; rank 0 gathers the shards into one
store and analyses it (:mod:`.passages`). Token mode (``--pooling none``):
every rank measures a contiguous share of the sequences (rank 0 the first)
and sends its per-sequence statistics to rank 0 with ``torch.distributed``;
they are additive per sequence and arrive in rank order, so rank 0 holds
exactly the units a single process would have, in the same order. Either
way the numbers, bootstrap intervals included, are those of ``effdepth
measure`` on the same passages or sequences. Rank 0 alone writes
``result.json`` (and the figures).

Backends: ``gloo`` (CPU, the default without CUDA) or ``nccl`` (GPUs; each
rank uses ``cuda:LOCAL_RANK``). Views that fit means or principal
directions use the calibration estimate, fitted by every rank on the same
calibration set as one process would use (the first sequences holding at
least 8 sequences and 2,048 tokens, see
:func:`~effdepth.numerics.fits.calibration_prefix`); ``--pc-estimate
exact`` and ``--device-map`` are not supported here, nor are checkpoints
(rerun instead: each rank's share is small).
"""

from __future__ import annotations

import os
import time
from contextlib import contextmanager
from dataclasses import replace

import numpy as np
import torch

from ..errors import EffdepthError
from ..numerics.similarities import get_similarity
from ..options import DEFAULT_SIMILARITY, Options, RunOptions

UNDER_TORCHRUN = (
    "run it under torchrun, e.g. torchrun --nproc-per-node 2 -m effdepth.distributed measure MODEL --out DIR"
)


class PeerFailed(EffdepthError):
    """Another rank failed; its own message says why (this one is not worth printing twice)."""


def shares(total: int, world: int) -> list[tuple[int, int]]:
    """Contiguous ``[lo, hi)`` sequence ranges per rank, in whole pairs of sequences (token-mode
    cka pairs consecutive sequences, so every rank's pairs are those of one process): the first
    ``(total // 2) % world`` ranks get one pair more, the last rank an odd last sequence.

    >>> shares(7, 3), shares(8, 3)
    ([(0, 2), (2, 4), (4, 7)], [(0, 4), (4, 6), (6, 8)])
    """
    base, extra = divmod(total // 2, world)
    bounds, lo = [], 0
    for r in range(world):
        hi = lo + 2 * (base + (1 if r < extra else 0))
        bounds.append((lo, hi))
        lo = hi
    bounds[-1] = (bounds[-1][0], total)
    return bounds


def measure_distributed(options: Options, *, progress: bool = True, folder=None):
    """:func:`effdepth.measure` over the ranks of the initialised process group.

    Call it on every rank (same options); rank 0 gets the
    :class:`~effdepth.Result`, the others ``None``. Launch with ``torchrun``
    (see the module docstring), or initialise ``torch.distributed`` yourself
    (then ``import torch.distributed.nn.functional`` before
    ``init_process_group``: see :func:`process_group`). Passage mode (the
    default) needs ``folder``, where every rank writes its pooled vectors
    (:mod:`.passages`: a folder every rank sees); token mode sends statistics.
    """
    import torch.distributed as dist

    from ..measure import MeasurementState, accumulate, prepare, result_from_accumulator

    if not dist.is_available() or not dist.is_initialized():
        raise EffdepthError(f"no torch.distributed process group; {UNDER_TORCHRUN}")
    analysis = options.analysis
    if options.load.device_map is not None:
        raise EffdepthError(
            "--device-map does not combine with a distributed measurement: every rank holds the whole model"
        )
    if analysis.passages:
        from .passages import measure_passages_distributed

        if folder is None:
            raise EffdepthError(
                "a distributed passage-mode measurement writes each rank's pooled vectors to a folder "
                "every rank sees; pass folder= (the command line's --out)"
            )
        return measure_passages_distributed(options, folder, progress=progress)
    view_specs = analysis.view_specs
    if analysis.pc_estimate == "exact" and any(v.needs_fit for v in view_specs):
        raise EffdepthError(
            "--pc-estimate exact is not supported in a distributed measurement; use the default calibration estimate"
        )
    single_process = [spec for spec in map(get_similarity, analysis.similarity) if not spec.distributable]
    if single_process:
        spec = single_process[0]
        raise EffdepthError(
            f"{spec.name} is not supported in a distributed measurement ({spec.not_distributed}); use "
            f"--similarity {DEFAULT_SIMILARITY}, or measure {spec.name} in one process"
        )
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = comm_device()
    started = time.perf_counter()

    prepared = agreed(
        lambda: prepare(options.load, progress=progress and rank == 0), "loading the model and corpus", comm
    )
    total = prepared.tokens.num_seqs
    if total < 2 * world:
        raise EffdepthError(
            f"{total} sequences cannot be shared by {world} processes in pairs; use --num-seqs >= "
            f"{2 * world} or fewer processes"
        )
    bounds = shares(total, world)
    lo, hi = bounds[rank]
    cap = analysis.surrogate_seqs
    # Each rank's surrogate streams draw the noise of its own global sequences, up to the cap.
    state = MeasurementState.new(
        analysis, first_sequence=lo, surrogate_limit=None if cap is None else max(0, min(hi, cap) - lo)
    )
    agreed(lambda: calibrate(prepared, state, analysis), "fitting the views on the calibration sequences", comm)
    mine = replace(prepared, tokens=prepared.tokens.rows(lo, hi))
    run = agreed(
        lambda: accumulate(mine, state, analysis.batch_size, run=RunOptions(progress=progress and rank == 0)),
        "measuring",
        comm,
    )
    merged = gather_state(state, analysis, comm)
    if rank != 0:
        return None
    run = {
        **run,
        "distributed": {"world_size": world, "backend": dist.get_backend(), "shares": [list(b) for b in bounds]},
    }
    return result_from_accumulator(prepared, merged, analysis, started=started, run=run)


def calibrate(prepared, state, analysis) -> None:
    """Fit center / top-k PC views (real and surrogate streams) on the calibration set of the whole
    corpus, as one process would. Every rank does it on the same sequences, so every rank applies the same fit."""
    from ..measure import fit_views

    fit_views(prepared, state, analysis.batch_size, progress=False)


def gather_state(state, analysis, device: torch.device):
    """Rank 0: the whole measurement's :class:`~effdepth.measure.MeasurementState`, every rank's
    sequences in rank order (surrogate streams too); other ranks ``None``."""
    from ..measure import MeasurementState

    views = gather_accumulator(state.views, device)
    calibrated = None
    if state.calibrated is not None:
        kinds = {kind: gather_accumulator(acc, device) for kind, acc in state.calibrated.accumulators.items()}
        sequences = _all_gather_ints([state.calibrated.sequences], device)
        if views is not None:
            calibrated = MeasurementState.new(analysis).calibrated
            calibrated.accumulators = kinds
            calibrated.sequences = sum(s[0] for s in sequences)
    if views is None:
        return None
    return MeasurementState(views, calibrated, None)


def gather_accumulator(acc, device: torch.device):
    """Rank 0: a :class:`ViewAccumulator` with every rank's units in rank order; others ``None``.

    Each rank flattens its per-unit arrays into one float64 vector (same
    keys, same per-unit shapes everywhere; only the unit counts differ:
    sequences, and pairs of them for cka), padded to the longest, and rank 0
    gathers and splits them. Every share is whole pairs, so only the last
    rank can hold a sequence without a partner: the odd last one, left out.
    """
    import torch.distributed as dist

    from ..numerics.streams import ViewAccumulator

    rank, world = dist.get_rank(), dist.get_world_size()
    arrays, meta = acc.state_dict()
    # A partner left waiting stays unpaired.
    kept = {k: np.asarray(v, dtype=np.float64) for k, v in arrays.items() if not k.startswith(("fit|", "partner|"))}
    # A rank without a unit of some kind (e.g. no surrogate pair) has no array for it: agree on every key first.
    layouts: list = [None] * world
    dist.all_gather_object(layouts, {k: (len(v), v.shape[1:]) for k, v in kept.items()})
    keys = sorted(set().union(*layouts))
    unit_shapes = {k: next(layout[k][1] for layout in layouts if k in layout) for k in keys}
    flat = np.concatenate([kept[k].ravel() for k in keys if k in kept] or [np.zeros(0)])
    sizes = _all_gather_ints([len(flat), acc.sequences, acc.tokens, acc.padding_rows], device)
    longest = max(s[0] for s in sizes)
    mine = torch.zeros(longest, dtype=torch.float64, device=device)
    mine[: len(flat)] = torch.from_numpy(flat).to(device)
    received = [torch.zeros_like(mine) for _ in range(world)] if rank == 0 else None
    dist.gather(mine, gather_list=received, dst=0)
    if rank != 0:
        return None
    parts = {k: [] for k in keys}
    before = 0  # sequences of the ranks before: where this rank's pairs start
    for (length, sequences, _, _), layout, vector in zip(sizes, layouts, received):
        units = {k: layout[k][0] if k in layout else 0 for k in keys}
        _split(vector[:length].cpu().numpy(), units, keys, unit_shapes, parts)
        if "pairs|first" in parts:
            parts["pairs|first"][-1] = parts["pairs|first"][-1] + before
        before += sequences
    merged_arrays = {k: np.concatenate(v) for k, v in parts.items()}
    merged_arrays.update({k: v for k, v in arrays.items() if k.startswith("fit|")})
    merged_meta = {
        **meta,
        "sequences": sum(s[1] for s in sizes),
        "tokens": sum(s[2] for s in sizes),
        "padding_rows": sum(s[3] for s in sizes),
        "partner": None,
    }
    merged = ViewAccumulator(
        [v.name for v in acc.views],
        include_embedding=acc.include_embedding,
        pc_estimate=acc.pc_estimate,
        similarities=acc.similarities,
        statistics=acc.statistics,
    )
    merged.load_state_dict(merged_arrays, merged_meta)
    return merged


def _split(vector: np.ndarray, units: dict, keys: list, unit_shapes: dict, into: dict) -> None:
    at = 0
    for k in keys:
        size = units[k] * int(np.prod(unit_shapes[k], dtype=np.int64))
        into[k].append(vector[at : at + size].reshape((units[k],) + unit_shapes[k]))
        at += size


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

    ``torch.distributed.nn.functional`` takes ``group.WORLD`` as a default
    argument when it is imported, and ``torch._dynamo`` (which loading a model
    in transformers imports) imports it. Imported after the group exists, it
    holds the group, so destroying it does not stop gloo's worker threads; one
    of them can then still be releasing a finished collective's tensors when
    the interpreter shuts down, and aborts the process ("terminate called
    without an active exception"), which makes torchrun stop every rank.
    Imported first, its defaults are ``None``.
    """
    import torch.distributed.nn.functional  # noqa: F401
