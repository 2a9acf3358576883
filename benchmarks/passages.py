"""Passage mode's forward cost against a bare forward of the decoder stack, measured in one run.

Over the same passages, batches and order, two forward loops alternate in
rounds: the decoder stack alone (no LM head, no hooks), and the same loop
with effdepth's pooling hooks (every paper-view variant pooled in float64,
plus the per-token sums), as ``effdepth measure`` runs it. The ratio of
each round is printed with the median (target: at most 1.05 on CPU). The
analysis (the similarity, views and 1,000 resamples) is timed once beside
it, from the pooled vectors, with and without the confound controls (drop-pos0, length) and the
sample-size curve that every result carries.

    python benchmarks/passages.py [--model smollm2-135m] [--num-seqs 64] [--seq-len 128] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from effdepth.measurement import prepare
from effdepth.measurement.forward import decoder_forward
from effdepth.measurement.pooling import PassageForward, pooled_batches
from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
from effdepth.numerics.pooling import PassagePooler
from effdepth.numerics.views import PAPER_VIEWS, parse_views, variants_for
from effdepth.options import LoadOptions


def bare_forward(prepared, order, batch_size: int) -> float:
    start = time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(order), batch_size):
            ids, mask = prepared.tokens.batch(order[i : i + batch_size])
            decoder_forward(prepared.lm.model, prepared.arch, ids, mask)
    return time.perf_counter() - start


def pooled_forward(prepared, order, batch_size: int, variants) -> tuple:
    pooler = PassagePooler(variants, prepared.arch.num_layers)
    forward = PassageForward(batch_size, "blocks", 0, progress=False)
    chunks = []
    start = time.perf_counter()
    with torch.inference_mode():
        for indices, pooled, _ in pooled_batches(
            prepared.lm.model, prepared.arch, prepared.tokens, order, pooler, forward
        ):
            chunks.append((indices, {v: x.numpy() for v, x in pooled.items()}))
    elapsed = time.perf_counter() - start
    return elapsed, chunks


def pooled_arrays(chunks, variants, count: int) -> dict:
    """{variant: (L+1, B, d)} chunks -> {variant: (L+1, N, d)} in passage order."""
    first = chunks[0][1][variants[0]]
    out = {v: np.zeros((first.shape[0], count, first.shape[2])) for v in variants}
    for indices, pooled in chunks:
        for v in variants:
            out[v][:, indices] = pooled[v]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--num-seqs", type=int, default=64)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bootstrap", type=int, default=1000, help="resamples of the timed analysis")
    args = parser.parse_args()
    prepared = prepare(
        LoadOptions(model=args.model, corpus="shakespeare", seq_len=args.seq_len, num_seqs=args.num_seqs),
        progress=False,
    )
    order = list(np.argsort(-prepared.tokens.lengths, kind="stable"))
    variants = variants_for(parse_views(PAPER_VIEWS))
    bare_forward(prepared, order[: args.batch_size], args.batch_size)  # warm-up
    rounds = []
    for _ in range(args.repeats):
        bare = bare_forward(prepared, order, args.batch_size)
        pooled, chunks = pooled_forward(prepared, order, args.batch_size, variants)
        rounds.append((bare, pooled))
    ratios = [p / b for b, p in rounds]
    tokens = prepared.tokens.tokens
    print(
        f"{args.model}: {args.num_seqs} passages, {tokens} tokens, batch {args.batch_size}, "
        f"{torch.get_num_threads()} threads, variants {', '.join(variants)}"
    )
    for k, (b, p) in enumerate(rounds, start=1):
        print(f"round {k}: bare {b:.2f} s ({tokens / b:.0f} tok/s), pooled {p:.2f} s, ratio {p / b:.3f}")
    print(
        f"passage forward / bare decoder forward: median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.3f}-{max(ratios):.3f}] (target <= 1.05)"
    )
    arrays = pooled_arrays(chunks, variants, prepared.tokens.num_passages)
    lengths = prepared.tokens.lengths
    bare = statistics.median([b for b, _ in rounds])
    for views in ("paper", "default"):
        timed = {}
        for controls in (False, True):
            start = time.perf_counter()
            analyse_pooled(
                arrays, AnalysisPlan(views=views, bootstrap=args.bootstrap, controls=controls), lengths=lengths
            )
            timed[controls] = time.perf_counter() - start
        print(
            f"analysis ({views} views, cka + cka-debiased, {args.bootstrap} resamples, calibrated references): "
            f"{timed[True]:.1f} s, {timed[True] / bare:.2f}x the bare forward; the confound controls and the "
            f"sample-size curve add {timed[True] / timed[False] - 1:+.0%} to the {timed[False]:.1f} s without them "
            f"(target <= +25%)"
        )


if __name__ == "__main__":
    main()
