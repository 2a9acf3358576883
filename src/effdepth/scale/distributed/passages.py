"""A measurement over torchrun ranks: each rank pools (or samples) its share of the batches, rank 0 analyses.

Rank r runs batches r, r + W, r + 2W, ... of those one process would run, into its own shard
(``rank-R/``: the ranks share a filesystem, never a file), so every number is that of ``effdepth measure``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.store import PooledStore, temporary_folder

SHARDS = ".effdepth-shards"


def batches_of(lengths, batch_size: int, rank: int, world: int) -> list:
    """The batches (passage indices, longest first) of ``rank``: every ``world``-th batch of one process's.

    >>> batches_of([3, 9, 5, 7, 1], 2, 0, 2), batches_of([3, 9, 5, 7, 1], 2, 1, 2)
    ([[1, 3], [4]], [[2, 0]])
    """
    order = np.argsort(-np.asarray(lengths), kind="stable")
    batches = [order[i : i + batch_size].tolist() for i in range(0, len(order), batch_size)]
    return batches[rank::world]


def measure_passages_distributed(options, folder: Path, *, progress: bool = True):
    """:func:`effdepth.measure` in passage mode over the ranks of the process group; rank 0 gets the
    :class:`~effdepth.Result`, the others ``None``. ``folder`` holds the shards (shared by every rank)."""
    import torch.distributed as dist

    from effdepth.measurement import prepare
    from effdepth.measurement.pooling import PassageForward, pool_into, pooled_batches
    from effdepth.measurement.run import hidden_size, measured_result, measurement_plan
    from effdepth.scale.distributed.group import agreed, comm_device

    analysis = options.analysis
    rank, world = dist.get_rank(), dist.get_world_size()
    comm = comm_device()
    started = time.perf_counter()
    prepared = agreed(
        lambda: prepare(options.load, progress=progress and rank == 0),
        "loading the model and passages",
        comm,
    )
    lm, arch, passages = prepared.lm, prepared.arch, prepared.tokens
    plan = agreed(
        lambda: measurement_plan(passages, arch.num_layers, hidden_size(lm), analysis), "checking the passages", comm
    )
    shards = Path(folder) / SHARDS
    rows = [i for batch in batches_of(passages.lengths, analysis.batch_size, rank, world) for i in batch]

    def pool_my_batches() -> None:
        shard = plan.store(shards / f"rank-{rank}", rows=rows, extra={"rows": rows})
        where = {passage: k for k, passage in enumerate(rows)}
        forward = PassageForward.of(lm, analysis, progress and rank == 0)
        # drawn by each passage's index in the corpus (the token reduction): the same tokens as in one process
        batches = pooled_batches(lm.model, arch, passages, np.asarray(rows, dtype=np.int64), plan.pooler(), forward)
        pool_into(shard, batches, dtype=forward.dtype, rows=where)
        shard.commit()

    agreed(pool_my_batches, "measuring passages", comm)
    if rank != 0:
        return None
    try:
        store = gather_shards(shards, world, plan)
    finally:
        shutil.rmtree(shards, ignore_errors=True)
    facts = {
        "batch_size_used": analysis.batch_size,
        "oom_retries": 0,
        "resumed_from": 0,
        "distributed": {
            "world_size": world,
            "backend": dist.get_backend(),
            "batches": [len(batches_of(passages.lengths, analysis.batch_size, r, world)) for r in range(world)],
        },
    }
    return measured_result(store, plan, prepared, started=started, facts=facts, progress=progress)


def gather_shards(shards: Path, world: int, plan) -> PooledStore:
    """Rank 0: one store of every passage from the ranks' shards (each passage's samples where they belong)."""
    store = plan.store(temporary_folder() / "pooled")
    for r in range(world):
        shard = PooledStore.open(shards / f"rank-{r}")
        rows = np.asarray(shard.meta["rows"], dtype=np.int64)
        if shard.written != len(rows):
            raise EffdepthError(f"rank {r} wrote {shard.written} of its {len(rows)} passages; measure again")
        store.write(rows, shard.arrays(), np.asarray(shard.token_sums).transpose(1, 0, 2))
        shard.close()
    store.commit()
    return store
