"""On a CUDA device effdepth gives the CPU's numbers: the same tiny model and tokens, every similarity
and every paper view, float32 on both (the statistics are float64 on both); bfloat16 on the GPU runs and
lands near them; and GPU memory does not grow with the number of sequences. Skipped without CUDA
(conftest's ``gpu`` marker): CI never has one; run them where a GPU is lent."""

import copy

import pytest
import torch

import effdepth
from effdepth.models.tiny import tiny_model

pytestmark = pytest.mark.gpu

SIMILARITIES = "cka,frobenius,token,cka-full"


def _measure(model, ids, device, dtype="float32", **options):
    return effdepth.measure(
        copy.deepcopy(model),
        ids,
        device=device,
        dtype=dtype,
        views="paper",
        similarity=SIMILARITIES,
        bootstrap=20,
        progress=False,
        **options,
    )


def _pairs(result):
    for similarity, views in result.similarities.items():
        for name, view in views.items():
            yield similarity, name, view


@pytest.mark.parametrize("model_type", ["llama", "gpt_neox", "olmo2"])
def test_cuda_float32_gives_the_cpu_numbers(model_type):
    torch.manual_seed(0)
    model = tiny_model(model_type)
    ids = torch.randint(0, 256, (6, 32))
    on_cpu = _measure(model, ids, "cpu", surrogate_seqs=0)
    on_gpu = _measure(model, ids, "cuda", surrogate_seqs=0)
    assert on_gpu.provenance["model"]["device"].startswith("cuda")
    assert list(on_gpu.similarities) == list(on_cpu.similarities)
    compared = 0
    for similarity, name, view in _pairs(on_cpu):
        other = on_gpu.view(name, similarity=similarity)
        # float32 forward passes on two devices differ in summation order (~1e-6 relative).
        assert other.deff == pytest.approx(view.deff, rel=1e-4), (similarity, name)
        assert other.profile == pytest.approx(view.profile, rel=1e-3, abs=1e-6), (similarity, name)
        assert other.references["matched"] == pytest.approx(view.references["matched"], rel=1e-4)
        if view.ci is not None:  # the bootstrap weights come from the seed, not the device
            assert other.ci["deff"] == pytest.approx(view.ci["deff"], rel=1e-3), (similarity, name)
        compared += 1
    assert compared >= 4 * 5  # every similarity x the paper views it defines


def test_calibrated_references_run_on_the_gpu():
    torch.manual_seed(1)
    model = tiny_model("llama")
    ids = torch.randint(0, 256, (8, 32))
    on_cpu = _measure(model, ids, "cpu")
    on_gpu = _measure(model, ids, "cuda")
    for similarity, name, view in _pairs(on_gpu):
        if similarity == "cka-full":
            continue
        for key in ("structural_cal", "matched_cal"):
            value = view.references[key]
            # Gaussian draws differ between devices, so the surrogates agree in distribution only.
            assert value == pytest.approx(on_cpu.view(name, similarity=similarity).references[key], rel=0.1), (
                similarity,
                name,
                key,
            )
        assert view.calibrated_sequences == 8


def test_bfloat16_on_the_gpu_lands_near_float32():
    torch.manual_seed(2)
    model = tiny_model("llama")
    ids = torch.randint(0, 256, (6, 32))
    full = _measure(model, ids, "cuda", surrogate_seqs=0)
    half = _measure(model, ids, "cuda", dtype="bfloat16", surrogate_seqs=0)
    assert half.provenance["model"]["dtype"] == "bfloat16"
    for similarity, name, view in _pairs(full):
        assert half.view(name, similarity=similarity).deff == pytest.approx(view.deff, rel=0.05), (similarity, name)


def test_gpu_memory_is_flat_in_the_number_of_sequences():
    torch.manual_seed(3)
    model = tiny_model("llama").to("cuda")

    def peak(num_seqs):
        ids = torch.randint(0, 256, (num_seqs, 64))
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        effdepth.measure(
            model, ids, device="cuda", views="paper", similarity="all", bootstrap=0, batch_size=4, progress=False
        )
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before

    small, large = peak(8), peak(64)
    assert large <= 1.25 * small + 2**20, (small, large)
