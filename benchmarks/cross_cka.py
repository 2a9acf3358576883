"""The cross-model CKA matrix against pytorch-cka 1.1.3's computation on the same activations, in one run.

Two stacks of L+1 states over the same N passages (A a random walk of width d_A, B A's states through a
random map to width d_B plus noise): effdepth's ``numerics.cross_cka`` (both estimators, the Gram route
over row tiles of the lower triangle, float64) against pytorch-cka's ``cka_from_features`` (its
unbiased HSIC of whole Gram matrices, given the same float64 activations; it has no biased estimator).
Rounds alternate the two; printed: each round's times and ratio (target: ours no slower, at most 1),
the median, and the largest difference of the unbiased CKA matrices (target: at most 1e-6).

pytorch-cka is in effdepth's test extra (``pip install -e .[test]``), not a dependency of effdepth itself;
without it the script says how to install it and exits.

    python benchmarks/cross_cka.py [--passages 1024] [--layers 30] [--widths 576,640] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

from effdepth.numerics.cross_cka import cross_cka
from effdepth.numerics.hsic_plan import byte_size
from effdepth.numerics.stacks import PooledStates


def activations(layers: int, passages: int, widths: tuple, seed: int = 0) -> tuple:
    """``(A, B)``: ``(L+1, N, d_A)`` and ``(L+1, N, d_B)`` float64 states of two related models on the same passages."""
    rng = np.random.default_rng(seed)
    a = np.cumsum(rng.standard_normal((layers + 1, passages, widths[0])), axis=0)
    b = a @ rng.standard_normal((widths[0], widths[1])) / np.sqrt(widths[0])
    return a, b + 2.0 * rng.standard_normal(b.shape)


def pytorch_cka():
    """pytorch-cka's module ``cka``; a line saying how to install it, and exit, when it is missing."""
    try:
        import cka
    except ImportError:
        sys.exit("benchmarks/cross_cka.py compares with pytorch-cka, which is not installed: pip install -e '.[test]'")
    return cka


def timed(function) -> tuple:
    start = time.perf_counter()
    out = function()
    return time.perf_counter() - start, out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--widths", default="576,640")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    widths = tuple(int(w) for w in args.widths.split(","))
    a, b = activations(args.layers, args.passages, widths)
    theirs_module = pytorch_cka()
    tensors = [torch.from_numpy(x).to(args.device) for x in (a, b)]

    def ours():
        return cross_cka(PooledStates(a, args.device), PooledStates(b, args.device), device=args.device)

    print(
        f"{args.layers + 1} x {args.layers + 1} states, N = {args.passages} passages, widths {widths[0]} and "
        f"{widths[1]}, float64, {torch.get_num_threads()} threads, {args.device}"
    )
    rounds = []
    for r in range(args.repeats):
        ours_s, out = timed(ours)
        theirs_s, theirs = timed(lambda: theirs_module.cka_from_features(*tensors))
        rounds.append((ours_s, theirs_s))
        print(
            f"round {r + 1}: ours {ours_s:.2f} s (both estimators), pytorch-cka {theirs_s:.2f} s, "
            f"ratio {ours_s / theirs_s:.3f}"
        )
    memory = out["memory"]
    print(
        f"ours: {memory['route']} route, {memory['tiles']} tile(s) of {memory['tile_rows']} rows, peak "
        f"{byte_size(memory['peak_bytes'])} planned within {byte_size(memory['budget_bytes'])}"
    )
    difference = np.abs(out["cka-debiased"] - theirs.cpu().numpy()).max()
    ratios = [o / t for o, t in rounds]
    print(
        f"ours / pytorch-cka {theirs_module.__version__}: median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.3f}-{max(ratios):.3f}] (target <= 1)"
    )
    print(f"largest |ours - pytorch-cka| of the unbiased CKA matrix: {difference:.1e} (target <= 1e-6)")


if __name__ == "__main__":
    main()
