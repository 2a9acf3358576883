"""One measurement spread over several processes or nodes, with ``torchrun``.

::

    torchrun --nproc-per-node 4 -m effdepth.scale.distributed measure EleutherAI/pythia-1b --num-seqs 512 --out runs/p1b

Every rank pools (or, under ``--pooling none``, samples) its share of the batches into a shard; rank 0
gathers the shards, analyses them and alone writes ``result.json``. The numbers, intervals included,
are those of ``effdepth measure`` on the same passages.

Backends: ``gloo`` (CPU, the default without CUDA) or ``nccl`` (GPUs; each
rank uses ``cuda:LOCAL_RANK``). ``--device-map`` is not supported here, nor
are checkpoints (rerun instead: each rank's share is small).
"""

from __future__ import annotations

from effdepth.errors import EffdepthError
from effdepth.options import Options
from effdepth.scale.distributed.group import UNDER_TORCHRUN, PeerFailed, agreed, comm_device, process_group

__all__ = ["PeerFailed", "agreed", "comm_device", "measure_distributed", "process_group"]


def measure_distributed(options: Options, *, progress: bool = True, folder=None):
    """:func:`effdepth.measure` over the ranks of the initialised process group, called on every rank with
    the same options; rank 0 gets the :class:`~effdepth.Result`, the others ``None``. Without torchrun,
    ``import torch.distributed.nn.functional`` before ``init_process_group`` (see :func:`process_group`).
    ``folder`` is where every rank writes its samples (a folder every rank sees).
    """
    import torch.distributed as dist

    from effdepth.scale.distributed.passages import measure_passages_distributed

    if not dist.is_available() or not dist.is_initialized():
        raise EffdepthError(f"no torch.distributed process group; {UNDER_TORCHRUN}")
    if options.load.device_map is not None:
        raise EffdepthError(
            "--device-map does not combine with a distributed measurement: every rank holds the whole model"
        )
    if folder is None:
        raise EffdepthError(
            "a distributed measurement writes each rank's pooled vectors to a folder every rank sees; pass "
            "folder= (the command line's --out)"
        )
    return measure_passages_distributed(options, folder, progress=progress)
