"""Run the CPU benchmarks and write their output into docs/benchmarks.md (``make bench``).

Each benchmark runs in its own process, one after the other, and its
printed figures go into the page verbatim under a fixed explanation of what
is measured and against what; nothing in the page is typed by hand, so it
holds the current numbers only. A GPU's figures come from
``benchmarks/gpu.py`` run on that machine; ``--gpu-output FILE`` puts its
saved output into the page too.

    python benchmarks/document.py [--out docs/benchmarks.md] [--gpu-output gpu.txt] [--quick]

``--quick`` runs every benchmark at its smallest size (a check that the
page can be made, not figures to publish).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from effdepth.results.files import write_atomic

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Section:
    """One benchmark in the page: its title, what it measures, and how it is run."""

    title: str
    explanation: str
    script: str
    args: tuple = ()
    quick_args: tuple = ()

    def command(self, quick: bool) -> list:
        return [sys.executable, str(HERE / self.script), *(self.quick_args if quick else self.args)]


SECTIONS = (
    Section(
        "Passage mode (the default): the forward against a bare decoder forward",
        "Over the same passages, batches and order, rounds alternate a bare forward of the decoder\n"
        "stack (no LM head, no hooks) and the same loop with effdepth's pooling hooks (every paper-view\n"
        "variant pooled in float64). Target: at most 1.05. The analysis of the same pooled vectors\n"
        "(paper views, both CKA estimators, 1,000 resamples, calibrated references) is timed beside it,\n"
        "with and without the confound controls and the sample-size curve every result carries (target:\n"
        "at most +25%). Under --views paper drop-pos0 is a view already and only the length control's\n"
        "states stack is new; under the default view drop-pos0 costs one states stack of its own, and on\n"
        "passages of varying length (not these equal-length windows) length costs one more.",
        "passages.py",
        ("--num-seqs", "64", "--repeats", "3"),
        ("--num-seqs", "16", "--repeats", "1"),
    ),
    Section(
        "The analysis at paper16 sizes: a cost model",
        "`analysis_cost.py` counts the float64 flops of every HSIC stack the analysis forms (a test\n"
        "checks the count against the stacks the analysis computes), checks the count against measured\n"
        "time here, projects the analysis against the bfloat16 forward at Table 2's sizes on one H200\n"
        "(N = 10,000 passages of 512 tokens, 1,000 resamples, paper views), and sizes its memory under\n"
        "the default `--max-memory`.\n\n"
        "Per stack of M matrices of N passages x d (P = M (M+1) / 2 pairs) and G bootstrap units: the\n"
        "Gram route forms 2 M N^2 d flops of Gram tiles and 2 M^2 N^2 of unit-block products, times the\n"
        "share of unit blocks its tiles form (the lower triangle: about half), the feature\n"
        "route 2 P N d^2 of cross-products and 2 P G^2 d^2 of their inner products; each stack takes the\n"
        "cheaper. The R resamples then cost O(R (G M N + M^2 N + P G^2)), independent of the Gram tiles,\n"
        "so the analysis grows as N^2 d while the forward grows as N: its share of the forward is\n"
        "largest for the small models, whose forward costs least per passage.\n"
        "Measured time exceeds the counted flops at small sizes (centring, PC removal, the surrogates'\n"
        "generation and reading the store are not counted). The memory table is what\n"
        "`numerics.analysis.analysis_memory` plans with (a test checks a run's resident memory against\n"
        "it); a stack whose centred layers exceed the budget reads its layers again for every tile:\n"
        "time, not numbers.",
        "analysis_cost.py",
        ("--repeats", "2"),
        ("--repeats", "1"),
    ),
    Section(
        "The token reduction (`--pooling none`): memory flat in the passages, the analysis within `--max-memory`",
        "Each passage's tokens as samples (k = 4 of each drawn under the seed), through passage mode's\n"
        "store and analysis (`tokens.py`, one fresh process per number of passages N). The forward +\n"
        "store phase's peak of anonymous resident memory (RssAnon, over what the process held after\n"
        "loading the model) stays flat in N: each batch's samples go to the memory-mapped store, whose\n"
        "pages are the file's, and the store on disk grows as N k (L+1) d float32 (plus each passage's\n"
        "per-token sums). The analysis of the N k samples takes each HSIC stack's route (Gram or feature)\n"
        "within a small `--max-memory` (256 MiB): `numerics.analysis.analysis_memory`'s plan (the view\n"
        "kept in memory or read again from the store, passes over the stored samples per stack, planned\n"
        "peak) beside the measured peak of anonymous memory over the analysis (a measured peak above the\n"
        "plan is memory the plan does not count). At the largest N, the forward + store's and the\n"
        "analysis's times against a bare forward of the decoder stack over the same passages, run before\n"
        "and after the measurement in the same process.",
        "tokens.py",
        (),
        ("--passages", "16,64", "--bootstrap", "50"),
    ),
    Section(
        "D_eff while training: a measurement's cost and memory, the example's overhead",
        "`callback.py`, on `examples/train_with_deff.py`'s tiny LLaMA (4 blocks, d = 96, byte vocabulary),\n"
        "trained a few optimizer steps between measurements, measured on 128 held-out Shakespeare passages of\n"
        "128 bytes with the callbacks' defaults (no bootstrap). Rounds alternate a bare eval forward over the\n"
        "passages in the measurement's batches (`model.eval()`, `torch.no_grad()`, `model(input_ids)`),\n"
        "`TrainingMeasurement.measure` as the callbacks call it, and `effdepth.analyse_saved` of the step it\n"
        "saved (the analysis alone). Target: measure / (eval forward + analysis) at most 1.1. Beside it, where a\n"
        "measurement's time goes: the pooled forward, the analysis, the trajectory's tables, the result saved\n"
        "(each step's paired difference to the one before is made once, when training ends, and counts in the\n"
        "training time below). Memory: anonymous resident memory and the live tensors before and after each\n"
        "measurement (target: flat; the pooled vectors go to disk), the training state (weights, gradients,\n"
        "AdamW moments) the same tensors, no hook left on the model. Then the example's 300 steps with\n"
        "`DeffCallback(every_steps=50)` (7 measurements of its 32 held-out passages) against without it. Times\n"
        "are the process's CPU time on one torch thread: this shared machine's wall time measures its neighbours.",
        "callback.py",
        (),
        ("--num-seqs", "16", "--repeats", "2", "--steps", "4", "--every-steps", "2"),
    ),
    Section(
        "The cross-model CKA matrix against pytorch-cka",
        "`cross_cka.py`: the linear CKA of every state of one stack against every state of another (31 x 31\n"
        "states, N = 1,024 passages, widths 576 and 640, float64), effdepth's `numerics.cross_cka` (both\n"
        "estimators, Gram tiles of the lower triangle within `--max-memory`) against pytorch-cka 1.1.3's\n"
        "`cka_from_features` (the unbiased estimator alone, whole Gram matrices) on the same activations,\n"
        "rounds alternating. Targets: ours no slower (ratio at most 1), the unbiased matrices equal to 1e-6.\n"
        "pytorch-cka is in the test extra (`pip install -e '.[test]'`), no dependency of effdepth itself.",
        "cross_cka.py",
        ("--repeats", "5"),
        ("--passages", "64", "--layers", "3", "--widths", "16,24", "--repeats", "1"),
    ),
    Section(
        "A comparison of two saved results against analysing one of them again",
        "`compare.py`: two random Llamas (24 blocks of width 384, different seeds) measured on the same\n"
        "512 Shakespeare windows and saved with their pooled vectors; rounds alternate `effdepth.analyse_saved`\n"
        "of one (its whole analysis: views, both CKA estimators, 1,000 resamples, calibrated references,\n"
        "confound controls, sample-size curve) and `effdepth.compare` of both (the paired bootstrap of both\n"
        "results' D_eff on the same resamples, the states' HSIC only, and the cross-model CKA), then the same\n"
        "through the command lines, tables and files written, figures left out (`effdepth analyse A --out\n"
        "--no-figures`, `effdepth compare A B --out --no-figures`). Target: a comparison costs at most one\n"
        "analysis (ratio at most 1). The last line splits one comparison's time into its parts.",
        "compare.py",
        ("--repeats", "3", "--cli"),
        ("--passages", "32", "--layers", "2", "--width", "64", "--bootstrap", "50", "--repeats", "1", "--cli"),
    ),
)

INTRO = """# Benchmarks

The current figures, written by `make bench` (`benchmarks/document.py`) from
the benchmarks' own output; nothing here is typed by hand. Speed claims are
ratios taken in one run on one machine; seconds are for orientation. On a
shared machine a ratio's rounds can spread by tens of percent: a median
within that spread of its target is neither met nor missed there.

Machine: {machine}.
"""

GPU_MISSING = """## On a GPU

Not measured on this page's machine. On a CUDA machine,
`python benchmarks/gpu.py --json gpu.json | tee gpu.txt` times passage mode
(the pooled forward against a bare bfloat16 forward of the same passages,
target at most 1.05x its time; the analysis on the GPU against the cost model
at the GPU's measured float64 rate) and the token reduction (`--pooling none`,
64 tokens of each of 256 passages: its forward + store against the same bare
forward, and one whole measurement with the analysis of the samples on the
GPU); `python benchmarks/document.py --gpu-output gpu.txt` then puts its
figures here.
"""


def machine() -> str:
    """The machine in words: processor, threads, torch.

    >>> "threads" in machine()
    True
    """
    return (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
        f"Python {platform.python_version()}, torch {torch.__version__}"
    )


def run_section(section: Section, quick: bool) -> str:
    """The section's markdown: its explanation and the benchmark's printed output."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    done = subprocess.run(section.command(quick), capture_output=True, text=True, env=env)
    if done.returncode != 0:
        tail = " ".join(done.stderr.split()[-40:])
        raise SystemExit(f"benchmarks/{section.script} failed (exit {done.returncode}): {tail}")
    command = " ".join(["python", f"benchmarks/{section.script}", *section.command(quick)[2:]])
    return f"## {section.title}\n\n{section.explanation}\n\n`{command}`:\n\n```\n{done.stdout.strip()}\n```\n"


def gpu_section(path: Path | None) -> str:
    if path is None:
        return GPU_MISSING
    return (
        "## On a GPU\n\n`python benchmarks/gpu.py` on the GPU named in its first line:\n\n"
        f"```\n{path.read_text().strip()}\n```\n"
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "benchmarks.md")
    parser.add_argument("--gpu-output", type=Path, help="the saved output of benchmarks/gpu.py on a GPU")
    parser.add_argument("--quick", action="store_true", help="smallest sizes: checks the page can be made")
    args = parser.parse_args(argv)
    if args.gpu_output is not None and not args.gpu_output.is_file():
        parser.error(f"--gpu-output {args.gpu_output}: no such file; save benchmarks/gpu.py's output there first")
    parts = [INTRO.format(machine=machine())]
    for section in SECTIONS:
        print(f"running benchmarks/{section.script} ...", file=sys.stderr, flush=True)
        parts.append(run_section(section, args.quick))
    parts.append(gpu_section(args.gpu_output))
    write_atomic(args.out, "\n".join(parts).encode())  # a stopped run leaves the old page whole
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
