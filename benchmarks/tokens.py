"""The token reduction (each passage's tokens as samples): its memory flat in the passages, its analysis in budget.

For each number of passages N (default 16, 64 and 256 windows of the
Shakespeare corpus, 32 tokens each) a fresh process loads the model, runs one bare forward
batch (so the weights are read in), and measures with the token reduction
(``effdepth.measure(..., pooling="none", tokens_per_passage=k)``), k tokens of
each passage drawn under the seed (``--tokens-per-passage``); it prints:

- the forward + store phase: the peak of the process's anonymous resident
  memory (RssAnon: the heap and tensors; sampled every 5 ms and after every
  batch written) over what it held just before the measurement, and the
  store on disk beside the N k (L+1) d float32 samples it must hold (one file
  per stored variant, plus each passage's per-token sums). The store's pages
  are the file's (memory-mapped, written back and dropped by the kernel), not
  the process's: the memory stays flat in N while the store grows as N;
- the analysis of the N k samples: each HSIC stack's route (Gram or feature,
  with its M matrices), the plan of ``numerics.analysis.analysis_memory``
  within ``--max-memory`` (the view kept in memory or read again, passes over
  the stored samples per stack, planned peak) and the measured peak of
  anonymous memory over the analysis;
- the time of the forward + store and of the analysis at the largest N against
  a bare forward of the decoder stack over the same passages, batches and order,
  run before and after the measurement in the same process (ratios to their
  mean; seconds for orientation).

Memory is measured in processes with a fixed mmap threshold
(``MALLOC_MMAP_THRESHOLD_=65536``), so that freed memory goes back to the
system at once and resident memory is what is held; time in one more process
with glibc's default allocator (a fixed threshold maps and unmaps every block
over 64 KiB, which can slow the many small tensors of the sampling and the
analysis far more than a bare forward). The measurement is one call,
:func:`measure_tokens`.

    python benchmarks/tokens.py [--model smollm2-135m] [--passages 16,64,256] [--tokens-per-passage 4] [--seq-len 32] [--max-memory 256MiB]

``--model tiny-llama`` takes effdepth's tiny random Llama (byte tokenizer).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch
from passages import bare_forward

import effdepth
from effdepth.measurement import prepare
from effdepth.measurement import run as passage_measure
from effdepth.numerics import analysis as numerics_analysis
from effdepth.numerics.analysis import analysis_memory, analysis_units
from effdepth.numerics.hsic_plan import byte_size
from effdepth.options import AnalysisOptions, LoadOptions
from effdepth.options.checks import parse_bytes
from effdepth.results.store import PooledStore

MIB = float(1 << 20)
STATUS = Path("/proc/self/status")


def measure_tokens(model, ids: torch.Tensor, k: int | None, **analysis):
    """The token reduction's measurement of ``model`` over the passages ``ids`` (N, T), k tokens of each (None:
    every token); ``analysis``: AnalysisOptions' fields. The benchmark's one call of the measurement, the public
    route: ``effdepth.measure(..., pooling="none", tokens_per_passage=k)``."""
    return effdepth.measure(model, ids, pooling="none", tokens_per_passage=k, progress=False, **analysis)


def rss_anon() -> int:
    """Anonymous resident memory (the heap and tensors, not file-backed pages such as the store's), bytes."""
    for line in STATUS.read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class Probe:
    """The peak of anonymous memory per phase (forward, analysis), sampled by a thread and at the hooks, and
    what the hooks see: the store at the analysis's start, each HSIC stack's route, each phase's time."""

    def __init__(self, every_s: float | None = 0.005):
        self.every_s = every_s  # None: no sampling thread (a timed run), only the hooks' samples
        self.phase = "forward"
        self.base = {"forward": rss_anon()}
        self.peak = {"forward": self.base["forward"]}
        self.seconds: dict = {}
        self.store: dict = {}
        self.stacks: list = []
        self._started = time.perf_counter()
        self._done = threading.Event()

    def sample(self) -> None:
        self.peak[self.phase] = max(self.peak.get(self.phase, 0), rss_anon())

    def _run(self) -> None:
        while not self._done.wait(self.every_s):
            self.sample()

    def growth(self, phase: str) -> int:
        return self.peak[phase] - self.base[phase]

    @contextmanager
    def hooked(self):
        """Sample while the measurement runs; the hooks wrap the store's writes, the analysis and its stacks."""
        write, analyse, stack_sums = PooledStore.write, passage_measure.analyse_store, numerics_analysis.stack_sums

        def sampled_write(store, *args, **kwargs):
            write(store, *args, **kwargs)
            self.sample()

        def timed_analysis(store, *args, **kwargs):
            self.sample()
            self.seconds["forward"] = time.perf_counter() - self._started
            self.store = store_sizes(store)
            self.phase = "analysis"
            self.base["analysis"] = self.peak["analysis"] = rss_anon()
            start = time.perf_counter()
            out = analyse(store, *args, **kwargs)
            self.sample()
            self.seconds["analysis"] = time.perf_counter() - start
            self.phase = "after"
            return out

        def recorded(matrices, units, **kwargs):
            out = stack_sums(matrices, units, **kwargs)
            self.sample()
            self.stacks.append((int(matrices.count), int(matrices.samples), kwargs.get("route")))
            return out

        thread = threading.Thread(target=self._run, daemon=True) if self.every_s else None
        PooledStore.write, passage_measure.analyse_store, numerics_analysis.stack_sums = (
            sampled_write,
            timed_analysis,
            recorded,
        )
        if thread is not None:
            thread.start()
        try:
            yield self
        finally:
            self._done.set()
            if thread is not None:
                thread.join()
            PooledStore.write, passage_measure.analyse_store, numerics_analysis.stack_sums = write, analyse, stack_sums
        if "analysis" not in self.seconds:
            raise SystemExit("the measurement never reached passage_measure.analyse_store: update the probe's hooks")


def store_sizes(store: PooledStore) -> dict:
    """The store's files on disk, and the bytes of its sample arrays alone."""
    files = [p for p in Path(store.folder).iterdir() if p.is_file()]
    return {
        "disk_bytes": sum(p.stat().st_size for p in files),
        "sample_bytes": sum(int(a.nbytes) for a in store.arrays().values()),
        "samples": {v: int(a.shape[1]) for v, a in store.arrays().items()},
        "offsets": {v: store.offsets(v).tolist() for v in store.arrays()},
        "shape": [int(x) for x in next(iter(store.arrays().values())).shape],
    }


def load_options(model: str, passages: int, seq_len: int) -> LoadOptions:
    if model == "tiny-llama":
        from effdepth.data.tokenizers import byte_tokenizer
        from effdepth.models.tiny import tiny_model

        torch.manual_seed(0)
        return LoadOptions(
            model=tiny_model("llama"),
            corpus="shakespeare",
            tokenizer=byte_tokenizer(),
            seq_len=seq_len,
            num_seqs=passages,
        )
    return LoadOptions(model=model, corpus="shakespeare", seq_len=seq_len, num_seqs=passages)


def passage_ids(passages) -> torch.Tensor:
    """The passages as an (N, T) tensor of token ids (the Shakespeare windows are all of one length)."""
    if len(set(passages.lengths.tolist())) != 1:
        raise SystemExit(f"passages of lengths {sorted(set(passages.lengths.tolist()))}: the benchmark needs windows")
    return torch.from_numpy(passages.ids.reshape(passages.num_passages, -1).copy())


def child(args, passages: int, timed: bool) -> dict:
    """In a fresh process: load, read the weights in, measure with the probe (``timed``: without its sampling
    thread, between two bare forwards over the same passages, batches and order)."""
    prepared = prepare(load_options(args.model, passages, args.seq_len), progress=False)
    ids = passage_ids(prepared.tokens)
    order = list(np.argsort(-prepared.tokens.lengths, kind="stable"))  # measure_passages' order
    bare_forward(prepared, order[: args.batch_size], args.batch_size)  # reads the weights in
    analysis = {
        "views": args.views,
        "bootstrap": args.bootstrap,
        "batch_size": args.batch_size,
        "max_memory": args.max_memory,
    }
    before = bare_forward(prepared, order, args.batch_size) if timed else None
    with Probe(None if timed else 0.005).hooked() as probe:
        result = measure_tokens(prepared.lm.model, ids, args.tokens_per_passage, **analysis)
    seconds = {**probe.seconds, **({"bare": [before, bare_forward(prepared, order, args.batch_size)]} if timed else {})}
    count, _, width = probe.store["shape"]
    samples = max(probe.store["samples"].values())
    plan = AnalysisOptions(**analysis).analysis_plan()
    offsets = {v: np.asarray(o) for v, o in probe.store.pop("offsets").items()}
    planned = analysis_memory(samples, count - 1, width, plan, analysis_units(passages, plan, offsets))
    return {
        "passages": passages,
        "tokens": int(prepared.tokens.tokens),
        "layers": count - 1,
        "width": width,
        "store": probe.store,
        "forward_peak": probe.growth("forward"),
        "analysis_peak": probe.growth("analysis"),
        "seconds": seconds,
        "stacks": probe.stacks,
        "planned": {
            "budget": planned["budget_bytes"],
            "peak": planned["peak_bytes"],
            "least": planned["least_bytes"],
            "kept": bool(planned["kept"]),
            "route": planned["stack"]["route"],
            "passes": int(planned["stack"]["passes"]),
        },
        "measured": result.config.get("passage_analysis", {}).get("memory"),  # the analysis's own record
        "deff": float(result.default.deff),
    }


def in_child(args, passages: int, timed: bool = False) -> dict:
    """:func:`child` in a fresh process: for memory with a fixed mmap threshold (freed memory goes back at
    once), for time with glibc's default allocator (the fixed threshold maps and unmaps every block over
    64 KiB, which can slow the many small tensors of the sampling and the analysis far more than a bare forward)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("MALLOC_MMAP_THRESHOLD_", None)
    if not timed:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    command = [sys.executable, __file__, *child_argv(args), "--child", str(passages), *(["--timed"] if timed else [])]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"N = {passages} failed (exit {done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_argv(args, shown: bool = False) -> list:
    """The options a child needs (the parent's but --passages and --json); ``shown``: the budget as a size."""
    budget = byte_size(args.max_memory).replace(" ", "").replace(".0", "") if shown else str(args.max_memory)
    return [
        "--model", args.model,
        "--tokens-per-passage", str(args.tokens_per_passage),
        "--seq-len", str(args.seq_len),
        "--batch-size", str(args.batch_size),
        "--max-memory", budget,
        "--bootstrap", str(args.bootstrap),
        "--views", args.views,
    ]  # fmt: skip


def stacks_text(stacks: list) -> str:
    """``4 gram (M 31 30 30 31)``: each stack's route and matrices, in the order the analysis formed them."""
    routes = {}
    for count, _, route in stacks:
        routes.setdefault(route, []).append(str(count))
    return ", ".join(f"{len(m)} {route} (M {' '.join(m)})" for route, m in routes.items())


def report(args, rows: list, timed: dict) -> None:
    first, last = rows[0], rows[-1]
    layers, width, k = first["layers"], first["width"], args.tokens_per_passage
    print(
        f"{args.model}: token reduction, k = {k} tokens of each passage of {args.seq_len}, L = {layers}, d = {width}, "
        f"batch {args.batch_size}, {torch.get_num_threads()} threads, views {args.views}, {args.bootstrap} resamples, "
        f"--max-memory {byte_size(args.max_memory)}"
    )
    print(
        "forward + store, a fresh process per N: the peak of anonymous memory over what the process held after "
        "loading the model; the store on disk against N k (L+1) d x 4 B"
    )
    print(f"{'N':>5} {'samples':>7} {'store MiB':>9} {'N k (L+1) d 4B':>14} {'forward peak MiB':>16}")
    for row in rows:
        n = row["passages"]
        expected = n * k * (layers + 1) * width * 4 * len(row["store"]["samples"])
        print(
            f"{n:>5} {max(row['store']['samples'].values()):>7} {row['store']['disk_bytes'] / MIB:>9.2f} "
            f"{expected / MIB:>14.2f} {row['forward_peak'] / MIB:>16.1f}"
        )
    grew = last["passages"] / first["passages"]
    print(
        f"N x{grew:.0f}: forward peak {first['forward_peak'] / MIB:.1f} -> {last['forward_peak'] / MIB:.1f} MiB "
        f"(target: flat), store x{last['store']['disk_bytes'] / first['store']['disk_bytes']:.2f} "
        f"(target: x{grew:.0f})"
    )
    print(
        f"the analysis of the N k samples within --max-memory {byte_size(args.max_memory)}: each HSIC stack's "
        "route, numerics.analysis.analysis_memory's plan, and the measured peak of anonymous memory over the analysis"
    )
    print(
        f"{'N':>5} {'samples':>7} {'stacks: route (M matrices)':<26} {'view kept':>9} {'passes':>6} "
        f"{'planned peak MiB':>16} {'measured MiB':>12}"
    )
    for row in rows:
        plan = row["planned"]
        print(
            f"{row['passages']:>5} {max(row['store']['samples'].values()):>7} {stacks_text(row['stacks']):<26} "
            f"{'yes' if plan['kept'] else 'no':>9} {plan['passes']:>6} {plan['peak'] / MIB:>16.1f} "
            f"{row['analysis_peak'] / MIB:>12.1f}"
        )
    over = [r for r in rows if r["analysis_peak"] > args.max_memory]
    print(
        f"analysis peak within --max-memory {byte_size(args.max_memory)}: "
        + ("yes, at every N" if not over else "NO at N = " + ", ".join(str(r["passages"]) for r in over))
    )
    s = timed["seconds"]
    bare = sum(s["bare"]) / 2
    print(
        f"time at N = {timed['passages']} (one process, glibc's default allocator): bare decoder forward before and "
        f"after the measurement {s['bare'][0]:.2f} s and {s['bare'][1]:.2f} s ({timed['tokens'] / bare:.0f} tok/s); "
        f"forward + store {s['forward']:.2f} s, {s['forward'] / bare:.2f}x the bare forward (their mean); "
        f"analysis {s['analysis']:.2f} s, {s['analysis'] / bare:.2f}x"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m", help="a model effdepth loads, or tiny-llama")
    parser.add_argument("--passages", default="16,64,256", help="numbers of passages N, comma-separated")
    parser.add_argument("--tokens-per-passage", type=int, default=4, help="k, drawn under the seed")
    parser.add_argument("--seq-len", type=int, default=32, help="tokens per passage (Shakespeare windows)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-memory", type=parse_bytes, default=parse_bytes("256MiB"))
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--views", default="default")
    parser.add_argument("--json", type=Path, help="also write every point's figures here")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args, args.child, args.timed)))
        return
    counts = [int(n) for n in args.passages.split(",")]
    rows = [in_child(args, n) for n in counts]
    timed = in_child(args, max(counts), timed=True)
    print(shlex.join(["python", "benchmarks/tokens.py", "--passages", args.passages, *child_argv(args, shown=True)]))
    report(args, rows, timed)
    if args.json is not None:
        figures = {"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "timed": timed}
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
