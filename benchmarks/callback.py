"""The training callback's cost, in one run: a measurement against an eval forward plus the analysis, the memory
a measurement leaves behind, and the example's training time with the callback against without it.

The model is ``examples/train_with_deff.py``'s tiny LLaMA (byte vocabulary), measured on held-out Shakespeare
passages of its context length, trained a few optimizer steps between measurements (so its gradients and the
optimizer's state exist, as in a training run).

- Cost: rounds alternate a bare eval forward (``model.eval()`` under ``torch.no_grad()``, ``model(input_ids)``
  with its LM head, in the measurement's batches), ``TrainingMeasurement.measure`` as the callbacks call it
  (the pooled forward, the analysis, the step's result and pooled vectors saved, the trajectory's tables; the
  steps' paired differences are made once, when training ends, and count in the training time below), and ``effdepth.analyse_saved`` of the step just saved (the analysis
  alone). Ratio: measure / (bare forward + analysis), target at most 1.1; beside it, where the measurement's
  time goes.
- Memory: anonymous resident memory (RssAnon) and the live tensors (count, bytes) before and after each
  measurement: nothing stays held (the pooled vectors are on disk), the training state (weights, gradients,
  optimizer) is untouched, no hook is left on the model.
- Training: the example's training (``train`` of examples/train_with_deff.py, the Trainer with TensorBoard when
  installed) with ``DeffCallback(every_steps=50)`` against without it, the overhead in percent.

Times are the process's CPU time on one torch thread (``--threads``): on a shared machine wall time measures the
neighbours as much as the work, and a second thread's spinning counts as CPU time.

    python benchmarks/callback.py [--num-seqs 128] [--repeats 5] [--steps 300] [--every-steps 50] [--threads 1]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib.util
import io
import statistics
import tempfile
import time
import warnings
from collections import defaultdict
from pathlib import Path

import torch

import effdepth
import effdepth.measurement.run as measurement_run
import effdepth.scale.trajectory as trajectory_module
from effdepth.integrations.training import TrainingMeasurement
from effdepth.results.result import Result

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "train_with_deff.py"
MIB = float(1 << 20)
STATUS = Path("/proc/self/status")


def clock() -> float:
    """The process's CPU time: on a shared machine its wall time measures the neighbours as much as the work."""
    return time.process_time()


def load_example():
    spec = importlib.util.spec_from_file_location("train_with_deff", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rss_anon() -> int:
    """Anonymous resident memory (the heap and tensors, not file-backed pages), bytes, after glibc hands back the
    free memory it keeps (what is held, not what the allocator caches)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    for line in STATUS.read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def live_tensors() -> tuple:
    """(count, bytes) of the tensors the interpreter holds, after a collection."""
    gc.collect()
    with warnings.catch_warnings():  # isinstance on a deprecated torch object warns
        warnings.simplefilter("ignore")
        tensors = [o for o in gc.get_objects() if isinstance(o, torch.Tensor)]
    return len(tensors), sum(t.untyped_storage().nbytes() for t in tensors)


def hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def training_state(model, optimizer) -> tuple:
    """(bytes, storages) of the weights, their gradients and the optimizer's state."""
    tensors = [p for p in model.parameters()] + [p.grad for p in model.parameters() if p.grad is not None]
    tensors += [t for state in optimizer.state.values() for t in state.values() if isinstance(t, torch.Tensor)]
    return sum(t.untyped_storage().nbytes() for t in tensors), sorted(t.untyped_storage().data_ptr() for t in tensors)


def snapshot(model, optimizer) -> tuple:
    """What the process and the model hold now: RssAnon, the live tensors, the training state, the model's hooks
    and its mode."""
    tensors = live_tensors()
    return rss_anon(), tensors, training_state(model, optimizer), hook_count(model), model.training


class Stopwatch:
    """Time spent inside the named parts of a measurement, by wrapping them while it is open."""

    PARTS = (
        ("pooled forward", measurement_run, "pool_into"),
        ("analysis", measurement_run, "analysed_result"),
        ("tables", trajectory_module, "write_trajectory"),
        ("result saved", Result, "save"),
    )

    def __init__(self):
        self.spent = defaultdict(float)

    @contextlib.contextmanager
    def open(self):
        originals = [(owner, name, getattr(owner, name)) for _, owner, name in self.PARTS]
        for (part, owner, name), (_, _, original) in zip(self.PARTS, originals):
            setattr(owner, name, self._timed(part, original))
        try:
            yield self
        finally:
            for owner, name, original in originals:
                setattr(owner, name, original)

    def _timed(self, part: str, function):
        def timed(*args, **kwargs):
            start = clock()
            try:
                return function(*args, **kwargs)
            finally:
                self.spent[part] += clock() - start

        return timed


def bare_forward(model, ids: torch.Tensor, batch_size: int) -> float:
    """An eval forward over the passages in the measurement's batches, the model handed back training."""
    start = clock()
    model.eval()
    with torch.no_grad():
        for i in range(0, len(ids), batch_size):
            model(input_ids=ids[i : i + batch_size])
    model.train()
    return clock() - start


def train_steps(model, optimizer, ids: torch.Tensor, steps: int) -> None:
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # the gradients stay allocated, as between a Trainer's steps


def measurement_rounds(example, args, folder: Path) -> None:
    model_args = example.parse_args([])
    data = example.split_corpus("shakespeare", seq_len=model_args.seq_len, eval_seqs=args.num_seqs)
    model = example.tiny_llama(model_args).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = data.train[: model_args.batch_size]
    measurement = TrainingMeasurement(data.held_out, every_steps=1, out=folder / "trajectory", figures=False)
    measurement.start(model, model_name="tiny-llama")
    batch_size = measurement.options.analysis.batch_size
    passages = measurement.prepared.tokens
    print(
        f"tiny LLaMA ({model_args.layers} blocks, d = {model_args.hidden}): {passages.num_passages} held-out "
        f"passages of {model_args.seq_len} bytes, batch {batch_size}, {torch.get_num_threads()} torch thread(s); "
        f"the callbacks' measurement (bootstrap {measurement.values['bootstrap']}, the confounds table)"
    )
    train_steps(model, optimizer, batch, 1)
    bare_forward(model, data.held_out, batch_size)  # warm-ups: the first of each loads what it needs
    for step in (0, 1):  # the second is the first with a step before it to pair with
        measurement.measure(model, step)
    rows, memory, stopwatch = [], [], Stopwatch()
    for step in range(2, args.repeats + 2):
        train_steps(model, optimizer, batch, 2)
        bare = bare_forward(model, data.held_out, batch_size)
        before = snapshot(model, optimizer)
        stopwatch.spent.clear()
        with stopwatch.open():
            start = clock()
            measurement.measure(model, step)
            measured = clock() - start
        after = snapshot(model, optimizer)
        start = clock()
        effdepth.analyse_saved(
            measurement.trajectory.out / measurement.trajectory.checkpoints[-1]["key"], progress=False
        )
        analysis = clock() - start
        rows.append((bare, measured, analysis, dict(stopwatch.spent)))
        memory.append((before, after))
    print_cost(rows)
    print_memory(memory)


def print_cost(rows: list) -> None:
    for k, (bare, measured, analysis, _) in enumerate(rows, start=1):
        print(
            f"round {k}: bare eval forward {bare:.2f} s, analysis {analysis:.2f} s, measure {measured:.2f} s, "
            f"ratio {measured / (bare + analysis):.3f}"
        )
    ratios = [m / (b + a) for b, m, a, _ in rows]
    print(
        f"measurement / (eval forward + analysis): median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.3f}-{max(ratios):.3f}] (target <= 1.1)"
    )
    measured = statistics.median(m for _, m, _, _ in rows)
    shares = {part: statistics.median(p.get(part, 0.0) for *_, p in rows) for part, *_ in Stopwatch.PARTS}
    shares["the rest"] = max(0.0, measured - sum(shares.values()))
    where = ", ".join(f"{part} {t:.2f} s ({t / measured:.0%})" for part, t in shares.items())
    print(f"where a measurement's {measured:.2f} s go (medians): {where}")


def print_memory(memory: list) -> None:
    rss = [after[0] / MIB for _, after in memory]
    first = memory[0][0][0] / MIB
    print(
        f"RssAnon before the first timed measurement {first:.1f} MiB, after each: " + ", ".join(f"{x:.1f}" for x in rss)
    )
    deltas = ", ".join(f"{(after[0] - before[0]) / MIB:+.1f}" for before, after in memory)
    print(f"growth over {len(rss)} measurements: {rss[-1] - first:+.1f} MiB; across each: {deltas} MiB (target: flat)")
    same = all(before[1] == after[1] for before, after in memory)
    count, size = memory[-1][1][1]
    print(
        f"live tensors the same before and after every measurement: {'yes' if same else 'no'} "
        f"({count} tensors, {size / MIB:.1f} MiB, the corpus's token ids included)"
    )
    state = all(before[2] == after[2] for before, after in memory)
    print(
        f"training state (weights, gradients, AdamW moments: {memory[-1][1][2][0] / MIB:.1f} MiB) the same "
        f"tensors of the same size after every measurement: {'yes' if state else 'no'}"
    )
    hooks = {after[3] - before[3] for before, after in memory}
    modes = all(after[4] for _, after in memory)
    print(f"hooks left on the model: {max(hooks)}; back in training mode: {'yes' if modes else 'no'}")


def training_rounds(example, args, folder: Path) -> None:
    base = ["--steps", str(args.steps), "--every-steps", str(args.every_steps)]
    times = defaultdict(list)
    for k in range(args.train_repeats):
        for callback in (False, True):
            out = folder / f"train-{k}-{'with' if callback else 'without'}"
            argv = [*base, "--out", str(out), *([] if callback else ["--no-callback"])]
            start = clock()
            with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its logs
                example.train(example.parse_args(argv))
            times[callback].append(clock() - start)
            label = f"DeffCallback(every_steps={args.every_steps})" if callback else "without the callback"
            print(f"round {k + 1}: {args.steps} steps {label}: {times[callback][-1]:.1f} s")
    without, with_ = statistics.median(times[False]), statistics.median(times[True])
    measured = args.steps // args.every_steps + 1 + (args.steps % args.every_steps != 0)
    print(
        f"examples/train_with_deff.py, {args.steps} steps: {with_:.1f} s with the callback ({measured} measurements), "
        f"{without:.1f} s without: overhead {with_ / without - 1:+.1%} ({(with_ - without) / measured:.2f} s a "
        "measurement, the passages' preparation and the final figure included)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-seqs", type=int, default=128, help="held-out passages measured (the callback's default)")
    parser.add_argument("--repeats", type=int, default=5, help="measurement rounds")
    parser.add_argument("--steps", type=int, default=300, help="the example's training steps")
    parser.add_argument("--every-steps", type=int, default=50, help="the example's measurement interval")
    parser.add_argument("--train-repeats", type=int, default=1, help="training runs with and without the callback")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1: see clock)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    example = load_example()
    with tempfile.TemporaryDirectory(prefix="effdepth-callback-") as folder:
        measurement_rounds(example, args, Path(folder))
        training_rounds(example, args, Path(folder))


if __name__ == "__main__":
    main()
