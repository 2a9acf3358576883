"""A cost model of passage mode's analysis, checked against measured time, and projected to paper16 sizes.

The analysis (numerics/analysis.py) computes, per view, the HSIC
stacks of the states (M = L + 1 matrices of N passages x d), of the updates
(M - 1) and of the matched surrogate (M), and once per distinct top-PC count
the structural surrogate (M - 1: the analysed layers); the states of default
and of each confound control (drop-pos0, length) that is not a view, and the
sample-size curve's subsample rows on the default states. Each stack
(numerics/sample_hsic.py) takes the route of fewer flops (``hsic_route``),
with P = M (M + 1) / 2 pairs, R resamples and G bootstrap units (128):

- Gram route: the Gram tiles ``Yc_m Yc_m^T`` 2 M N^2 d, the unit-block inner
  products of every pair 2 M^2 N^2, both times the share of unit blocks the
  tiles form (``gram_fraction``: the lower triangle, about half);
- feature route: every unit's cross-products ``Yc_i[g]^T Yc_j[g]`` 2 P N d^2,
  their inner products 2 P G^2 d^2, the unit row sums 2 M N d G;
- on both, the resamples: ``u = K c`` 2 R G M N, ``sum_a w_a u_i,a u_j,a`` and
  its diagonal-weighted kin (five of them) per pair 10 R M^2 N, the quadratic
  forms of the pair blocks 4 R P G^2.

The forward pass it comes with costs about 2 T P_blocks + 2 L T s d flops
(T tokens, s tokens per passage, P_blocks the parameters of the decoder
blocks; no LM head).

Memory: what the analysis holds within ``--max-memory`` (the least budget it
works in, its peak, how often it passes over the stored vectors) is
``numerics.analysis.analysis_memory``, the function the analysis sizes itself
with; the projection prints it at paper16 shapes.

The check: the float64 rate of a batched matrix product is measured here,
the model predicts the analysis time of a few sizes from it, and the
analysis is timed. The projection: the model's flops at each paper16 shape
(N = 10,000, R = 1,000, the paper's five views) over an H200's float64 rate,
against the forward's flops over its bfloat16 rate, both at the same
fraction of peak (an assumption that benchmarks/gpu.py checks on a GPU).

    python benchmarks/analysis_cost.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from effdepth.numerics.analysis import (
    DEFAULT_BOOTSTRAP_UNITS,
    AnalysisPlan,
    analyse_pooled,
    analysis_memory,
    one_pass_bytes,
)
from effdepth.numerics.confounds import Subsamples
from effdepth.numerics.hsic_plan import gram_fraction, stack_plan
from effdepth.numerics.hsic_resample import Units
from effdepth.numerics.sample_hsic import DEFAULT_BUDGET_BYTES
from effdepth.numerics.views import CONTROLS, PAPER_VIEWS, parse_views

#: H200 SXM peak dense throughput (NVIDIA's data sheet): float64 tensor cores, bfloat16 tensor cores.
H200_FP64_FLOPS = 67e12
H200_BF16_FLOPS = 989e12
#: The paper's protocol: passages, resamples, mean tokens per passage (FineWeb-Edu documents mostly exceed 512).
PAPER_PASSAGES, PAPER_RESAMPLES, PAPER_TOKENS_PER_PASSAGE = 10_000, 1_000, 500
#: Table 2's models: (L, d, decoder-block parameters, approximate, from their configs; no embeddings).
PAPER16_SHAPES = {
    "Pythia-70M": (6, 512, 19e6),
    "Pythia-160M": (12, 768, 85e6),
    "Pythia-410M": (24, 1024, 302e6),
    "Pythia-1B": (16, 2048, 805e6),
    "Pythia-1.4B": (24, 2048, 1.21e9),
    "OLMo-2-1B": (16, 2048, 1.07e9),
    "OLMo-2-7B": (32, 4096, 6.6e9),
    "OLMo-2-13B": (40, 5120, 12.6e9),
    "Llama-3.1-8B": (32, 4096, 7.0e9),
    "Mistral-7B": (32, 4096, 7.0e9),
    "Gemma-3-12b": (48, 3840, 10.8e9),
    "Qwen3.5-0.8B": (24, 1024, 0.5e9),
    "Qwen3.5-2B": (24, 2048, 1.5e9),
    "Qwen3.5-4B": (32, 2560, 3.6e9),
    "Qwen3.5-9B": (32, 4096, 8.0e9),
    "Qwen3.5-27B": (64, 5120, 25.5e9),
}


def stack_flops(
    samples: int,
    matrices: int,
    width: int,
    resamples: int,
    units: int = DEFAULT_BOOTSTRAP_UNITS,
    budget: int = DEFAULT_BUDGET_BYTES,
    extra_rows: int = 0,
) -> dict:
    """Float64 flops of one HSIC stack, by term, on the route the analysis takes (see the module docstring);
    ``extra_rows`` are weight rows beside the resamples (the sample-size curve's subsamples).

    >>> sorted(stack_flops(100, 3, 64, 10, 4))
    ['grams', 'pair_blocks', 'quadratic_forms', 'row_sums', 'weighted_products']
    >>> sorted(stack_flops(10_000, 7, 512, 10))[:3]
    ['cross_products', 'quadratic_forms', 'row_sums']
    """
    n, m, d, r, g = samples, matrices, width, resamples + 1 + extra_rows, min(units, samples)
    pairs = m * (m + 1) // 2
    plan = stack_plan(m, n, d, g, budget)
    if plan["route"] == "gram":
        formed = gram_fraction(g, plan["tile_units"])
        terms = {"grams": 2 * m * n * n * d * formed, "pair_blocks": 2 * m * m * n * n * formed}
    else:
        terms = {
            "cross_products": 2 * pairs * n * d * d,
            "unit_products": 2 * pairs * g * g * d * d,
            "unit_rows": 2 * m * n * d * g,
        }
    return {
        **terms,
        "row_sums": 2 * r * g * m * n,
        "weighted_products": 10 * r * m * m * n,
        "quadratic_forms": 4 * r * pairs * g * g,
    }


def analysis_flops(
    samples: int, layers: int, width: int, resamples: int, views: str = "default", controls: bool = True
) -> float:
    """Flops of the whole analysis: per view the states and the matched surrogate (L + 1 matrices each)
    and the updates (L); per top-PC count the structural surrogate (its L analysed layers); with the
    ``controls`` (passages of varying length), the states of default and each control that is not a view,
    and the sample-size curve's subsample rows on the default states.

    >>> analysis_flops(100, 2, 8, 10, controls=False) == sum(2 * v for v in stack_flops(100, 3, 8, 10).values()) + sum(2 * v for v in stack_flops(100, 2, 8, 10).values())
    True
    """
    specs = parse_views(views)
    units = min(DEFAULT_BOOTSTRAP_UNITS, samples)
    subsample_rows = len(Subsamples.draw(Units.blocks(samples, units), 0).weights) if controls else 0
    states = sum(stack_flops(samples, layers + 1, width, resamples).values())
    updates = sum(stack_flops(samples, layers, width, resamples).values())
    curve = sum(stack_flops(samples, layers + 1, width, resamples, extra_rows=subsample_rows).values()) - states
    total = len(specs) * (2 * states + updates) + len({s.top_pcs for s in specs}) * updates  # surrogate: L layers
    if controls:
        names = {s.name for s in specs}
        total += states * sum(name not in names for name in ("default", *CONTROLS)) + curve
    return total


def forward_flops(tokens: float, layers: int, width: int, block_params: float, tokens_per_passage: int) -> float:
    """Flops of the decoder blocks over ``tokens`` (weights and causal attention)."""
    return 2 * tokens * block_params + 2 * layers * tokens * tokens_per_passage * width


def float64_rate(size: int = 512, batch: int = 8, device: str = "cpu") -> float:
    """This machine's float64 batched matrix product on ``device``, in flops per second."""
    a = torch.randn(batch, size, size, dtype=torch.float64, device=device)
    torch.bmm(a, a)
    if a.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(3):
        torch.bmm(a, a)
    if a.is_cuda:
        torch.cuda.synchronize()
    return 3 * 2 * batch * size**3 / (time.perf_counter() - start)


def timed_analysis(samples: int, layers: int, width: int, resamples: int, views: str) -> float:
    rng = np.random.default_rng(0)
    steps = rng.standard_normal((layers + 1, samples, width))
    pooled = {v: np.cumsum(steps, axis=0) for v in {s.variant for s in parse_views(views)} | {"drop-pos0"}}
    lengths = rng.integers(64, 513, size=samples)  # varying: the length control is computed
    start = time.perf_counter()
    analyse_pooled(pooled, AnalysisPlan(views=views, bootstrap=resamples), lengths=lengths)
    return time.perf_counter() - start


def check_against_measured(repeats: int) -> None:
    rate = float64_rate()
    print(f"float64 bmm here: {rate / 1e9:.1f} GFLOP/s, {torch.get_num_threads()} threads")
    print(
        f"{'N':>5} {'L':>3} {'d':>4} {'R':>5} {'views':<8} {'GFLOP':>7} {'predicted s':>11} {'measured s':>10} {'ratio':>6}"
    )
    for n, layers, width, resamples, views in (
        (512, 6, 128, 200, "default"),
        (1024, 6, 128, 200, "default"),
        (1024, 12, 256, 1000, "default"),
        (1024, 6, 128, 1000, PAPER_VIEWS),
    ):
        flops = analysis_flops(n, layers, width, resamples, views)
        measured = min(timed_analysis(n, layers, width, resamples, views) for _ in range(repeats))
        label = "paper" if views == PAPER_VIEWS else views
        print(
            f"{n:>5} {layers:>3} {width:>4} {resamples:>5} {label:<8} {flops / 1e9:>7.1f} {flops / rate:>11.2f} "
            f"{measured:>10.2f} {measured / (flops / rate):>6.2f}"
        )


def project_paper16() -> None:
    tokens = PAPER_PASSAGES * PAPER_TOKENS_PER_PASSAGE
    print(
        f"\nprojected on one H200 (N = {PAPER_PASSAGES:,}, R = {PAPER_RESAMPLES:,}, paper views, "
        f"{tokens / 1e6:.0f}M tokens; float64 at {H200_FP64_FLOPS / 1e12:.0f} and bfloat16 at "
        f"{H200_BF16_FLOPS / 1e12:.0f} TFLOP/s peak, the same fraction of peak for both)"
    )
    print(f"{'model':<13} {'L':>3} {'d':>5} {'analysis TFLOP':>14} {'forward TFLOP':>13} {'analysis/forward time':>21}")
    for name, (layers, width, params) in PAPER16_SHAPES.items():
        analysis = analysis_flops(PAPER_PASSAGES, layers, width, PAPER_RESAMPLES, PAPER_VIEWS)
        forward = forward_flops(tokens, layers, width, params, PAPER_TOKENS_PER_PASSAGE)
        share = (analysis / H200_FP64_FLOPS) / (forward / H200_BF16_FLOPS)
        print(f"{name:<13} {layers:>3} {width:>5} {analysis / 1e12:>14.0f} {forward / 1e12:>13.0f} {share:>21.2f}")


def project_memory(budget: int = DEFAULT_BUDGET_BYTES) -> None:
    gib = float(1 << 30)
    print(
        f"\nmemory of the analysis at paper16 shapes (N = {PAPER_PASSAGES:,}, paper views, --max-memory "
        f"{budget / gib:.0f} GiB): the least budget, the peak, passes over the stored vectors per stack, and the "
        "budget that holds a stack's centred layers in memory (one pass)"
    )
    print(
        f"{'model':<13} {'L':>3} {'d':>5} {'route':>7} {'least GiB':>9} {'peak GiB':>8} {'passes':>6} {'one pass GiB':>12}"
    )
    for name, (layers, width, _) in PAPER16_SHAPES.items():
        plan = AnalysisPlan(views=PAPER_VIEWS, max_memory=budget)
        memory = analysis_memory(PAPER_PASSAGES, layers, width, plan)
        stack = memory["stack"]
        one_pass = one_pass_bytes(PAPER_PASSAGES, layers, width, plan)
        print(
            f"{name:<13} {layers:>3} {width:>5} {stack['route']:>7} {memory['least_bytes'] / gib:>9.2f} "
            f"{memory['peak_bytes'] / gib:>8.2f} {stack['passes']:>6} {one_pass / gib:>12.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    check_against_measured(args.repeats)
    project_paper16()
    project_memory()


if __name__ == "__main__":
    main()
