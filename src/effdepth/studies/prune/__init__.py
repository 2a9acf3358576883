"""The pruning boundary check (docs/method.md#pruning): can D_eff order a model's blocks for pruning?

Blocks are ranked two ways (ShortGPT's block influence, the local D_eff order); the first k of each are
skipped and the perplexity measured on held-out passages (drawn with the next seed) for every k.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from effdepth.errors import EffdepthError
from effdepth.measurement import prepare
from effdepth.measurement.run import measure_passages, passage_loss
from effdepth.models.hooks import HookSet, hidden_from_input, hidden_from_output
from effdepth.models.registry import ResolvedArchitecture
from effdepth.numerics.pruning import block_influence_order, local_deff_order, order_positions
from effdepth.numerics.sensitivity import spearman
from effdepth.options import Options, RunOptions
from effdepth.results.files import write_json_atomic
from effdepth.results.result import Result
from effdepth.studies.intervene.hooks import parse_layers, replace_hidden
from effdepth.studies.prune.report import SCHEMA

PRUNE_FILE = "prune.json"
ORDERS = ("block_influence", "local_deff")
DEFAULT_HELDOUT = 64


@dataclass
class PruneResult:
    """The measured result, both skip orders and the held-out perplexity of every k under each."""

    measured: Result
    skips: list  # k = 1..K
    orders: dict  # order name -> 1-based blocks, skipped first first
    scores: dict  # "block_influence": BI_l; "local_deff_change": D_eff(without l) - D_eff
    perplexity: dict  # order name -> perplexity after skipping its first k blocks, per k
    baseline: dict  # the loss and perplexity with nothing skipped
    heldout: dict
    spearman: float
    config: dict = field(default_factory=dict)

    def rows(self) -> list:
        """One row per k: the blocks each order skips and the perplexity it leaves."""
        return [
            {
                "k": k,
                **{f"{name}_skipped": self.orders[name][:k] for name in ORDERS},
                **{f"{name}_perplexity": self.perplexity[name][i] for name in ORDERS},
            }
            for i, k in enumerate(self.skips)
        ]

    def save(self, folder) -> Path:
        """``measured/`` (the result folder) and ``prune.json`` under ``folder``."""
        folder = Path(folder)
        self.measured.save(folder / "measured")
        return write_json_atomic(folder / PRUNE_FILE, self.record())

    def record(self) -> dict:
        """What ``prune.json`` holds (:func:`effdepth.load` reads it back)."""
        return {
            "schema": SCHEMA,
            "kind": "pruning boundary check",
            "model": self.measured.provenance.get("model", {}),
            "config": self.config,
            "skips": self.skips,
            "orders": self.orders,
            "scores": self.scores,
            "perplexity": self.perplexity,
            "baseline": self.baseline,
            "heldout": self.heldout,
            "spearman_of_rankings": self.spearman,
            "rows": self.rows(),
            "measured": "measured",
            "how": {
                "block_influence": "ShortGPT: 1 - mean over tokens of cos(s_{l-1}, s_l); lowest first",
                "local_deff": "D_eff of the default view's similarity with state l left out; the block "
                "leaving the highest D_eff first",
                "skip": "a skipped block outputs its input (s_l = s_{l-1})",
                "spearman": "rank correlation of the blocks' positions in the two orders",
            },
        }


class BlockSkip(HookSet):
    """Context manager: blocks ``layers`` (1-based) output their input, ``s_l = s_{l-1}`` (the block removed
    from the stream, its update dropped). No layer registers nothing: exactly the unmodified model.

    >>> import torch
    >>> from effdepth.models.tiny import tiny_model
    >>> from effdepth.models.registry import resolve_architecture
    >>> m = tiny_model("llama"); ids = torch.tensor([[256, 72, 105]])
    >>> with torch.no_grad(), BlockSkip(resolve_architecture(m), [2]):
    ...     out = m(ids).logits
    >>> bool((out != m(ids).logits).any())
    True
    """

    def __init__(self, arch: ResolvedArchitecture, layers):
        self.arch = arch
        self.layers = parse_layers(list(layers), arch.num_layers, "--skip") if list(layers) else ()

    def register(self):
        for layer in self.layers:
            yield self.arch.blocks[layer - 1].register_forward_hook(self._hook, prepend=True, with_kwargs=True)

    @staticmethod
    def _hook(module, args, kwargs, output):
        carried = hidden_from_input(args, kwargs)
        produced = hidden_from_output(output, carried)
        return replace_hidden(output, produced, carried.to(produced.device, produced.dtype))


def parse_skip(text) -> list:
    """``"4"`` or ``"1..4"`` -> ``[1, 2, 3, 4]``; ``"2..3"`` -> ``[2, 3]``.

    >>> parse_skip("3"), parse_skip("2..4")
    ([1, 2, 3], [2, 3, 4])
    """
    value = str(text).strip()
    match = re.fullmatch(r"(\d+)\s*\.\.\s*(\d+)", value)
    if match:
        lo, hi = int(match.group(1)), int(match.group(2))
    elif value.isdigit():
        lo, hi = 1, int(value)
    else:
        raise EffdepthError(f"--skip {text!r} is not K or A..B (numbers of blocks to skip); e.g. --skip 1..4")
    if lo < 1 or hi < lo:
        raise EffdepthError(f"--skip {text!r}: give 1 <= A <= B, e.g. --skip 1..4")
    return list(range(lo, hi + 1))


def prune_check(
    options: Options, skips, *, heldout: int = DEFAULT_HELDOUT, run: RunOptions | None = None
) -> PruneResult:
    """Measure, rank the blocks both ways, and the held-out perplexity after skipping k = ``skips`` blocks."""
    run = run or RunOptions()
    skips = sorted({int(k) for k in skips})
    if heldout < 1:
        raise EffdepthError(f"--heldout {heldout}: give at least 1 held-out passage for the perplexity")
    prepared = prepare(options.load, progress=run.progress)
    layers = prepared.arch.num_layers
    if skips[-1] >= layers:
        raise EffdepthError(f"--skip up to {skips[-1]} blocks, but the model has {layers}; skip at most {layers - 1}")
    held = heldout_passages(prepared, heldout)
    measured = measure_passages(prepared, options.analysis, run=run)
    view = measured.views.get("default")
    influence = (view.related or {}).get("block_influence") if view is not None else None
    if not influence or len(influence) != layers:
        raise EffdepthError(
            "the measurement has no block influence for the default view; measure the default view "
            "(--views default or paper) in passage mode"
        )
    similarity = np.asarray(view.similarity, dtype=np.float64)
    blocks = similarity[1:, 1:] if similarity.shape[0] == layers + 1 else similarity  # S_1..S_L
    local, change = local_deff_order(blocks)
    orders = {"block_influence": block_influence_order(influence), "local_deff": local}
    passes = [("none", [])] + [(name, orders[name][:k]) for k in skips for name in ORDERS]
    results = {}
    for name, skipped in tqdm(passes, desc="perplexity", unit="pass", disable=not run.progress, leave=False):
        results[(name, len(skipped))] = heldout_loss(prepared, held, skipped, options.analysis.batch_size)
    perplexity = {name: [results[(name, k)]["perplexity"] for k in skips] for name in ORDERS}
    rho = spearman(order_positions(orders["block_influence"]), order_positions(orders["local_deff"]))
    config = {
        "skips": skips,
        "heldout_passages": held.num_passages,
        "view": "default",
        "similarity": measured.primary_similarity,
        **measured.config,
    }
    return PruneResult(
        measured,
        skips,
        orders,
        {"block_influence": [float(x) for x in influence], "local_deff_change": [float(x) for x in change]},
        perplexity,
        results[("none", 0)],
        dict(held.info),
        rho,
        config,
    )


def heldout_passages(prepared, count: int):
    """``count`` passages of the measured corpus drawn with the next seed, none of them a measured passage."""
    from effdepth.data.passages import Passages, load_passages, take_identity

    load = prepared.load
    tokenizer = getattr(prepared.lm, "tokenizer", None)
    if not isinstance(load.corpus, (str, Path, list, tuple)) and load.corpus is not None:
        raise EffdepthError(
            "prune-check draws held-out passages from a text corpus; give --corpus as a file, folder, "
            "hf: dataset or shakespeare, not token ids"
        )
    measured = prepared.tokens
    seen = {tuple(measured.passage(i).tolist()) for i in range(measured.num_passages)}
    try:
        pool = load_passages(
            load.corpus,
            tokenizer,
            max_len=load.seq_len,
            num_passages=measured.num_passages + count,
            seed=load.seed + 1,
            bos=load.bos,
            split=load.passage_split,
        )
    except EffdepthError as exc:
        raise EffdepthError(
            f"{exc} (prune-check draws {count} held-out passages beside the {measured.num_passages} "
            "measured ones; lower --heldout or --num-seqs)"
        ) from None
    kept = [i for i in range(pool.num_passages) if tuple(pool.passage(i).tolist()) not in seen][:count]
    rows = [pool.passage(i).tolist() for i in kept]
    if len(rows) < count:
        raise EffdepthError(
            f"the corpus gives only {len(rows)} passages that are not measured, {count} held-out "
            "passages were asked for; lower --heldout or --num-seqs"
        )
    info = {
        **pool.info,
        "num_passages": len(rows),
        "seed": load.seed + 1,
        "sampling": f"drawn with seed {load.seed + 1}; passages also measured left out",
    }
    return Passages.from_rows(
        rows,
        bos_token_id=pool.info.get("bos_token_id"),
        name=pool.name,
        info=info,
        identity=take_identity(pool.identity, kept),
    )


def heldout_loss(prepared, passages, skipped, batch_size: int) -> dict:
    """Mean next-token loss and perplexity of the full model (LM head included) with ``skipped`` blocks skipped."""
    with BlockSkip(prepared.arch, skipped):
        return {**passage_loss(prepared, passages, batch_size), "skipped": list(skipped)}
