"""Speed on a GPU, against a bare bfloat16 forward of the same passages, both poolings.

Builds randomly initialised models of real sizes from their configs (no
download: Pythia-1.4B and OLMo-2-7B shapes) and, for each, measures in one run
(seconds for orientation; each ratio taken within a round, the median over
``--repeats`` interleaved rounds reported):

- passage mode (``--pooling mean``, the default): the forward with effdepth's
  pooling hooks (every paper-view variant pooled in float64, plus the
  per-token sums) against a bare forward of the decoder stack over the same
  ``--passages`` of ``--passage-len`` tokens, batches and order (target: at
  most 1.05), then the analysis of the pooled vectors on the GPU (paper views,
  both CKA estimators, 1,000 resamples, calibrated references), timed against
  the forward and against the flop model of ``benchmarks/analysis_cost.py`` at
  this GPU's measured float64 rate;
- the token reduction (``--pooling none``): k = ``--tokens-per-passage``
  tokens of each of the first ``--token-passages`` passages as samples,
  through ``measure_passages`` (effdepth's defaults otherwise: the default
  view, cka + cka-debiased, 1,000 resamples). Its forward + store (each batch's
  k (L+1) d samples per passage sampled, copied off the GPU and written to the
  memory-mapped store; the measurement stopped at the analysis's start) against
  a bare forward of the decoder stack over the same passages, batches and
  order; then one whole measurement, its forward + store and its analysis of
  the samples on the GPU each against the bare forward; peak GPU memory of each.

    python benchmarks/gpu.py [--shapes pythia-1.4b,olmo2-7b] [--batch-size 8] [--passages 1024] [--passage-len 512]
                             [--tokens-per-passage 64] [--token-passages 256] [--repeats 2] [--json FILE]

On a machine without CUDA it says so and exits cleanly (status 0); ``--device
cpu --shapes tiny`` runs every step on the CPU in seconds (a smoke test of the
script, not a benchmark).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch

SHAPES = {
    # A smoke-test shape: every step of the script on a CPU in seconds.
    "tiny": (
        "llama",
        dict(
            num_hidden_layers=2,
            hidden_size=64,
            intermediate_size=128,
            num_attention_heads=4,
            vocab_size=259,
            max_position_embeddings=512,
        ),
    ),
    # EleutherAI/pythia-1.4b
    "pythia-1.4b": (
        "gpt_neox",
        dict(
            num_hidden_layers=24,
            hidden_size=2048,
            intermediate_size=8192,
            num_attention_heads=16,
            vocab_size=50304,
            rotary_pct=0.25,
            max_position_embeddings=2048,
        ),
    ),
    # allenai/OLMo-2-1124-7B
    "olmo2-7b": (
        "olmo2",
        dict(
            num_hidden_layers=32,
            hidden_size=4096,
            intermediate_size=11008,
            num_attention_heads=32,
            num_key_value_heads=32,
            vocab_size=100352,
            max_position_embeddings=4096,
        ),
    ),
}


def build(shape: str, device: str = "cuda"):
    from transformers import AutoConfig, AutoModelForCausalLM

    model_type, fields = SHAPES[shape]
    config = AutoConfig.for_model(model_type, **fields)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if device != "cpu" else torch.float32)
    return model.eval()


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def peak_bytes() -> int:
    return torch.cuda.max_memory_allocated() if torch.cuda.is_available() else 0


def reset_peak() -> None:
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


def timed(fn):
    synchronize()
    reset_peak()
    start = time.perf_counter()
    out = fn()
    synchronize()
    return time.perf_counter() - start, peak_bytes(), out


def gib(b: int) -> str:
    return f"{b / 2**30:.1f} GiB"


def prepare_passages(model, ids: torch.Tensor, args):
    """The passages ``ids`` (N, T) prepared for ``model`` (loaded already: nothing is downloaded)."""
    from effdepth.measurement import prepare
    from effdepth.options import LoadOptions

    load = LoadOptions(model=model, corpus=ids, seq_len=ids.shape[1], num_seqs=ids.shape[0], device=args.device)
    return prepare(load, progress=False)


def bench_shape(shape: str, args) -> dict:
    """Both poolings on one model built at ``shape``, over one set of random passages."""
    model = build(shape, args.device)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.passages, args.passage_len), generator=gen)
    out = {"passages": bench_passages(shape, model, ids, args), "tokens": bench_tokens(shape, model, ids, args)}
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def bench_passages(shape: str, model, ids: torch.Tensor, args) -> dict:
    """Passage mode: the pooled forward against a bare one over the same passages, then the analysis."""
    from analysis_cost import analysis_flops, float64_rate
    from passages import bare_forward, pooled_arrays, pooled_forward

    from effdepth.numerics.analysis import AnalysisPlan, analyse_pooled
    from effdepth.numerics.views import PAPER_VIEWS, parse_views, variants_for

    prepared = prepare_passages(model, ids, args)
    order = list(np.argsort(-prepared.tokens.lengths, kind="stable"))
    variants = variants_for(parse_views(PAPER_VIEWS))
    bare_forward(prepared, order[: args.batch_size], args.batch_size)  # warm-up (kernels, allocator)
    rounds = []
    for _ in range(args.repeats):
        bare, _, _ = timed(partial(bare_forward, prepared, order, args.batch_size))
        pooled, peak, (_, chunks) = timed(partial(pooled_forward, prepared, order, args.batch_size, variants))
        rounds.append((bare, pooled))
    arrays = pooled_arrays(chunks, variants, prepared.tokens.num_passages)
    layers, width = model.config.num_hidden_layers, model.config.hidden_size
    plan = AnalysisPlan(views=PAPER_VIEWS, bootstrap=1000, device=args.device)
    analysis, analysis_peak, _ = timed(partial(analyse_pooled, arrays, plan))
    rate = float64_rate(device=args.device)
    predicted = analysis_flops(args.passages, layers, width, 1000, PAPER_VIEWS) / rate
    bare = statistics.median(b for b, _ in rounds)
    ratio = statistics.median(p / b for b, p in rounds)
    tokens = prepared.tokens.tokens
    print(
        f"{shape} passages (--pooling mean): {args.passages} x {args.passage_len} tokens, batch {args.batch_size}: "
        f"bare forward {tokens / bare:,.0f} tok/s; pooled forward (paper variants) / bare: {ratio:.3f} "
        f"(target <= 1.05, peak {gib(peak)})"
    )
    print(
        f"  analysis (paper views, cka + cka-debiased, 1000 resamples, calibrated) on {args.device}: {analysis:.1f} s "
        f"= {analysis / bare:.2f}x the bare forward (peak {gib(analysis_peak)}); flop model at "
        f"{rate / 1e12:.2f} float64 TFLOP/s predicts {predicted:.1f} s (measured / predicted {analysis / predicted:.2f})"
    )
    sys.stdout.flush()
    del prepared, arrays, chunks
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {
        "tokens": tokens,
        "rounds": rounds,
        "pooled_over_bare": ratio,
        "analysis_s": analysis,
        "analysis_predicted_s": predicted,
        "float64_flops": rate,
    }


class _AtAnalysis(Exception):
    """Raised where the analysis would start: a round times the token reduction's forward + store alone."""


@contextmanager
def phases(stop: bool):
    """The phases of one ``measure_passages`` call within the block: ``forward`` (to the analysis's start: the
    forward passes, the sampling and the store) and ``analysis``, seconds and peak GPU bytes each. ``stop``: end
    the measurement where its analysis would start (its store is discarded, as after any failure)."""
    from effdepth.measurement import run as passage_measure

    real = passage_measure.analyse_store
    seen: dict = {}

    def split(store, *a, **kw):
        synchronize()
        seen["forward"], seen["forward_peak"] = time.perf_counter() - seen["start"], peak_bytes()
        if stop:
            raise _AtAnalysis
        reset_peak()
        start = time.perf_counter()
        out = real(store, *a, **kw)
        synchronize()
        seen["analysis"], seen["analysis_peak"] = time.perf_counter() - start, peak_bytes()
        return out

    passage_measure.analyse_store = split
    synchronize()
    reset_peak()
    seen["start"] = time.perf_counter()
    try:
        yield seen
    except _AtAnalysis:
        pass
    finally:
        passage_measure.analyse_store = real
    if "forward" not in seen:
        raise SystemExit("the measurement never reached passage_measure.analyse_store: update gpu.phases")


def measure_tokens(prepared, args, stop: bool = False) -> tuple:
    """The token reduction over ``prepared``: ``(phases, result)`` (result None when ``stop``)."""
    from effdepth.measurement.run import measure_passages
    from effdepth.options import AnalysisOptions, RunOptions

    analysis = AnalysisOptions(pooling="none", tokens_per_passage=args.tokens_per_passage, batch_size=args.batch_size)
    result = None
    with phases(stop) as seen:
        result = measure_passages(prepared, analysis, run=RunOptions(progress=False))
    return seen, result


def bench_tokens(shape: str, model, ids: torch.Tensor, args) -> dict:
    """The token reduction: its forward + store against a bare forward over the same passages, then one whole
    measurement (the analysis of the N k samples on the GPU)."""
    from passages import bare_forward

    prepared = prepare_passages(model, ids[: args.token_passages], args)
    order = list(np.argsort(-prepared.tokens.lengths, kind="stable"))  # measure_passages' order
    bare_forward(prepared, order[: args.batch_size], args.batch_size)  # warm-up, both loops
    measure_tokens(prepare_passages(model, ids[: max(args.batch_size, 4)], args), args, stop=True)
    rounds, peaks = [], []
    for _ in range(args.repeats):
        bare, _, _ = timed(partial(bare_forward, prepared, order, args.batch_size))
        seen, _ = measure_tokens(prepared, args, stop=True)
        rounds.append((bare, seen["forward"]))
        peaks.append(seen["forward_peak"])
    bare_before, _, _ = timed(partial(bare_forward, prepared, order, args.batch_size))
    whole, _, (seen, result) = timed(partial(measure_tokens, prepared, args))
    samples = result.config["reduction"]["per_variant"]["default"]
    deff = float(result.default.deff)
    del result  # its temporary store goes with it
    bare = statistics.median(b for b, _ in rounds)
    ratio = statistics.median(f / b for b, f in rounds)
    tokens = prepared.tokens.tokens
    k, n = args.tokens_per_passage, prepared.tokens.num_passages
    print(
        f"{shape} tokens (--pooling none): k = {k} tokens of each of {n} passages of {args.passage_len} "
        f"({samples} samples), batch {args.batch_size}: bare forward {tokens / bare:,.0f} tok/s; forward + store / "
        f"bare: {ratio:.3f} (peak {gib(max(peaks))})"
    )
    print(
        f"  one whole measurement (default view, cka + cka-debiased, 1000 resamples) on {args.device}: {whole:.1f} s "
        f"= {whole / bare_before:.2f}x the bare forward just before it ({bare_before:.2f} s); forward + store "
        f"{seen['forward']:.1f} s = {seen['forward'] / bare_before:.2f}x, analysis of the {samples} samples "
        f"{seen['analysis']:.1f} s = {seen['analysis'] / bare_before:.2f}x (peak {gib(seen['analysis_peak'])})"
    )
    sys.stdout.flush()
    del prepared
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return {
        "tokens": tokens,
        "samples": samples,
        "rounds": rounds,
        "forward_store_over_bare": ratio,
        "forward_peak_bytes": max(peaks),
        "whole": {
            "bare_s": bare_before,
            "measure_s": whole,
            "forward_store_s": seen["forward"],
            "analysis_s": seen["analysis"],
            "analysis_peak_bytes": seen["analysis_peak"],
        },
        "deff": deff,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="pythia-1.4b,olmo2-7b")
    ap.add_argument("--batch-size", type=int, default=8, help="passages per forward pass (default 8)")
    ap.add_argument("--passages", type=int, default=1024, help="passages of the passage-mode section (default 1024)")
    ap.add_argument("--passage-len", type=int, default=512, help="tokens per passage (default 512, the paper's)")
    ap.add_argument(
        "--tokens-per-passage", type=int, default=64, help="k of the token reduction's section (default 64)"
    )
    ap.add_argument(
        "--token-passages",
        type=int,
        default=256,
        help="the token reduction's section measures the first this many passages (default 256: with k = 64, "
        "16,384 samples)",
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu runs the script as a smoke test")
    ap.add_argument("--json", help="also write the timings here")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="profile one measurement with the token reduction of one batch of passages on the first shape "
        "(torch.profiler) and write its top operators here",
    )
    args = ap.parse_args(argv)
    for name in ("batch_size", "repeats", "passages", "passage_len", "tokens_per_passage", "token_passages"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.token_passages > args.passages:
        ap.error(f"--token-passages {args.token_passages} exceeds --passages {args.passages}")
    if args.token_passages < 4:
        ap.error("--token-passages must be at least 4 (the bootstrap's units)")
    if args.device != "cpu" and not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; run it on a machine with a GPU (nothing measured).")
        return 0
    name = torch.cuda.get_device_name(0) if args.device != "cpu" else "cpu (smoke test, not a benchmark)"
    print(
        f"device: {name}, torch {torch.__version__}, {'bfloat16' if args.device != 'cpu' else 'float32'}; "
        f"passages of {args.passage_len} tokens, batch {args.batch_size}: passage mode over {args.passages}, the "
        f"token reduction (k = {args.tokens_per_passage}) over the first {args.token_passages}; medians of "
        f"{args.repeats} interleaved rounds"
    )
    sys.stdout.flush()
    out = {"gpu": name, "torch": torch.__version__, "args": vars(args), "shapes": {}}
    for shape in args.shapes.split(","):
        out["shapes"][shape] = bench_shape(shape, args)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(out, fh, indent=1)
    if args.profile:
        profile(args.shapes.split(",")[0], args, args.profile)
    return 0


def profile(shape: str, args, path: str) -> None:
    """Where the time of one measurement with the token reduction goes, per operator (one batch of passages,
    at least 4: the forward + store and the analysis)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    model = build(shape, args.device)
    count = max(args.batch_size, 4)
    gen = torch.Generator().manual_seed(1)
    prepared = prepare_passages(
        model, torch.randint(0, model.config.vocab_size, (count, args.passage_len), generator=gen), args
    )
    measure_tokens(prepared, args)  # warm-up
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with torch_profile(activities=activities) as prof:
        measure_tokens(prepared, args)
        synchronize()
    averages = prof.key_averages()
    keys = ("self_device_time_total",) if torch.cuda.is_available() else ()
    with open(path, "w") as fh:
        for key in (*keys, "self_cpu_time_total", "cpu_time_total"):
            fh.write(f"== sorted by {key}\n{averages.table(sort_by=key, row_limit=30)}\n")
    print(f"profile of one measurement ({shape}, --pooling none, {count} passages) written to {path}")


if __name__ == "__main__":
    sys.exit(main())
