"""torchrun (gloo, CPU): the same numbers as one process on the same passages, for their means and for their
tokens as samples."""

import os
import subprocess
import sys

import pytest

import effdepth
from effdepth.options import Options
from effdepth.scale.distributed import measure_distributed
from effdepth.scale.distributed.__main__ import main

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
    "--tokens-per-passage",
    "5",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "text.txt"
    p.write_text("Friends, Romans, countrymen, lend me your ears; I come to bury Caesar, not to praise him. " * 40)
    return str(p)


def torchrun_measure(model_dir, corpus, options, out):
    """``effdepth.scale.distributed measure`` under torchrun with two gloo ranks on the CPU."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    command = [
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "effdepth.scale.distributed",
    ]
    flags = ["--backend", "gloo", "--device", "cpu", "--out", str(out), "--no-progress", "--no-figures"]
    return subprocess.run(
        [sys.executable, *command, "measure", str(model_dir), "--corpus", corpus, *options, *flags],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


def test_torchrun_token_samples_give_one_processs_numbers(model_dir, corpus, tmp_path):
    """--pooling none: each rank samples its passages' tokens (drawn by the passage's index, not the rank)."""
    out = tmp_path / "out"
    proc = torchrun_measure(model_dir, corpus, OPTIONS, out)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 processes" in proc.stdout
    distributed = effdepth.load(out)
    assert distributed.token_samples and distributed.provenance["run"]["distributed"]["batches"] == [2, 2]
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
        tokens_per_passage=5,
    )
    for key in ("views", "similarities"):
        assert_close(distributed.to_dict()[key], single.to_dict()[key])
    assert distributed.config["reduction"] == single.config["reduction"]


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


def test_in_process_group_of_one(one_process_group, model_dir, corpus, tmp_path):
    kwargs = dict(seq_len=16, num_seqs=5, batch_size=2, bootstrap=20, views="default,top1pc", pooling="none")
    distributed = measure_distributed(
        Options.build(model=str(model_dir), corpus=corpus, **kwargs), progress=False, folder=tmp_path
    )
    single = effdepth.measure(str(model_dir), corpus, progress=False, **kwargs)
    for key in ("views", "similarities"):
        assert_close(distributed.to_dict()[key], single.to_dict()[key])
    with pytest.raises(effdepth.EffdepthError, match="pass folder="):
        measure_distributed(Options.build(model=str(model_dir), corpus=corpus))


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


LEAVES_NO_GLOO_THREADS = """
import os, socket, sys, time
from effdepth.scale.distributed import process_group

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
            f"import effdepth; effdepth.measure({str(model_dir)!r}, {corpus!r}, seq_len=16, num_seqs=4, "
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

    import effdepth.report.plain as plain

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

    monkeypatch.setattr(plain, "write_result", fail)
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
            "4",
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
