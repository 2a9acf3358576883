"""``effdepth compare`` of two saved results against ``effdepth analyse`` of one of them, in one run.

Two random Llamas (seeds 0 and 1, ``--layers`` blocks of width ``--width``, the byte tokenizer) are
measured on the same N windows of the Shakespeare corpus and saved with their pooled vectors (setup,
not timed). Rounds then alternate, each reading the saved folders afresh:

- analyse: ``effdepth.analyse_saved(A)``, A's whole analysis again (its views, both CKA estimators,
  the bootstrap's resamples, the calibrated references, the confound controls, the sample-size curve);
- compare: ``effdepth.compare(A, B)``, the paired bootstrap of both results' D_eff on the same
  resamples (their states' HSIC only) and the cross-model CKA of every state of A with every state of B;
- with ``--cli``, the same through the command lines, their tables printed and files written, figures
  left out (each command draws its own; ``effdepth analyse A --out --no-figures``, ``effdepth compare A B
  --out --no-figures``).

One untimed call of each comes first (imports, first allocations).

Printed: each round's times and the ratio compare / analyse (target: at most 1), their median, and
where one comparison's time goes (loading both, each result's draws, the paired differences, the
cross-model CKA).

    python benchmarks/compare.py [--passages 512] [--layers 24] [--width 384] [--repeats 3] [--cli]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import effdepth
from effdepth.data.tokenizers import BYTE_VOCAB_SIZE, byte_tokenizer


def random_llama(layers: int, width: int, seed: int):
    """A randomly initialised Llama of ``layers`` blocks of width ``width`` over the byte tokenizer's ids."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        num_hidden_layers=layers,
        hidden_size=width,
        intermediate_size=width,  # a narrow MLP: the setup's forward stays short; the analysis sees width d
        num_attention_heads=max(1, width // 64),
        num_key_value_heads=max(1, width // 64),
        vocab_size=BYTE_VOCAB_SIZE,
        bos_token_id=256,
        eos_token_id=257,
        pad_token_id=258,
    )
    return LlamaForCausalLM(config).eval()


def saved_results(root: Path, args) -> tuple:
    """``(A, B)``: the folders of the two measured results, the same passages and options."""
    folders, tokenizer = [], byte_tokenizer()  # one tokenizer: the corpus is tokenized once
    for seed in (0, 1):
        folder = root / f"seed-{seed}"
        result = effdepth.measure(
            random_llama(args.layers, args.width, seed),
            "shakespeare",
            tokenizer=tokenizer,
            seq_len=args.seq_len,
            num_seqs=args.passages,
            bootstrap=args.bootstrap,
            progress=False,
        )
        result.save(folder)
        folders.append(folder)
    return tuple(folders)


def timed(function) -> float:
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def quietly(function):
    """``function`` with its printed output swallowed (the command lines print their tables)."""

    def run():
        with contextlib.redirect_stdout(io.StringIO()):
            return function()

    return run


def breakdown(a: Path, b: Path) -> dict:
    """Seconds of each part of one comparison, run part by part as ``compare_results`` runs them."""
    from effdepth.measurement.run import analysis_device
    from effdepth.numerics.paired import paired_differences
    from effdepth.studies.compare import as_member, cross_model_cka, shared_analysis

    device = analysis_device()
    parts, members = {}, []
    parts["load both"] = timed(lambda: members.extend([as_member(a, 0), as_member(b, 1)]))
    first, second = members
    analysis = shared_analysis(first, second)
    views = tuple(analysis.views)
    draws = {}
    for name, member in (("A", first), ("B", second)):
        parts[f"draws of {name}"] = timed(lambda m=member, n=name: draws.update({n: m.draws(analysis, views, device)}))
    parts["paired differences"] = timed(lambda: paired_differences(draws["A"], draws["B"]))
    parts["cross-model CKA"] = timed(lambda: cross_model_cka(first, second, analysis, device))
    return parts


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--passages", type=int, default=512, help="N windows of the Shakespeare corpus")
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--width", type=int, default=384)
    parser.add_argument("--bootstrap", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cli", action="store_true", help="also time the command lines (without figures)")
    args = parser.parse_args(argv)
    from effdepth.cli import main as cli

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        a, b = saved_results(root, args)
        saved = effdepth.load(a)
        print(
            f"two random Llamas of {args.layers} blocks, width {args.width}: N = {args.passages} windows of "
            f"{args.seq_len} tokens, views {', '.join(saved.config['views'])}, {', '.join(saved.similarities)}, "
            f"{args.bootstrap} resamples, {torch.get_num_threads()} threads"
        )
        runs = {
            "python": (
                lambda: effdepth.analyse_saved(a, progress=False),
                lambda: effdepth.compare(a, b, progress=False),
            ),
        }
        if args.cli:
            quiet = ("--no-progress", "--no-figures")
            runs["cli"] = (
                quietly(lambda: cli(["analyse", str(a), "--out", str(root / "analysed"), *quiet])),
                quietly(lambda: cli(["compare", str(a), str(b), "--out", str(root / "compared"), *quiet])),
            )
        for path, (analyse, compare) in runs.items():
            analyse(), compare()  # warm: imports, the first allocations
            ratios = []
            for r in range(args.repeats):
                analyse_s, compare_s = timed(analyse), timed(compare)
                ratios.append(compare_s / analyse_s)
                print(
                    f"{path} round {r + 1}: analyse A {analyse_s:.2f} s, compare A B {compare_s:.2f} s, "
                    f"ratio {ratios[-1]:.3f}"
                )
            print(
                f"{path}: compare A B / analyse A: median {statistics.median(ratios):.3f} "
                f"[{min(ratios):.3f}-{max(ratios):.3f}] (target <= 1)"
            )
        parts = breakdown(a, b)
        total = sum(parts.values())
        print(
            "one comparison, part by part: "
            + ", ".join(f"{name} {seconds:.2f} s ({seconds / total:.0%})" for name, seconds in parts.items())
        )


if __name__ == "__main__":
    sys.exit(main())
