"""Speed on a GPU, against a bare bfloat16 forward of the same batches, both protocols.

Builds randomly initialised models of real sizes from their configs (no
download: Pythia-1.4B and OLMo-2-7B shapes) and measures, in interleaved
rounds of one run:

- passage mode (the default protocol): the forward with effdepth's pooling
  hooks (every paper-view variant pooled in float64, plus the per-token sums)
  against a bare forward of the decoder stack over the same passages (target:
  at most 1.05), then the analysis of the pooled vectors on the GPU (paper
  views, both CKA estimators, 1,000 resamples, calibrated references), timed
  against the forward and against the flop model of
  ``benchmarks/analysis_cost.py`` at this GPU's measured float64 rate;
- token mode (``--pooling none``): tokens per second of a bare forward, of a
  plain forward of the whole model (LM head included) and of ``measure``
  under frobenius (default view; and with ``--views paper``), cka (default
  view; with the calibrated references; with ``--views paper``) and
  ``--similarity all --views paper`` with the calibrated references; each
  one's ratio to the bare forward and its peak GPU memory; and the ratios of
  ``benchmarks/overhead.py``.

    python benchmarks/gpu.py [--shapes pythia-1.4b,olmo2-7b] [--seq-len 2048] [--batch-size 8] [--batches 4]
                             [--passages 1024] [--passage-len 512] [--repeats 2] [--json FILE]

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
from functools import partial

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


def bare_forward(model, arch, batches):
    from effdepth.capture.forward import decoder_forward

    with torch.inference_mode():
        for ids in batches:
            decoder_forward(model, arch, ids, None)


def plain_forward(model, batches):
    """What a user's own script runs: the whole model, LM head included."""
    with torch.inference_mode():
        for ids in batches:
            model(input_ids=ids, use_cache=False)


def run_measure(model, batches, views, similarity="cka", surrogate_seqs=0):
    from effdepth.measure import measure

    ids = torch.cat(batches).cpu()
    return measure(
        model,
        ids,
        batch_size=batches[0].shape[0],
        views=views,
        similarity=similarity,
        pooling="none",
        surrogate_seqs=surrogate_seqs,
        bootstrap=0,
        progress=False,
    )


#: label -> (views, similarity, surrogate sequences: 0 none, None all)
RUNS = {
    "frobenius default": ("default", "frobenius", 0),
    "frobenius --views paper": ("paper", "frobenius", 0),
    "cka default": ("default", "cka", 0),
    "cka default + calibrated": ("default", "cka", None),
    "cka --views paper": ("paper", "cka", 0),
    "all --views paper + calibrated": ("paper", "all", None),
}

#: (label, numerator, denominator, target): the ratios of benchmarks/overhead.py, here on the GPU.
RATIOS = (
    ("cka / frobenius (default view)", "cka default", "frobenius default", 1.10),
    ("frobenius: paper views / default view", "frobenius --views paper", "frobenius default", 1.15),
    ("cka: paper views / default view", "cka --views paper", "cka default", 1.15),
    ("all + paper + calibrated / frobenius default", "all --views paper + calibrated", "frobenius default", 1.5),
    ("calibrated references (all sequences) / none", "cka default + calibrated", "cka default", 1.3),
)


def timed(fn):
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    out = fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - start, torch.cuda.max_memory_allocated() if cuda else 0, out


def bench_passages(shape: str, args) -> dict:
    """Passage mode: the pooled forward against a bare one over the same passages, then the analysis."""
    import numpy as np
    from analysis_cost import analysis_flops, float64_rate
    from passages import bare_forward as bare_passages
    from passages import pooled_arrays, pooled_forward

    from effdepth.measure import prepare
    from effdepth.numerics.passage_analysis import AnalysisPlan, analyse_pooled
    from effdepth.numerics.passage_views import PAPER_VIEWS, parse_views, variants_for
    from effdepth.options import LoadOptions

    model = build(shape, args.device)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (args.passages, args.passage_len), generator=gen)
    prepared = prepare(
        LoadOptions(model=model, corpus=ids, seq_len=args.passage_len, num_seqs=args.passages, device=args.device),
        progress=False,
        passages=True,
    )
    order = list(np.argsort(-prepared.tokens.lengths, kind="stable"))
    variants = variants_for(parse_views(PAPER_VIEWS))
    bare_passages(prepared, order[: args.batch_size], args.batch_size)  # warm-up
    rounds = []
    for _ in range(args.repeats):
        bare, _, _ = timed(partial(bare_passages, prepared, order, args.batch_size))
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
        f"{shape} passages: {args.passages} x {args.passage_len} tokens, batch {args.batch_size}: bare forward "
        f"{tokens / bare:,.0f} tok/s; pooled forward (paper variants) / bare: {ratio:.3f} (target <= 1.05, peak "
        f"{peak / 2**30:.1f} GiB)"
    )
    print(
        f"  analysis (paper views, cka + cka-debiased, 1000 resamples, calibrated) on {args.device}: {analysis:.1f} s "
        f"= {analysis / bare:.2f}x the bare forward (peak {analysis_peak / 2**30:.1f} GiB); flop model at "
        f"{rate / 1e12:.2f} float64 TFLOP/s predicts {predicted:.1f} s (measured / predicted {analysis / predicted:.2f})"
    )
    sys.stdout.flush()
    del model, prepared, arrays, chunks
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


def bench_shape(shape: str, args) -> dict:
    from costs import model_cka_flop_share

    from effdepth.capture.registry import resolve_architecture

    model = build(shape, args.device)
    arch = resolve_architecture(model)
    share = model_cka_flop_share(model, args.seq_len)
    gen = torch.Generator(device=args.device).manual_seed(0)
    batches = [
        torch.randint(0, model.config.vocab_size, (args.batch_size, args.seq_len), device=args.device, generator=gen)
        for _ in range(args.batches)
    ]
    tokens = args.batches * args.batch_size * args.seq_len
    bare_forward(model, arch, batches[:1])  # warm-up (kernels, allocator)
    run_measure(model, batches[:1], "paper", "all", None)
    times = {name: [] for name in ("bare", "plain", *RUNS)}
    peaks = {}
    # Interleaved rounds: each ratio is taken within a round, the median over rounds reported.
    for _ in range(args.repeats):
        t, peaks["bare"], _ = timed(partial(bare_forward, model, arch, batches))
        times["bare"].append(t)
        t, peaks["plain"], _ = timed(partial(plain_forward, model, batches))
        times["plain"].append(t)
        for label, (views, similarity, surrogates) in RUNS.items():
            t, peaks[label], _ = timed(partial(run_measure, model, batches, views, similarity, surrogates))
            times[label].append(t)
    del model, batches
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

    def ratio(num, den):
        return statistics.median(a / b for a, b in zip(times[num], times[den]))

    def gib(b):
        return f"{b / 2**30:.1f} GiB"

    median = {name: statistics.median(ts) for name, ts in times.items()}
    print(
        f"{shape} tokens (--pooling none): bare forward {tokens / median['bare']:,.0f} tok/s (peak {gib(peaks['bare'])}); "
        f"plain forward with the LM head {tokens / median['plain']:,.0f} tok/s (peak {gib(peaks['plain'])})"
    )
    for label in RUNS:
        print(
            f"  measure {label:34s} {tokens / median[label]:>12,.0f} tok/s = {ratio('bare', label):.2f} of bare "
            f"(peak {gib(peaks[label])}) [target >= 0.90]"
        )
    print(
        f"  {'measure cka default / plain forward with LM head':52s} {ratio('cka default', 'plain'):.2f}  [target <= 1]"
    )
    print(
        f"  flop model (benchmarks/costs.py): cka's cross Grams (float32) are {share:.1%} of the decoder's forward flops; "
        f"times the bfloat16 : float32 rate, their share of its time"
    )
    for label, num, den, target in RATIOS:
        print(f"  {label:52s} {ratio(num, den):.2f}  [target <= {target}]")
    sys.stdout.flush()
    return {
        "tokens": tokens,
        "seconds": times,
        "peak_bytes": peaks,
        "cka_flop_share": share,
        "ratios": {label: ratio(num, den) for label, num, den, _ in RATIOS},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="pythia-1.4b,olmo2-7b")
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--passages", type=int, default=1024, help="passages of the passage-mode section (default 1024)")
    ap.add_argument("--passage-len", type=int, default=512, help="tokens per passage (default 512, the paper's)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--device", default="cuda", help="cuda (default); cpu runs the script as a smoke test")
    ap.add_argument("--json", help="also write the timings here")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="profile one batch of the heaviest run on the first shape "
        "(torch.profiler) and write its top operators here",
    )
    args = ap.parse_args()
    for name in ("seq_len", "batch_size", "batches", "repeats", "passages", "passage_len"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.device != "cpu" and not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here; run it on a machine with a GPU (nothing measured).")
        return 0
    name = torch.cuda.get_device_name(0) if args.device != "cpu" else "cpu (smoke test, not a benchmark)"
    print(
        f"device: {name}, torch {torch.__version__}, {'bfloat16' if args.device != 'cpu' else 'float32'}; token mode "
        f"{args.batches} batches of {args.batch_size} x {args.seq_len} tokens, medians of {args.repeats} interleaved rounds"
    )
    sys.stdout.flush()
    out = {"gpu": name, "torch": torch.__version__, "args": vars(args), "shapes": {}}
    for shape in args.shapes.split(","):
        out["shapes"][shape] = {"passages": bench_passages(shape, args), "tokens": bench_shape(shape, args)}
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(out, fh, indent=1)
    if args.profile:
        profile(args.shapes.split(",")[0], args, args.profile)
    return 0


def profile(shape: str, args, path: str) -> None:
    """Where the time of ``--similarity all --views paper`` with calibrated references goes, per operator."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    model = build(shape)
    gen = torch.Generator(device="cuda").manual_seed(1)
    batches = [torch.randint(0, model.config.vocab_size, (args.batch_size, args.seq_len), device="cuda", generator=gen)]
    run_measure(model, batches, "paper", "all", None)
    with torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        run_measure(model, batches, "paper", "all", None)
        torch.cuda.synchronize()
    averages = prof.key_averages()
    with open(path, "w") as fh:
        for key in ("self_cuda_time_total", "self_cpu_time_total", "cpu_time_total"):
            fh.write(f"== sorted by {key}\n{averages.table(sort_by=key, row_limit=30)}\n")
    print(f"profile of one batch ({shape}, all --views paper + calibrated) written to {path}")


if __name__ == "__main__":
    sys.exit(main())
