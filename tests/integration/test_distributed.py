"""torchrun (gloo, CPU): the same numbers as one process on the same sequences."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import effdepth
from effdepth.cli.torchrun import main
from effdepth.data import load_corpus
from effdepth.distributed import measure_distributed, shares
from effdepth.options import Options

OPTIONS = [
    "--seq-len",
    "16",
    "--num-seqs",
    "7",
    "--batch-size",
    "2",
    "--bootstrap",
    "50",
    "--views",
    "default,drop-pos0,top1pc",
    "--pooling",
    "none",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "text.txt"
    p.write_text("Friends, Romans, countrymen, lend me your ears; I come to bury Caesar, not to praise him. " * 40)
    return str(p)


def test_shares_are_contiguous_whole_pairs_and_cover_everything():
    for total in range(2, 16):
        for world in range(1, total // 2 + 1):
            bounds = shares(total, world)
            assert bounds[0][0] == 0 and bounds[-1][1] == total
            assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
            # Every share starts on a pair; they differ by at most one pair (and the odd last sequence).
            assert all(lo % 2 == 0 for lo, _ in bounds)
            pairs = [(h - l) // 2 for l, h in bounds]
            assert max(pairs) - min(pairs) <= 1


def test_a_share_of_the_corpus_keeps_the_mask():
    ids = torch.arange(12).reshape(4, 3)
    mask = torch.ones_like(ids)
    mask[2, 2] = 0
    corpus = load_corpus({"input_ids": ids, "attention_mask": mask})
    part = corpus.rows(2, 4)
    assert part.input_ids.tolist() == [[6, 7, 8], [9, 10, 11]] and part.attention_mask.tolist() == [
        [1, 1, 0],
        [1, 1, 1],
    ]
    assert corpus.lengths() == [3, 3, 2, 3] and part.sha256 == corpus.sha256  # provenance: the whole corpus


def _same(a, b):
    assert list(a.views) == list(b.views)
    for name in a.views:
        va, vb = a.views[name], b.views[name]
        assert vb.deff == pytest.approx(va.deff, rel=1e-9) and vb.sequences == va.sequences and vb.tokens == va.tokens
        assert np.allclose(vb.similarity, va.similarity, rtol=1e-9, atol=0)
        for key in ("deff", "ratio", "reference_matched", "correlated_updates"):
            assert vb.ci[key] == pytest.approx(
                va.ci[key], rel=1e-9
            )  # the bootstrap saw the same units in the same order
    assert a.config["pc_estimate"] == b.config["pc_estimate"]


def torchrun_measure(model_dir, corpus, options, out):
    """``effdepth.distributed measure`` under torchrun with two gloo ranks on the CPU."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "effdepth.distributed"]
    flags = ["--backend", "gloo", "--device", "cpu", "--out", str(out), "--no-progress", "--no-figures"]
    return subprocess.run(
        [sys.executable, *command, "measure", str(model_dir), "--corpus", corpus, *options, *flags],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def test_torchrun_two_processes_match_one(model_dir, corpus, tmp_path):
    out = tmp_path / "out"
    proc = torchrun_measure(model_dir, corpus, OPTIONS, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 processes" in proc.stdout
    distributed = effdepth.load(out)
    assert distributed.provenance["run"]["distributed"] == {
        "world_size": 2,
        "backend": "gloo",
        "shares": [[0, 4], [4, 7]],
    }
    single = effdepth.measure(
        str(model_dir),
        corpus,
        seq_len=16,
        num_seqs=7,
        batch_size=2,
        bootstrap=50,
        views="default,drop-pos0,top1pc",
        progress=False,
        pooling="none",
    )
    _same(single, distributed)


def test_torchrun_passage_mode_gives_one_processs_numbers_exactly(model_dir, corpus, tmp_path):
    """The default: each rank pools its batches of passages, rank 0 gathers and analyses."""
    out = tmp_path / "passages"
    options = [
        "--seq-len",
        "16",
        "--num-seqs",
        "9",
        "--batch-size",
        "2",
        "--bootstrap",
        "50",
        "--views",
        "default,drop-pos0,top1pc",
    ]
    proc = torchrun_measure(model_dir, corpus, options, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    distributed = effdepth.load(out)
    assert distributed.passages and distributed.provenance["run"]["distributed"]["batches"] == [3, 2]
    assert (out / "pooled" / "default.npy").is_file() and not (out / ".effdepth-shards").exists()
    single = effdepth.measure(
        str(model_dir),
        corpus,
        seq_len=16,
        num_seqs=9,
        batch_size=2,
        bootstrap=50,
        views="default,drop-pos0,top1pc",
        progress=False,
    )
    # The same batches as one process; only the thread count (OMP_NUM_THREADS=1 here) may move a last digit.
    for key in ("views", "similarities"):
        assert_close(distributed.to_dict()[key], single.to_dict()[key])
    assert_close(distributed.extras["confounds"], single.extras["confounds"])


def assert_close(a, b):
    if isinstance(a, dict):
        assert set(a) == set(b)
        for key in a:
            assert_close(a[key], b[key])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_close(x, y)
    elif isinstance(a, float):
        assert a == pytest.approx(b, rel=1e-12, abs=1e-15)
    else:
        assert a == b


@pytest.fixture
def one_process_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_in_process_group_of_one(one_process_group, model_dir, corpus):
    kwargs = dict(seq_len=16, num_seqs=5, batch_size=2, bootstrap=20, views="default,center")
    distributed = measure_distributed(
        Options.build(model=str(model_dir), corpus=corpus, **kwargs, pooling="none"), progress=False
    )
    _same(effdepth.measure(str(model_dir), corpus, progress=False, **kwargs, pooling="none"), distributed)
    with pytest.raises(effdepth.EffdepthError, match="exact is not supported"):
        measure_distributed(
            Options.build(model=str(model_dir), corpus=corpus, views="top1pc", pc_estimate="exact", pooling="none")
        )


def test_without_torchrun_a_one_line_error(monkeypatch, capsys, model_dir):
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert main(["measure", str(model_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not started by torchrun" in err and "\n" not in err
    assert main(["measure", "--pooling", "none", str(model_dir), "--device-map", "auto"]) == 2
    assert "--device-map does not combine" in capsys.readouterr().err
    with pytest.raises(effdepth.EffdepthError, match="no torch.distributed process group"):
        measure_distributed(Options.build(model=str(model_dir), pooling="none"))


def test_every_rank_fits_on_the_calibration_set_one_process_uses(one_process_group, model_dir, corpus):
    # 256-token sequences in batches of 4: the calibration set is the first 8 sequences (2 batches,
    # at least 8 sequences and 2,048 tokens), not the first batch.
    kwargs = dict(
        seq_len=256, num_seqs=9, batch_size=4, bootstrap=20, views="top1pc", similarity="frobenius", surrogate_seqs=0
    )
    distributed = measure_distributed(
        Options.build(model=str(model_dir), corpus=corpus, **kwargs, pooling="none"), progress=False
    )
    single = effdepth.measure(str(model_dir), corpus, progress=False, **kwargs, pooling="none")
    _same(single, distributed)
    assert distributed.config["pc_estimate"]["calibration"] == {"sequences": 8, "tokens": 2048}


LEAVES_NO_GLOO_THREADS = """
import os, socket, sys, time
from effdepth.distributed import process_group

def threads():  # torch names its gloo and store threads (gloo_tcp_loop, pt_gloo_runloop, pt_tcpstore_uv)
    names = [open(os.path.join("/proc/self/task", t, "comm")).read() for t in os.listdir("/proc/self/task")]
    return sum(n.startswith(("gloo", "pt_")) for n in names)

before = threads()
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
with process_group("gloo"):
    {inside}
    during = threads()
deadline = time.monotonic() + 10  # a stopping thread may take a moment to exit on a loaded machine
while (after := threads()) != before and time.monotonic() < deadline:
    time.sleep(0.05)
print(before, during, after)
sys.exit(0 if during > before and after == before else 1)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
@pytest.mark.parametrize("inside", ["import torch._dynamo", "measure"])
def test_leaving_the_group_stops_its_threads(inside, model_dir, corpus):
    # A group that outlives destroy_process_group keeps gloo's workers running into interpreter
    # shutdown, where one of them can abort the process (and torchrun then stops every rank).
    # Loading a model in transformers imports torch._dynamo, which used to keep the group alive;
    # a whole measurement covers whatever else loading imports.
    if inside == "measure":
        inside = (
            f"import effdepth; effdepth.measure({str(model_dir)!r}, {corpus!r}, seq_len=16, num_seqs=2, "
            "batch_size=2, bootstrap=0, views='default,top1pc', progress=False, pooling='none')"
        )
    script = LEAVES_NO_GLOO_THREADS.format(inside=inside)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"},
    )
    assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])


def test_a_failed_write_is_one_line_and_every_ranks_error(monkeypatch, capsys, model_dir, corpus, tmp_path):
    import socket

    import effdepth.cli.measure as cli_measure

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for name, value in dict(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    ).items():
        monkeypatch.setenv(name, value)

    def fail(*args, **kwargs):
        raise effdepth.EffdepthError(
            f"cannot write {tmp_path / 'out' / 'result.json'}: No space left on device; choose another output folder"
        )

    monkeypatch.setattr(cli_measure, "write_result", fail)
    code = main(
        [
            "measure",
            "--pooling",
            "none",
            str(model_dir),
            "--corpus",
            corpus,
            "--seq-len",
            "16",
            "--num-seqs",
            "2",
            "--batch-size",
            "2",
            "--bootstrap",
            "0",
            "--backend",
            "gloo",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out"),
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("effdepth: error: [rank 0] cannot write") and "\n" not in err
