"""The benchmark scripts stay runnable (their numbers live in docs/benchmarks.md, written by make bench, never in tests)."""

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


def test_gpu_benchmark_runs_every_step_as_a_cpu_smoke_test():
    """Both protocols' sections run end to end (on the CPU, tiny shape), so a lent GPU's minutes go to measuring."""
    out = subprocess.run(
        [
            sys.executable,
            "gpu.py",
            "--device",
            "cpu",
            "--shapes",
            "tiny",
            "--seq-len",
            "16",
            "--batch-size",
            "4",
            "--batches",
            "1",
            "--passages",
            "16",
            "--passage-len",
            "16",
            "--repeats",
            "1",
        ],
        cwd=ROOT / "benchmarks",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pooled forward (paper variants) / bare" in out.stdout and "flop model at" in out.stdout
    assert "tiny tokens (--pooling none)" in out.stdout and "cka: paper views / default view" in out.stdout


def test_the_token_benchmark_measures_in_token_mode():
    """``benchmarks/overhead.py``'s measurement, on a tiny model: token mode, whatever the default protocol."""
    from effdepth.measure import prepare
    from effdepth.options import LoadOptions
    from effdepth.tiny import tiny_model

    overhead = benchmark_module("overhead")
    prepared = prepare(LoadOptions(model=tiny_model("llama"), corpus=torch.randint(0, 256, (4, 16))), progress=False)
    for views, similarity, surrogates in (("default", "frobenius", 0), ("paper", "all", None)):
        result = overhead.measure_run(prepared, 2, views=views, similarity=similarity, surrogate_seqs=surrogates)
        assert not result.passages and similarity in ("all", result.primary_similarity)


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


@pytest.mark.parametrize("tokens", [(40, 40), (37, 29)])
def test_the_flop_model_counts_the_products_cka_makes(tokens):
    # The cost model is only as good as its count: it must equal the flops of the products
    # pair_cka really runs.
    from torch.utils.flop_counter import FlopCounterMode

    from effdepth.numerics.cka import pair_cka

    costs = benchmark_module("costs")
    tp, tq = tokens
    yp, yq = torch.randn(5, tp, 24), torch.randn(5, tq, 24)
    with FlopCounterMode(display=False) as counter:
        pair_cka(yp, yq)
    counts = {str(op).removeprefix("aten.").split(".")[0]: n for op, n in counter.get_flop_counts()["Global"].items()}
    assert {k: counts.get(k) for k in ("bmm", "mm")} == costs.pair_flops(5, tp, tq, 24)


def test_the_flop_model_of_a_loaded_model_counts_its_blocks():
    from transformers import AutoConfig, AutoModelForCausalLM

    costs = benchmark_module("costs")
    config = AutoConfig.for_model(
        "llama",
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    model = AutoModelForCausalLM.from_config(config)
    per_block = sum(p.numel() for p in model.model.layers[0].parameters())
    # q and o 64 x 64, k and v 64 x 32 (two key-value heads), the MLP 3 x 64 x 128, two norms
    assert per_block == 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64
    want = sum(costs.pair_flops(4, 32, 32, 64).values()) / 2 / (2 * 32 * 3 * per_block + 2 * 3 * 32 * 32 * 64)
    assert costs.model_cka_flop_share(model, 32) == pytest.approx(want, rel=1e-12)


def test_the_flop_model_examples_hold():
    import doctest

    assert doctest.testmod(benchmark_module("costs")).failed == 0


@pytest.mark.parametrize("samples, width", [(64, 16), (1000, 4)], ids=["gram route", "feature route"])
def test_the_analysis_cost_model_counts_the_stacks_the_analysis_computes(monkeypatch, samples, width):
    """benchmarks/analysis_cost.py's flops are those of the HSIC stacks analyse_pooled really forms, on the
    route each really takes."""
    import numpy as np

    from effdepth.numerics import passage_analysis, sample_hsic
    from effdepth.numerics.passage_views import PAPER_VIEWS

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import analysis_cost
    finally:
        sys.path.pop(0)
    shapes, rows = [], []
    real, real_resampled = sample_hsic.stack_sums, passage_analysis.resampled_hsic

    def counted(matrices, units, **kwargs):
        stack = sample_hsic.as_stack(matrices)
        shapes.append((stack.count, stack.samples, stack.width, kwargs["route"]))
        return real(matrices, units, **kwargs)

    def counted_rows(sums, weights, **kwargs):
        rows.append(len(weights))
        return real_resampled(sums, weights, **kwargs)

    monkeypatch.setattr(passage_analysis, "stack_sums", counted)
    monkeypatch.setattr(passage_analysis, "resampled_hsic", counted_rows)
    layers, resamples = 3, 20
    pooled = np.cumsum(np.random.default_rng(0).standard_normal((layers + 1, samples, width)), axis=0)
    lengths = np.random.default_rng(1).integers(8, 64, size=samples)  # varying: the length control is computed
    for views in (PAPER_VIEWS, "top1pc"):  # the controls are views, or stacks of their own
        shapes.clear(), rows.clear()
        passage_analysis.analyse_pooled(
            {v: pooled for v in ("default", "drop-pos0", "token-norm")},
            passage_analysis.AnalysisPlan(views=views, bootstrap=resamples),
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
