"""Interrupt and resume, memory faults, safe loading, determinism (CPU-testable parts)."""

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch

import effdepth
from effdepth.cli import main
from effdepth.data import byte_tokenizer
from effdepth.errors import EffdepthError
from effdepth.models.tiny import tiny_model

SLOW_RUN = textwrap.dedent(
    """
    import importlib, os, sys, time, pathlib
    m = importlib.import_module("effdepth.measurement.pooling")
    pause = float(os.environ.get("EFFDEPTH_TEST_PAUSE", "0.3"))
    at = int(os.environ["EFFDEPTH_TEST_AT"])
    real = m.decoder_forward
    calls = [0]
    def slow(*a, **k):
        calls[0] += 1
        if calls[0] == at:
            pathlib.Path(sys.argv[1]).write_text(str(at))
        time.sleep(pause if calls[0] >= at else 0.3)
        return real(*a, **k)
    m.decoder_forward = slow
    from effdepth.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("c") / "c.txt"
    p.write_text("Friends, Romans, countrymen, lend me your ears. " * 300)
    return p


#: Forward passes before the measured ones in :func:`argv`'s runs: none (every view is fitted after the
#: forward passes, on the stored samples).
FIT_PASSES = 0


def argv(model_dir, corpus, out, *extra):
    return [
        "measure",
        "--pooling",
        "none",
        str(model_dir),
        "--corpus",
        str(corpus),
        "--seq-len",
        "256",
        "--num-seqs",
        "14",
        "--batch-size",
        "1",
        "--bootstrap",
        "100",
        "--views",
        "default,top1pc",
        "--out",
        str(out),
        "--no-progress",
        "--no-figures",
        *extra,
    ]


def start_slow(tmp_path, args, pause=0.3, at=FIT_PASSES + 3):
    """The run in a subprocess, returned once it reaches forward pass ``at`` (by default the third
    measured batch), every pass from there on taking ``pause`` seconds."""
    marker = tmp_path / "marker"
    env = dict(os.environ, PYTHONUNBUFFERED="1", EFFDEPTH_TEST_PAUSE=str(pause), EFFDEPTH_TEST_AT=str(at))
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_RUN, str(marker), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline
        time.sleep(0.05)
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_saves_statistics_and_resume_gives_the_same_numbers(model_dir, corpus, tmp_path, sig, capsys):
    out = tmp_path / "run"
    proc = start_slow(tmp_path, argv(model_dir, corpus, out))
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err
    notice, error = err.strip().splitlines()
    assert "stopping after this batch" in notice and "--resume" in error
    assert (out / "checkpoint" / "state.json").is_file() and not (out / "result.json").exists()

    assert main(argv(model_dir, corpus, out, "--resume", str(out))) == 0
    resumed = json.loads((out / "result.json").read_text())
    assert resumed["provenance"]["run"]["resumed_from"] > 0
    assert not (out / "checkpoint").exists()

    fresh = tmp_path / "fresh"
    assert main(argv(model_dir, corpus, fresh)) == 0
    whole = json.loads((fresh / "result.json").read_text())
    for view in ("default", "top1pc"):
        a, b = resumed["views"][view], whole["views"][view]
        assert a["deff"] == pytest.approx(b["deff"], rel=1e-6)
        assert a["ci"]["deff"] == pytest.approx(b["ci"]["deff"], rel=1e-6)


def test_resume_from_any_folder_however_the_paths_were_typed(model_dir, corpus, tmp_path, monkeypatch):
    # Local paths are saved absolute and compared resolved: `./m` is `m`, and the run can be
    # continued from another folder with --resume alone.
    monkeypatch.chdir(tmp_path)
    model, text = os.path.relpath(model_dir), os.path.relpath(corpus)
    for resume in ("typed again with ./", "alone, from another folder"):
        proc = start_slow(tmp_path, argv(model, text, "run"))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 128 + signal.SIGINT, err
        if resume.startswith("typed"):
            code = main(argv(os.path.join(".", model), os.path.join(".", text), "run", "--resume", "run"))
        else:
            monkeypatch.chdir("/")
            code = main(["measure", "--resume", str(tmp_path / "run"), "--no-progress", "--no-figures"])
        assert code == 0, resume
        assert json.loads((tmp_path / "run" / "result.json").read_text())["provenance"]["run"]["resumed_from"] > 0
        (tmp_path / "run" / "result.json").unlink()
        (tmp_path / "marker").unlink()  # start_slow waits for the next run's own


def test_an_abbreviated_flag_is_refused_not_ignored(model_dir, corpus, tmp_path, capsys):
    assert main(argv(model_dir, corpus, tmp_path / "x", "--num-seq", "3")) == 2
    assert "unrecognized arguments: --num-seq" in capsys.readouterr().err


def test_resume_dir_alone_or_the_printed_command_continues_the_run(model_dir, corpus, tmp_path):
    import shlex

    out = tmp_path / "run"
    proc = start_slow(tmp_path, argv(model_dir, corpus, out, "--seq-len", "300"))
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    command = err.strip().splitlines()[-1].split("continue with: ", 1)[1]
    assert command.startswith("effdepth measure ") and "--seq-len 300" in command and f"--resume {out}" in command

    started = time.monotonic()
    assert main(["measure", "--resume", str(out), "--seq-len", "16", "--no-progress"]) == 2
    assert time.monotonic() - started < 10, "a mismatch must be found before the model loads"

    saved = json.loads((out / "checkpoint" / "state.json").read_text())["run"]
    assert saved["flags"]["seq_len"] == 300 and saved["flags"]["model"] == str(model_dir)
    assert main(["measure", "--resume", str(out), "--no-progress", "--no-figures"]) == 0
    resumed = json.loads((out / "result.json").read_text())
    assert resumed["config"]["seq_len"] == 300 and resumed["provenance"]["run"]["resumed_from"] > 0

    fresh = tmp_path / "fresh"
    assert main([*shlex.split(command)[1:-2], "--out", str(fresh), "--no-progress", "--no-figures"]) == 0
    whole = json.loads((fresh / "result.json").read_text())
    assert resumed["views"]["default"]["deff"] == pytest.approx(whole["views"]["default"]["deff"], rel=1e-9)


def test_a_second_signal_stops_a_stuck_batch_at_once(model_dir, corpus, tmp_path):
    out = tmp_path / "run"
    proc = start_slow(tmp_path, argv(model_dir, corpus, out, "--checkpoint-every", "1000"), pause=120)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30, "the second signal waited for the batch"
    assert proc.returncode == 143, err
    assert (out / "checkpoint" / "state.json").is_file() and not (out / "result.json").exists()
    assert [p.name for p in out.rglob("*.tmp")] == []
    assert main(argv(model_dir, corpus, out, "--resume", str(out))) == 0


def test_sigkill_leaves_nothing_half_written_and_the_next_run_resumes(model_dir, corpus, tmp_path):
    out = tmp_path / "run"
    proc = start_slow(tmp_path, argv(model_dir, corpus, out, "--checkpoint-every", "0"))
    time.sleep(0.5)
    proc.kill()
    proc.communicate(timeout=60)
    assert not (out / "result.json").exists()
    # only complete files: a checkpoint that verifies, no stray temporaries
    assert [p.name for p in out.rglob("*.tmp")] == []
    assert main(argv(model_dir, corpus, out, "--resume", str(out))) == 0
    assert (out / "result.json").is_file()


def test_resume_refuses_a_different_run(model_dir, corpus, tmp_path):
    out = tmp_path / "run"
    proc = start_slow(tmp_path, argv(model_dir, corpus, out))
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    args = argv(model_dir, corpus, out, "--resume", str(out))
    args[args.index("--num-seqs") + 1] = "10"
    assert main(args) == 2


def test_resume_without_checkpoint_is_a_clear_error(model_dir, corpus, tmp_path, capsys):
    assert main(argv(model_dir, corpus, tmp_path / "x", "--resume", str(tmp_path / "x"))) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_out_of_memory_halves_the_batch_and_keeps_the_numbers(monkeypatch):
    m = importlib.import_module("effdepth.measurement.pooling")
    model = tiny_model("llama")
    ids = torch.randint(0, 256, (8, 12), generator=torch.Generator().manual_seed(0))
    expected = effdepth.measure(model, ids, batch_size=8, bootstrap=50, progress=False, pooling="none")
    real = m.decoder_forward

    def picky(model_, arch, batch_ids, mask):
        if batch_ids.shape[0] > 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model_, arch, batch_ids, mask)

    monkeypatch.setattr(m, "decoder_forward", picky)
    got = effdepth.measure(model, ids, batch_size=8, bootstrap=50, progress=False, pooling="none")
    assert got.provenance["run"]["batch_size_used"] == 2 and got.provenance["run"]["oom_retries"] == 2
    assert got.default.deff == pytest.approx(expected.default.deff, rel=1e-6)
    assert got.default.ci["deff"] == pytest.approx(expected.default.ci["deff"], rel=1e-6)

    monkeypatch.setattr(m, "decoder_forward", lambda *a: (_ for _ in ()).throw(RuntimeError("CUDA out of memory")))
    with pytest.raises(EffdepthError, match="out of memory on a single passage of 12 tokens"):
        effdepth.measure(model, ids, batch_size=4, bootstrap=0, progress=False, pooling="none")


def test_pickle_weights_are_refused_unless_allowed(tmp_path):
    d = tmp_path / "pickled"
    model = tiny_model("gpt2")
    model.config.save_pretrained(d)  # transformers 5 always writes safetensors: write the pickle by hand
    torch.save(model.state_dict(), d / "pytorch_model.bin")
    byte_tokenizer().save_pretrained(d)
    assert not list(d.glob("*.safetensors"))
    texts = ["A horse, a horse, my kingdom for a horse. " * 30]
    with pytest.raises(EffdepthError, match="pickle weights.*--allow-pickle"):
        effdepth.measure(str(d), texts, seq_len=16, num_seqs=4, progress=False, pooling="none")
    r = effdepth.measure(
        str(d), texts, seq_len=16, num_seqs=4, bootstrap=0, allow_pickle=True, progress=False, pooling="none"
    )
    assert r.default.num_states == 3


@pytest.mark.parametrize("bad", ["../../x", "a/../../b", "/abs/path/model", "owner/name/extra"])
def test_ids_that_could_escape_are_rejected(bad):
    with pytest.raises(EffdepthError):
        effdepth.measure(bad, progress=False, pooling="none")


def test_trust_remote_code_and_pickle_are_off_by_default():
    from effdepth.options import LoadOptions

    assert LoadOptions().trust_remote_code is False and LoadOptions().allow_pickle is False


def test_float16_accumulates_in_float64():
    model = tiny_model("llama")
    ids = torch.randint(0, 256, (4, 8), generator=torch.Generator().manual_seed(0))
    r16 = effdepth.measure(model, ids, dtype="float16", bootstrap=0, progress=False, pooling="none")
    r32 = effdepth.measure(model.float(), ids, dtype="float32", bootstrap=0, progress=False, pooling="none")
    assert r16.provenance["model"]["dtype"] == "float16"
    assert r16.default.deff == pytest.approx(r32.default.deff, rel=1e-2)
