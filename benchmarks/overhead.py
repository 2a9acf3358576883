"""What effdepth costs against what a user would otherwise run, measured in one run.

On SmolLM2-135M-Instruct (CPU, float32, Shakespeare) at 8 x 256 and at
32 x 256 tokens it prints, each ratio taken within interleaved rounds:

- ``measure`` (frobenius, default view) / a plain ``AutoModelForCausalLM``
  forward over the same batches (target: <= 1, we skip the LM head), and the
  same for the default run (cka, with calibrated references);
- the default view under ``cka`` / under ``frobenius`` (target <= 1.10);
- ``--views paper`` / the default view alone, same similarity (target <= 1.3);
- ``--similarity all --views paper`` / ``--similarity frobenius`` default view
  (target <= 1.5);
- the calibrated references (surrogate streams over every sequence) / the
  same run without them (target <= 1.3), for the default view and for
  ``--views paper`` (the demo's and the claims check's run);
- time and peak memory of a naive baseline that collects
  ``output_hidden_states`` and computes D_eff afterwards (target: measure
  faster and leaner);
- peak memory of the default ``measure`` at 1x, 4x and 8x the tokens (target: flat).

Times are medians of repeated runs in this process, each ratio the median of
its within-round ratios with the lowest and highest round beside it (this
machine drifts); peak memory is the
increase of the peak resident set (VmHWM) over the resident set just before
the run, each in a fresh child process so that freed memory is not reused,
after one tiny forward pass has read the memory-mapped weights in.
glibc's default allocator keeps freed blocks of the per-batch temporaries
and its resident set creeps up over the first batches; with a fixed mmap
threshold (``MALLOC_MMAP_THRESHOLD_=65536``) freed memory goes back to the
system at once, which shows what effdepth itself holds. Both are printed.

    python benchmarks/overhead.py [--repeats 3] [--seq-len 256] [--num-seqs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
from costs import model_cka_flop_share

from effdepth.options import AnalysisOptions, LoadOptions, RunOptions


def prepare(num_seqs: int, seq_len: int):
    from effdepth.measure import prepare as prepare_measurement

    return prepare_measurement(LoadOptions(corpus="shakespeare", seq_len=seq_len, num_seqs=num_seqs), progress=False)


def plain_forward(prepared, batch_size):
    model, ids = prepared.lm.model, prepared.tokens.input_ids
    with torch.inference_mode():
        for start in range(0, ids.shape[0], batch_size):
            model(input_ids=ids[start : start + batch_size], use_cache=False)


def measure_run(prepared, batch_size, views="default", similarity="frobenius", surrogate_seqs=0):
    from effdepth.measure import measure_prepared

    analysis = AnalysisOptions(
        views=views,
        similarity=similarity,
        surrogate_seqs=surrogate_seqs,
        batch_size=batch_size,
        bootstrap=0,
        pooling="none",
    )
    return measure_prepared(prepared, analysis, run=RunOptions(progress=False))


#: The runs compared, as (views, similarity, surrogate sequences: 0 = none, None = all).
VARIANTS = {
    "frobenius": ("default", "frobenius", 0),
    "cka": ("default", "cka", 0),
    "frobenius paper": ("paper", "frobenius", 0),
    "cka paper": ("paper", "cka", 0),
    "all paper": ("paper", "all", 0),
    "cka calibrated": ("default", "cka", None),
    "cka paper calibrated": ("paper", "cka", None),
}


def variant_runs(prepared, batch_size) -> dict:
    return {name: (lambda v=v: measure_run(prepared, batch_size, *v)) for name, v in VARIANTS.items()}


def naive_baseline(prepared, batch_size):
    """What analysis scripts do: keep every hidden state, then compute (and use
    hidden_states[-1], which is post-norm: wrong, but common)."""
    model, ids = prepared.lm.model, prepared.tokens.input_ids
    kept = []
    with torch.inference_mode():
        for start in range(0, ids.shape[0], batch_size):
            out = model(input_ids=ids[start : start + batch_size], output_hidden_states=True, use_cache=False)
            kept.append(torch.stack(out.hidden_states[1:]).double())
    s = torch.cat(kept, dim=1)
    flat = s.reshape(s.shape[0], -1)
    g = flat @ flat.T
    sim = g**2 / torch.outer(g.diagonal(), g.diagonal())
    return float(s.shape[0] ** 2 / sim.sum())


def interleaved(runs: dict, repeats: int) -> list:
    """``repeats`` rounds, each timing every run once, in order."""
    out = []
    for _ in range(repeats):
        row = {}
        for name, fn in runs.items():
            start = time.perf_counter()
            fn()
            row[name] = time.perf_counter() - start
        out.append(row)
    return out


def median(rounds: list, name: str) -> float:
    return statistics.median(r[name] for r in rounds)


def ratio_text(rounds: list, num: str, den: str) -> str:
    """The median within-round ratio and, in brackets, the lowest and highest round: how far
    this machine's drift moves it."""
    values = [r[num] / r[den] for r in rounds]
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def _status(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(field)


def child_peak(kind: str, num_seqs: int, seq_len: int, batch_size: int) -> None:
    """In a child: load, reset the peak RSS, run once, print the peak increase."""
    prepared = prepare(num_seqs, seq_len)
    fn = {
        "measure": lambda: measure_run(prepared, batch_size, "default", "cka", None),
        "naive": lambda: naive_baseline(prepared, batch_size),
    }[kind]
    # The weights are memory-mapped from the converted checkpoint: a first forward pass reads them
    # in (some 430 MiB of resident set for SmolLM2), which is the model's memory, not the run's.
    with torch.inference_mode():
        prepared.lm.model(input_ids=prepared.tokens.input_ids[:1, :8], use_cache=False)
    with open("/proc/self/clear_refs", "w") as fh:  # resets VmHWM to the current RSS
        fh.write("5")
    before = _status("VmRSS")
    fn()
    print(json.dumps({"peak_increase": _status("VmHWM") - before}))


def peak_in_child(kind, num_seqs, seq_len, batch_size, fixed_threshold=True) -> int:
    env = dict(os.environ)
    if fixed_threshold:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--num-seqs",
            str(num_seqs),
            "--seq-len",
            str(seq_len),
            "--batch-size",
            str(batch_size),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])["peak_increase"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--num-seqs", type=int, default=8)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--child", choices=("measure", "naive"))
    args = ap.parse_args()
    if args.child:
        child_peak(args.child, args.num_seqs, args.seq_len, args.batch_size)
        return

    prepared = prepare(args.num_seqs, args.seq_len)
    bs = args.batch_size
    measure_run(prepared, bs, "paper", "all", None)  # warm-up
    # Interleaved rounds: this machine's speed drifts between minutes, so each
    # ratio is taken within a round and the median over rounds is reported.
    rounds = interleaved(
        {
            "plain": lambda: plain_forward(prepared, bs),
            **variant_runs(prepared, bs),
            "naive": lambda: naive_baseline(prepared, bs),
        },
        args.repeats,
    )
    larger = prepare(4 * args.num_seqs, args.seq_len)
    rounds_4x = interleaved({"plain": lambda: plain_forward(larger, bs), **variant_runs(larger, bs)}, args.repeats)

    mem_measure = peak_in_child("measure", args.num_seqs, args.seq_len, bs)
    mem_measure_4x = peak_in_child("measure", 4 * args.num_seqs, args.seq_len, bs)
    mem_measure_8x = peak_in_child("measure", 8 * args.num_seqs, args.seq_len, bs)
    mem_naive = peak_in_child("naive", args.num_seqs, args.seq_len, bs)
    glibc_1x = peak_in_child("measure", args.num_seqs, args.seq_len, bs, fixed_threshold=False)
    glibc_8x = peak_in_child("measure", 8 * args.num_seqs, args.seq_len, bs, fixed_threshold=False)

    def mb(b):
        return f"{b / 2**20:.0f} MiB"

    tokens = args.num_seqs * args.seq_len
    print(
        f"SmolLM2-135M-Instruct, CPU ({torch.get_num_threads()} threads), float32, batch {bs}, "
        f"medians of {args.repeats} interleaved rounds"
    )
    checks = (
        ("frobenius default / plain forward", "frobenius", "plain", 1.0),
        ("cka default + calibrated / plain forward", "cka calibrated", "plain", 1.0),
        ("cka / frobenius (default view)", "cka", "frobenius", 1.10),
        ("frobenius: paper views / default view", "frobenius paper", "frobenius", 1.3),
        ("cka: paper views / default view", "cka paper", "cka", 1.3),
        ("all similarities, paper views / frobenius default", "all paper", "frobenius", 1.5),
        ("calibrated references (all sequences) / none", "cka calibrated", "cka", 1.3),
        ("the same, paper views", "cka paper calibrated", "cka paper", 1.3),
    )
    small, large = f"{args.num_seqs} x {args.seq_len}", f"{4 * args.num_seqs} x {args.seq_len}"
    print(f"{'':52s} {small:>18s} {large:>18s}   target")
    print(
        f"{'plain AutoModelForCausalLM forward (s)':52s} {median(rounds, 'plain'):>18.2f} {median(rounds_4x, 'plain'):>18.2f}"
    )
    for name in VARIANTS:
        print(f"{'measure, ' + name + ' (s)':52s} {median(rounds, name):>18.2f} {median(rounds_4x, name):>18.2f}")
    print("ratios: median over rounds [lowest-highest round]")
    for label, num, den, target in checks:
        print(
            f"{label:52s} {ratio_text(rounds, num, den):>18s} {ratio_text(rounds_4x, num, den):>18s}   "
            f"{'<= ' + str(target) if target else ''}"
        )
    share = model_cka_flop_share(prepared.lm.model, args.seq_len)
    print(
        f"flop model (benchmarks/costs.py): cka's cross Grams (float32) are {share:.1%} of the decoder's forward flops "
        f"at {args.seq_len} tokens"
    )
    print(f"{'naive output_hidden_states baseline (s)':52s} {median(rounds, 'naive'):>18.2f}")
    print(f"{'frobenius default / naive baseline':52s} {ratio_text(rounds, 'frobenius', 'naive'):>18s} {'':18s}   < 1")
    print(
        f"peak memory increase (fixed mmap threshold) of the default measure (cka, calibrated): {mb(mem_measure)} ({tokens} tokens), "
        f"{mb(mem_measure_4x)} ({4 * tokens}), {mb(mem_measure_8x)} ({8 * tokens}); naive baseline {mb(mem_naive)} ({tokens} tokens)"
    )
    print(f"measure peak at 8x tokens / at 1x    {mem_measure_8x / mem_measure:.2f}  (target ~1: flat in tokens)")
    print(
        f"default glibc allocator: measure {mb(glibc_1x)} ({tokens} tokens), {mb(glibc_8x)} ({8 * tokens}): freed blocks kept for reuse"
    )


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
