"""A measurement over torchrun ranks: each rank pools (or samples) its share of the batches, rank 0 analyses.

Every rank loads the model and the same passages, and takes the batches a
single process would run (longest passages first, ``--batch-size`` at a
time) round-robin: rank r runs batches r, r + W, r + 2W, ... Each rank
writes its batches' pooled vectors to a shard of its own under the output
folder (``rank-R/``: its rows of the store, at their passages' indices),
so a shared filesystem is all the ranks share, never a file; once every
rank has written, rank 0 gathers the shards into one store, row by row of
the passages, and runs the analysis :func:`effdepth.measure` runs. A batch
is the same batch as in one process, so the pooled vectors, and every
number, are those of ``effdepth measure`` on the same passages.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.store import PooledStore, mark_movable, temporary_folder

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
    """:func:`effdepth.measure` in passage mode over the ranks of the process group (see the module
    docstring); rank 0 gets the :class:`~effdepth.Result`, the others ``None``. ``folder`` holds the
    shards while the ranks write them (every rank must see it: a shared filesystem across nodes)."""
    import torch.distributed as dist

    from effdepth.measurement import prepare
    from effdepth.measurement.pooling import PassageForward, pooled_batches
    from effdepth.measurement.run import (
        _check_finite,
        _hidden_size,
        _pad_id,
        _provenance,
        analyse_store,
        as_numpy,
        check_before_forward,
        passage_config,
    )
    from effdepth.numerics.pooling import PassagePooler
    from effdepth.numerics.sampling import TokenSampler
    from effdepth.numerics.views import variants_for, views_variants
    from effdepth.scale.distributed import agreed, comm_device

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
    width = _hidden_size(lm)
    agreed(lambda: check_before_forward(passages, arch.num_layers, width, analysis), "checking the passages", comm)
    tokens = analysis.token_reduction
    variants = variants_for(analysis.view_specs) if tokens is None else views_variants(analysis.view_specs)
    shards = Path(folder) / SHARDS
    mine = batches_of(passages.lengths, analysis.batch_size, rank, world)
    rows = [i for batch in mine for i in batch]

    def pool_my_batches() -> None:
        lengths, bos = passages.lengths[rows], passages.starts_with_bos[rows]
        shard = PooledStore.create(
            shards / f"rank-{rank}",
            variants,
            layers=arch.num_layers + 1,
            width=width,
            lengths=lengths,
            starts_with_bos=bos,
            extra={"rows": rows},
            offsets=None if tokens is None else tokens.offsets(lengths, bos, variants),
        )
        where = {passage: k for k, passage in enumerate(rows)}
        forward = PassageForward(analysis.batch_size, analysis.states, _pad_id(lm), progress and rank == 0)
        if tokens is None:
            pooler = PassagePooler(variants, arch.num_layers)
        else:  # drawn by each passage's index in the corpus: the same tokens as in one process
            pooler = TokenSampler(variants, arch.num_layers, k=tokens.k, seed=tokens.seed)
        order = np.asarray(rows, dtype=np.int64)
        for indices, pooled, sums in pooled_batches(lm.model, arch, passages, order, pooler, forward):
            _check_finite(pooled, indices, lm)
            shard.write([where[i] for i in indices], as_numpy(pooled), sums.numpy())
        shard.commit(len(rows))

    agreed(pool_my_batches, "measuring passages", comm)
    if rank != 0:
        return None
    try:
        offsets = None if tokens is None else tokens.offsets(passages.lengths, passages.starts_with_bos, variants)
        store = gather_shards(shards, world, passages, variants, arch.num_layers + 1, width, offsets)
    finally:
        shutil.rmtree(shards, ignore_errors=True)
    result = analyse_store(store, analysis, progress=progress, seq_len=prepared.load.seq_len)
    result.config.update(passage_config(prepared, analysis))
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
    result.provenance.update(_provenance(prepared, started, facts))
    result.pooled = store.folder
    mark_movable(store.folder)
    return result


def gather_shards(
    shards: Path, world: int, passages, variants, layers: int, width: int, offsets: dict | None = None
) -> PooledStore:
    """Rank 0: one store of every passage from the ranks' shards (each passage's rows where it belongs)."""
    store = PooledStore.create(
        temporary_folder() / "pooled",
        variants,
        layers=layers,
        width=width,
        lengths=passages.lengths,
        starts_with_bos=passages.starts_with_bos,
        offsets=offsets,
    )
    written = 0
    for r in range(world):
        shard = PooledStore.open(shards / f"rank-{r}")
        rows = np.asarray(shard.meta["rows"], dtype=np.int64)
        if shard.written != len(rows):
            raise EffdepthError(f"rank {r} wrote {shard.written} of its {len(rows)} passages; measure again")
        arrays = shard.arrays()
        if offsets is None:
            samples = np.stack([np.asarray(arrays[v]) for v in variants])
        else:  # each variant's samples, the shard's passages back to back in its row order
            samples = {v: np.asarray(arrays[v]) for v in variants}
        store.write(rows, samples, np.asarray(shard.token_sums).transpose(1, 0, 2))
        written += len(rows)
        shard.close()
    store.commit(written)
    return store
