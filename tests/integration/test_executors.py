"""Executors: local and Ray give the same numbers; Ray is optional and says how to get it."""

import os
import sys

import pytest

import effdepth
import effdepth.scale.sweep as sweep_module
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.scale.executors import LocalExecutor, RayExecutor, make_executor
from effdepth.scale.sweep import sweep

SMALL = {
    "seq_len": 16,
    "num_seqs": 4,
    "bootstrap": 20,
    "batch_size": 2,
    "views": "default,top1pc",
    "figures": False,
    "report": False,
}
CORPUS = ["But soft, what light through yonder window breaks? It is the east, and Juliet is the sun. " * 30]


def _die(payload):
    os._exit(3)  # a lost worker, as a node failure or an OOM kill looks to Ray


def test_local_executor_runs_in_order():
    seen = []
    LocalExecutor().run(
        [(1, 1), (2, 2)],
        lambda p: p * 10,
        lambda item, out: seen.append((item, out)),
        on_start=lambda i: seen.append(i),
    )
    assert seen == [1, (1, 10), 2, (2, 20)]


def test_executor_options_are_checked():
    with pytest.raises(EffdepthError, match="unknown executor 'dask'"):
        make_executor("dask")
    with pytest.raises(EffdepthError, match="need --executor ray"):
        make_executor("local", ray_address="ray://head:10001")
    with pytest.raises(EffdepthError, match="--gpus-per-task must be >= 0"):
        RayExecutor(gpus_per_task=-1)


def test_missing_ray_says_how_to_install_it(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(EffdepthError, match=r"pip install 'effdepth\[ray\]'"):
        make_executor("ray")
    assert main(["sweep", "tiny:gpt2", "--executor", "ray", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'effdepth[ray]'" in err and "\n" not in err
    assert not list(tmp_path.rglob("job.json"))


@pytest.fixture(scope="module")
def ray_session():
    ray = pytest.importorskip("ray")
    mp = pytest.MonkeyPatch()
    mp.setenv("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster: no token file to write
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    mp.undo()


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("broken")
    (d / "config.json").write_text('{"model_type": "no-such-architecture"}')
    return str(d)


def test_ray_gives_the_same_numbers_as_local(ray_session, tmp_path, broken_model, monkeypatch):
    models = ["tiny:llama", "tiny:gpt2", broken_model]
    local = sweep(models, tmp_path / "local", corpus=CORPUS, **SMALL)

    writers = []
    record = sweep_module.record
    monkeypatch.setattr(
        sweep_module, "record", lambda out, job, outcome: writers.append(os.getpid()) or record(out, job, outcome)
    )
    remote = sweep(models, tmp_path / "ray", corpus=CORPUS, executor="ray", **SMALL)

    assert local.counts == remote.counts == {"ok": 2, "error": 1}
    assert writers == [os.getpid()] * 3  # the driver alone writes
    assert ray_session.is_initialized()  # a session we did not start is left running
    assert [r["key"] for r in local.rows] == [r["key"] for r in remote.rows]
    for a, b in zip(local.rows, remote.rows):
        assert a["status"] == b["status"] and a["view"] == b["view"]
        for column in ("D_eff", "D_eff_lo", "D_eff_hi", "F_L", "R_init", "R_size", "R_matched", "correlated_updates"):
            assert (a[column] is None and b[column] is None) or b[column] == pytest.approx(
                a[column], rel=1e-5, abs=1e-9
            ), column
    errors = [r for r in remote.rows if r["status"] == "error"]
    assert errors[0]["model"] == broken_model and "no-such-architecture" in errors[0]["error"]
    result = effdepth.load(tmp_path / "ray" / local.rows[0]["key"])
    assert result.provenance["job"]["key"] == local.rows[0]["key"]

    # Idempotent: a second run (or a retried task) finds the results and redoes nothing but the failure.
    again = sweep(models, tmp_path / "ray", corpus=CORPUS, executor="ray", **SMALL)
    assert again.counts == {"done": 2, "error": 1}


def test_a_lost_worker_becomes_an_error_outcome(ray_session):
    outcomes = []
    RayExecutor(max_retries=0).run([("job", {})], _die, lambda item, out: outcomes.append((item, out)))
    ((item, out),) = outcomes
    assert item == "job" and out["status"] == "error" and out["error"].startswith("Ray task failed")
