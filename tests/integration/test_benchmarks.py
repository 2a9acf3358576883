"""The benchmark scripts stay runnable (their numbers live in docs/benchmarks.md, written by make bench, never in tests)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU machine the script really benchmarks")
def test_gpu_benchmark_exits_cleanly_without_cuda():
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py")], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and "no CUDA device" in out.stdout


def test_gpu_benchmark_runs_every_step_as_a_cpu_smoke_test(tmp_path):
    """Both poolings' sections and the profile run end to end (on the CPU, tiny shape), so a lent GPU's minutes go
    to measuring: passage mode's pooled forward and analysis, the token reduction's forward + store and whole
    measurement (k tokens of each passage as samples)."""
    timings, profiled = tmp_path / "gpu.json", tmp_path / "profile.txt"
    out = subprocess.run(
        [sys.executable, "gpu.py", "--device", "cpu", "--shapes", "tiny", "--batch-size", "4", "--passages", "16"]
        + ["--passage-len", "16", "--tokens-per-passage", "4", "--token-passages", "8", "--repeats", "1"]
        + ["--json", str(timings), "--profile", str(profiled)],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pooled forward (paper variants) / bare" in out.stdout and "flop model at" in out.stdout
    assert "tiny tokens (--pooling none): k = 4 tokens of each of 8 passages" in out.stdout
    assert "forward + store / bare" in out.stdout and "analysis of the 32 samples" in out.stdout
    tokens = json.loads(timings.read_text())["shapes"]["tiny"]["tokens"]
    assert tokens["samples"] == 8 * 4 and tokens["tokens"] == 8 * 16 and len(tokens["rounds"]) == 1
    assert tokens["whole"]["analysis_s"] > 0 and tokens["whole"]["forward_store_s"] > 0
    assert "sorted by self_cpu_time_total" in profiled.read_text()


@pytest.mark.slow  # the embedded SmolLM2
def test_the_passage_benchmark_runs_end_to_end():
    """What ``make bench`` runs for passage mode, on the embedded SmolLM2 at a tiny size."""
    out = subprocess.run(
        [sys.executable, "passages.py", "--repeats", "1", "--num-seqs", "8", "--seq-len", "32", "--batch-size", "4"]
        + ["--bootstrap", "50"],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "passage forward / bare decoder forward: median" in out.stdout


def test_gpu_benchmark_shapes_are_real_configs():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import gpu
    finally:
        sys.path.pop(0)
    from transformers import AutoConfig

    for model_type, fields in gpu.SHAPES.values():
        config = AutoConfig.for_model(model_type, **fields)
        assert config.num_hidden_layers == fields["num_hidden_layers"] and config.hidden_size == fields["hidden_size"]


def benchmark_module(name):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.pop(0)


@pytest.mark.parametrize("samples, width", [(64, 16), (1000, 4)], ids=["gram route", "feature route"])
def test_the_analysis_cost_model_counts_the_stacks_the_analysis_computes(monkeypatch, samples, width):
    """benchmarks/analysis_cost.py's flops are those of the HSIC stacks analyse_pooled really forms, on the
    route each really takes."""
    import numpy as np

    from effdepth.numerics import analysis as numerics_analysis
    from effdepth.numerics import sample_hsic
    from effdepth.numerics.views import PAPER_VIEWS

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import analysis_cost
    finally:
        sys.path.pop(0)
    shapes, rows = [], []
    real, real_resampled = sample_hsic.stack_sums, numerics_analysis.resampled_hsic

    def counted(matrices, units, **kwargs):
        stack = sample_hsic.as_stack(matrices)
        shapes.append((stack.count, stack.samples, stack.width, kwargs["route"]))
        return real(matrices, units, **kwargs)

    def counted_rows(sums, weights, **kwargs):
        rows.append(len(weights))
        return real_resampled(sums, weights, **kwargs)

    monkeypatch.setattr(numerics_analysis, "stack_sums", counted)
    monkeypatch.setattr(numerics_analysis, "resampled_hsic", counted_rows)
    layers, resamples = 3, 20
    pooled = np.cumsum(np.random.default_rng(0).standard_normal((layers + 1, samples, width)), axis=0)
    lengths = np.random.default_rng(1).integers(8, 64, size=samples)  # varying: the length control is computed
    for views in (PAPER_VIEWS, "top1pc"):  # the controls are views, or stacks of their own
        shapes.clear(), rows.clear()
        numerics_analysis.analyse_pooled(
            {v: pooled for v in ("default", "drop-pos0", "token-norm")},
            numerics_analysis.AnalysisPlan(views=views, bootstrap=resamples),
            lengths=lengths,
        )
        flops = [
            analysis_cost.stack_flops(n, m, d, resamples, extra_rows=r - resamples - 1)
            for (m, n, d, _), r in zip(shapes, rows)
        ]
        assert [("grams" in f) for f in flops] == [route == "gram" for *_, route in shapes]
        assert sum(sum(f.values()) for f in flops) == analysis_cost.analysis_flops(
            samples, layers, width, resamples, views
        )
    assert max(rows) > resamples + 1  # the sample-size curve's rows


def test_make_bench_writes_each_benchmark_output_into_the_page(tmp_path, monkeypatch):
    document = benchmark_module("document")
    (tmp_path / "ok.py").write_text("import sys; print('ratio 1.01', sys.argv[1:])")
    (tmp_path / "broken.py").write_text("raise SystemExit('no model here')")
    monkeypatch.setattr(document, "HERE", tmp_path)
    page = tmp_path / "benchmarks.md"
    monkeypatch.setattr(
        document, "SECTIONS", (document.Section("One", "What it measures.", "ok.py", ("--full",), ("--small",)),)
    )
    document.main(["--out", str(page), "--quick"])
    text = page.read_text()
    assert "## One" in text and "What it measures." in text and "ratio 1.01 ['--small']" in text
    assert "python benchmarks/ok.py --small" in text and "## On a GPU" in text and "Not measured" in text

    gpu = tmp_path / "gpu.txt"
    gpu.write_text("device: H200")
    document.main(["--out", str(page), "--gpu-output", str(gpu)])
    assert "ratio 1.01 ['--full']" in page.read_text() and "device: H200" in page.read_text()

    monkeypatch.setattr(document, "SECTIONS", (document.Section("Two", "x", "broken.py"),))
    with pytest.raises(SystemExit, match="broken.py failed"):
        document.main(["--out", str(page)])
    assert "device: H200" in page.read_text()  # a failed run leaves the page as it was


def test_the_token_reduction_benchmark_shows_flat_memory_and_a_store_that_grows_with_the_passages(tmp_path):
    """``benchmarks/tokens.py`` on the tiny Llama at two numbers of passages: it runs end to end, the forward's
    peak memory stays flat (each batch's samples go to the store, not into memory) while the store grows as
    N k (L+1) d float32, and the analysis holds no more than its plan within its budget."""
    out = tmp_path / "tokens.json"
    # Every token of 32-token passages: 256 passages' samples (L+1 = 4, d = 64) held in memory as float64
    # would add 16 MiB to the forward's peak, twice the slack below.
    done = subprocess.run(
        [sys.executable, "tokens.py", "--model", "tiny-llama", "--passages", "16,256", "--tokens-per-passage", "32"]
        + ["--seq-len", "32", "--batch-size", "16", "--bootstrap", "10", "--max-memory", "128MiB", "--json", str(out)],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "forward peak" in done.stdout and "analysis peak within --max-memory 128.0 MiB" in done.stdout
    small, large = json.loads(out.read_text())["rows"]
    mib = 1 << 20
    assert large["forward_peak"] <= 1.5 * small["forward_peak"] + 8 * mib, (
        small["forward_peak"],
        large["forward_peak"],
    )
    for row in (small, large):
        count, samples, width = row["store"]["shape"]
        assert (count, samples) == (4, row["passages"] * 32)
        assert row["store"]["sample_bytes"] == 4 * count * samples * width <= row["store"]["disk_bytes"]
        assert {route for *_, route in row["stacks"]} <= {"gram", "feature"} and len(row["stacks"]) >= 2
        # the interpreter's own allocations aside, the analysis holds no more than its plan, within the budget
        assert row["analysis_peak"] <= row["planned"]["peak"] + 16 * mib, (row["analysis_peak"], row["planned"])
        assert row["planned"]["peak"] <= row["planned"]["budget"]
    assert large["store"]["sample_bytes"] == 16 * small["store"]["sample_bytes"]


def run_cross_cka_benchmark() -> str:
    done = subprocess.run(
        [sys.executable, "cross_cka.py", "--passages", "64", "--layers", "3", "--widths", "16,24", "--repeats", "1"],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_cross_cka_benchmark_runs_its_short_mode_and_agrees_with_pytorch_cka():
    out = run_cross_cka_benchmark()
    assert "4 x 4 states, N = 64 passages, widths 16 and 24" in out and "ours: gram route" in out
    line = next(x for x in out.splitlines() if x.startswith("largest |ours - pytorch-cka|"))
    assert float(line.split(": ")[1].split()[0]) <= 1e-6, line
    assert "ours / pytorch-cka 1.1.3: median" in out


def test_the_compare_benchmark_runs_its_short_mode():
    """What ``make bench`` runs for compare, on two tiny random Llamas: every line it prints is made."""
    document = benchmark_module("document")
    (section,) = [s for s in document.SECTIONS if s.script == "compare.py"]
    done = subprocess.run(
        section.command(quick=True), cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "two random Llamas of 2 blocks, width 64: N = 32 windows" in out
    for path in ("python", "cli"):
        assert f"{path}: compare A B / analyse A: median" in out
    assert "one comparison, part by part: load both" in out and "cross-model CKA" in out


def test_the_callback_benchmark_shows_a_measurement_leaves_nothing_behind():
    """``benchmarks/callback.py`` shortened: it runs end to end, and after every measurement the live tensors and
    the training state are those before it, no hook is left on the model and it is back in training mode."""
    done = subprocess.run(
        [sys.executable, "callback.py", "--num-seqs", "8", "--repeats", "2", "--steps", "2", "--every-steps", "1"],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "measurement / (eval forward + analysis): median" in out and "where a measurement's" in out
    assert "live tensors the same before and after every measurement: yes" in out
    assert "AdamW moments" in out and "the same tensors of the same size after every measurement: yes" in out
    assert "hooks left on the model: 0; back in training mode: yes" in out
    assert "examples/train_with_deff.py, 2 steps:" in out and "(3 measurements)" in out
