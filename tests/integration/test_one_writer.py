"""One writer per output folder: a second run on the same --out refuses in one line, a dead run's hold is taken over."""

import json
import os
import socket
import subprocess
import sys

import pytest

import effdepth
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.models.tiny import tiny_model
from effdepth.results.files import WRITER, one_writer


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny") / "tiny-llama"
    tiny_model("llama").save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    (folder / "corpus.txt").write_text("Now is the winter of our discontent made glorious summer. " * 200)
    return folder


def measure_argv(model_dir, out, passages: int) -> list:
    return [
        "measure",
        str(model_dir),
        "--corpus",
        str(model_dir / "corpus.txt"),
        "--seq-len",
        "32",
        "--num-seqs",
        str(passages),
        "--out",
        str(out),
        "--no-progress",
    ]


def test_two_runs_started_at_once_on_one_out_end_with_one_result_and_one_refusal(model_dir, tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = {
        n: subprocess.Popen(
            [sys.executable, "-m", "effdepth.cli", *measure_argv(model_dir, out, n)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for n in (32, 48)
    }
    ended = {n: (p.wait(timeout=300), *p.communicate()) for n, p in runs.items()}
    codes = sorted(code for code, _, _ in ended.values())
    assert codes == [0, 2], {n: (code, err[-2000:]) for n, (code, _, err) in ended.items()}
    (winner,) = [n for n, (code, _, _) in ended.items() if code == 0]
    (refused,) = [err.strip() for code, _, err in ended.values() if code == 2]
    assert len(refused.splitlines()) == 1 and "internal error" not in refused, refused
    assert f"pid {runs[winner].pid} on {socket.gethostname()}" in refused and "--out" in refused, refused
    result = effdepth.load(out)
    assert result.config["num_passages"] == winner and result.default.sequences == winner
    assert effdepth.analyse_saved(out, progress=False).default.deff == result.default.deff  # its own pooled vectors
    assert not (out / WRITER).exists() and not (out / "checkpoint").exists()


def test_a_run_refuses_a_folder_held_by_another_and_takes_over_a_dead_runs_hold(model_dir, tmp_path, capsys):
    out = tmp_path / "run"
    with one_writer(out):
        assert main(measure_argv(model_dir, out, 8)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"pid {os.getpid()} on {socket.gethostname()}" in err, err
    assert not (out / "result.json").exists()

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    (out / WRITER).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname()}))
    assert main(measure_argv(model_dir, out, 8)) == 0
    assert effdepth.load(out).default.sequences == 8 and not (out / WRITER).exists()


def test_a_sweep_and_a_reanalysis_refuse_a_folder_held_by_another_run(model_dir, tmp_path, capsys):
    from effdepth.scale.sweep import sweep

    out = tmp_path / "sweep"
    with one_writer(out), pytest.raises(effdepth.EffdepthError, match="being written by another effdepth run"):
        sweep(["tiny:gpt2"], out, corpus=["some text " * 30], seq_len=8, num_seqs=4, bootstrap=0, figures=False)
    assert list(out.iterdir()) == []  # nothing of the refused sweep (the hold itself gone with its holder)

    measured = tmp_path / "measured"
    assert main(measure_argv(model_dir, measured, 8)) == 0
    before = (measured / "result.json").read_bytes()
    with one_writer(measured):
        assert main(["analyse", str(measured), "--bootstrap", "50", "--no-progress"]) == 2
    assert "being written by another effdepth run" in capsys.readouterr().err
    assert (measured / "result.json").read_bytes() == before


@pytest.mark.parametrize("command", [["null"], ["prune-check"], ["intervene"], ["experiment", "carry"]])
def test_every_command_that_writes_a_folder_refuses_one_held_by_another_run(model_dir, tmp_path, capsys, command):
    out = tmp_path / "held"
    model = [] if command[0] == "experiment" else [str(model_dir)]
    with one_writer(out):
        assert main([*command, *model, "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "being written by another effdepth run" in err, err
    assert list(out.iterdir()) == []
