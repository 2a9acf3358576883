"""Sweeps: keyed, atomic, resumable results; failures recorded; summary, figure and report."""

import json

import pandas as pd
import pytest

import effdepth
import effdepth.scale.sweep as sweep_module
from effdepth.cli import main
from effdepth.errors import EffdepthError
from effdepth.options import Options
from effdepth.scale.suites import SuiteModel
from effdepth.scale.sweep import COLUMNS, Job, job_folder, job_options, make_jobs, slug, sweep

SMALL = {"seq_len": 16, "num_seqs": 4, "bootstrap": 20, "batch_size": 4}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("corpus") / "text.txt"
    p.write_text("Now is the winter of our discontent made glorious summer by this sun of York. " * 60)
    return str(p)


@pytest.fixture(scope="module")
def broken_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("broken")
    (d / "config.json").write_text("{this is not json")
    return str(d)


@pytest.fixture
def counted(monkeypatch):
    """Counts the models actually measured (the real measurement still runs)."""
    calls = []
    real = sweep_module.measure_job

    def measure_job(payload):
        calls.append(payload["id"])
        return real(payload)

    monkeypatch.setattr(sweep_module, "measure_job", measure_job)
    return calls


@pytest.fixture(scope="module")
def finished(tmp_path_factory, corpus):
    """A finished two-model sweep (with its figure and report)."""
    out = tmp_path_factory.mktemp("sweep")
    outcome = sweep(["tiny:llama", "tiny:gpt2"], out, corpus=corpus, views="default,drop-pos0", **SMALL, pooling="none")
    return out, outcome


def test_results_are_keyed_by_model_revision_version_and_config(finished, corpus):
    out, outcome = finished
    assert outcome.counts == {"ok": 2}
    jobs = make_jobs(
        ["tiny:llama", "tiny:gpt2"],
        job_options(Options.build(corpus=corpus, views="default,drop-pos0", **SMALL, pooling="none")),
    )
    for job in jobs:
        folder = job_folder(out, job)
        assert folder.parent.parent == out / slug(job.model.id)
        assert folder.name == f"effdepth-{effdepth.__version__}-{job.digest[:12]}"
        result = effdepth.load(folder)
        assert result.provenance["model"]["id"] == job.model.id
        assert result.provenance["job"]["key"] == job.key
        assert json.loads((folder / "job.json").read_text())["options"]["seq_len"] == 16


def test_summary_tables_figure_and_report(finished):
    out, outcome = finished
    for name in ("summary.csv", "summary.parquet", "suite.png", "suite.pdf", "report.html"):
        assert (out / name).is_file(), name
    table = pd.read_parquet(out / "summary.parquet")
    assert list(table.columns) == list(COLUMNS)
    assert len(table) == 8  # two models x two views x two estimators (cka brings cka-debiased)
    assert set(table["similarity"]) == {"cka", "cka-debiased"}
    assert set(table["view"]) == {"default", "drop-pos0"}
    row = table[(table.model == "tiny:llama") & (table.view == "default") & (table.similarity == "cka")].iloc[0]
    result = effdepth.load(out / row.key)
    assert row.D_eff == pytest.approx(result.default.deff) and row.L == 3 and row.status == "ok"
    assert row.D_eff_lo <= row.D_eff <= row.D_eff_hi
    assert row.F_L == pytest.approx(1.5) and row.ratio == pytest.approx(row.D_eff / 1.5)
    assert row.F_L - row.D_eff == pytest.approx(row.initial_state + row.size_imbalance + row.correlated_updates)
    csv = pd.read_csv(out / "summary.csv")
    assert csv["D_eff"].tolist() == pytest.approx(table["D_eff"].tolist())
    assert "tiny:gpt2" in (out / "report.html").read_text()


def test_rerun_skips_finished_work(finished, corpus, counted):
    out, first = finished
    again = sweep(
        ["tiny:llama", "tiny:gpt2"],
        out,
        corpus=corpus,
        views="default,drop-pos0",
        figures=False,
        report=False,
        **SMALL,
        pooling="none",
    )
    assert counted == [] and again.counts == {"done": 2}
    assert [r["D_eff"] for r in again.rows] == [r["D_eff"] for r in first.rows]


def test_other_options_or_version_are_not_reused(finished, corpus, counted, monkeypatch):
    out, _ = finished
    sweep(
        ["tiny:gpt2"],
        out,
        corpus=corpus,
        views="default,drop-pos0",
        figures=False,
        report=False,
        **{**SMALL, "seq_len": 12},
        pooling="none",
    )
    assert counted == ["tiny:gpt2"]
    # Batch size and device do not change the numbers: not part of the key.
    sweep(
        ["tiny:gpt2"],
        out,
        corpus=corpus,
        views="default,drop-pos0",
        figures=False,
        report=False,
        **{**SMALL, "batch_size": 1},
        pooling="none",
    )
    assert counted == ["tiny:gpt2"]
    monkeypatch.setattr(sweep_module.jobs, "__version__", "99.0")
    monkeypatch.setattr(effdepth, "__version__", "99.0")
    job = make_jobs(["tiny:gpt2"], job_options(Options.build(corpus=corpus, **SMALL, pooling="none")))[0]
    assert "effdepth-99.0-" in job.key


def test_interrupted_sweep_finishes_without_recomputing(tmp_path, corpus, monkeypatch):
    """Killed during the second model: the first result stays, the rerun measures only the second."""
    real = sweep_module.measure_job
    calls = []

    def killed_at_second(payload):
        calls.append(payload["id"])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(payload)

    monkeypatch.setattr(sweep_module, "measure_job", killed_at_second)
    with pytest.raises(KeyboardInterrupt):
        sweep(["tiny:qwen3", "tiny:gpt_neox"], tmp_path, corpus=corpus, **SMALL, pooling="none")
    assert len(list(tmp_path.rglob("result.json"))) == 1
    assert not (tmp_path / "summary.csv").exists()

    calls.clear()
    monkeypatch.setattr(sweep_module, "measure_job", lambda p: calls.append(p["id"]) or real(p))
    outcome = sweep(
        ["tiny:qwen3", "tiny:gpt_neox"], tmp_path, corpus=corpus, figures=False, report=False, **SMALL, pooling="none"
    )
    assert calls == ["tiny:gpt_neox"]
    assert outcome.counts == {"done": 1, "ok": 1}
    assert {r["status"] for r in outcome.rows} == {"ok"} and len({r["model"] for r in outcome.rows}) == 2


def test_a_model_interrupted_midway_continues_from_its_partial_statistics(tmp_path, corpus, monkeypatch):
    """SIGTERM after the first batch: statistics saved; the rerun resumes there instead of starting over."""
    import os
    import signal

    from effdepth.measurement import run as passage_measure
    from effdepth.measurement.checkpoint import MeasurementInterrupted

    real = passage_measure.pooled_batches

    def terminate_after_the_first_batch(*args, **kwargs):
        for i, item in enumerate(real(*args, **kwargs)):
            if i == 0:
                os.kill(os.getpid(), signal.SIGTERM)  # caught by measure: it stops after this batch
            yield item

    options = {**SMALL, "batch_size": 2}
    monkeypatch.setattr(passage_measure, "pooled_batches", terminate_after_the_first_batch)
    with pytest.raises(MeasurementInterrupted, match="rerun the same command"):
        sweep(["tiny:gpt2"], tmp_path, corpus=corpus, **options, pooling="none")
    assert list(tmp_path.rglob("checkpoint/state.json")) and not list(tmp_path.rglob("result.json"))

    monkeypatch.setattr(passage_measure, "pooled_batches", real)
    outcome = sweep(["tiny:gpt2"], tmp_path, corpus=corpus, figures=False, report=False, **options, pooling="none")
    result = effdepth.load(tmp_path / outcome.rows[0]["key"])
    assert result.provenance["run"]["resumed_from"] == 2 and result.default.sequences == 4
    assert not list(tmp_path.rglob("checkpoint/state.json"))
    fresh = sweep(
        ["tiny:gpt2"], tmp_path / "fresh", corpus=corpus, figures=False, report=False, **options, pooling="none"
    )
    assert fresh.rows[0]["D_eff"] == pytest.approx(outcome.rows[0]["D_eff"], rel=1e-12)


def test_a_measurement_interruption_is_not_a_model_failure(tmp_path, corpus, monkeypatch):
    from effdepth.measurement.checkpoint import MeasurementInterrupted

    def interrupted(payload):
        raise MeasurementInterrupted("interrupted by SIGTERM after 2 of 4 sequences")

    monkeypatch.setattr(sweep_module, "measure_job", interrupted)
    with pytest.raises(MeasurementInterrupted, match="rerun the same command"):
        sweep(["tiny:gpt2"], tmp_path, corpus=corpus, **SMALL, pooling="none")
    assert not list(tmp_path.rglob("error.json"))


def test_a_broken_model_is_recorded_and_the_rest_complete(tmp_path, corpus, broken_model, counted):
    outcome = sweep([broken_model, "tiny:gpt2"], tmp_path, corpus=corpus, report=False, **SMALL, pooling="none")
    assert outcome.counts == {"error": 1, "ok": 1}
    errors = list(tmp_path.rglob("error.json"))
    assert len(errors) == 1
    error = json.loads(errors[0].read_text())
    assert error["model"] == broken_model and "\n" not in error["error"] and error["error"]
    rows = {r["model"]: r for r in outcome.rows}
    assert rows[broken_model]["status"] == "error" and rows[broken_model]["D_eff"] is None
    assert rows["tiny:gpt2"]["status"] == "ok"
    assert (tmp_path / "suite.png").is_file()
    # A rerun retries only the failure.
    counted.clear()
    sweep([broken_model, "tiny:gpt2"], tmp_path, corpus=corpus, figures=False, report=False, **SMALL, pooling="none")
    assert counted == [broken_model]


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_the_report_lists_the_models_a_sweep_could_not_measure(tmp_path, corpus, broken_model, fmt):
    sweep(
        [broken_model, "tiny:gpt2"],
        tmp_path,
        corpus=corpus,
        figures=False,
        report=(fmt == "html"),
        **SMALL,
        pooling="none",
    )
    if fmt == "md":
        from effdepth.report.build import write_report

        write_report([tmp_path], tmp_path / "report.md")
    text = (tmp_path / f"report.{fmt}").read_text()
    assert "Not measured" in text and "1 model(s) the sweep could not measure" in text
    assert broken_model.replace("_", "\\_") in text or broken_model in text


@pytest.mark.parametrize("bad", ["../../etc", "/abs/path", "a/../../b", "..", "x" * 300, "tiny:../x"])
def test_ids_and_revisions_never_leave_the_output_folder(tmp_path, bad):
    job = Job(SuiteModel(bad), {}, revision=None, tag=bad)
    folder = job_folder(tmp_path, job)
    assert tmp_path.resolve() in folder.parents
    assert ".." not in job.key.split("/")


def test_bad_revisions_are_refused_before_any_work():
    with pytest.raises(EffdepthError, match="malformed revision"):
        make_jobs(["EleutherAI/pythia-70m"], {}, revision="../main")


def test_tiny_suite_from_the_command_line_offline(tmp_path, capsys):
    """The whole shipped `tiny` suite on the built-in Shakespeare, with the report."""
    code = main(
        [
            "sweep",
            "--pooling",
            "none",
            "tiny",
            "--out",
            str(tmp_path),
            "--seq-len",
            "16",
            "--num-seqs",
            "4",
            "--bootstrap",
            "10",
            "--no-progress",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "tiny:gemma2" in out and "5 measured" in out
    table = pd.read_csv(tmp_path / "summary.csv")
    assert table.model.nunique() == 5 and (table.status == "ok").all()
    assert (tmp_path / "report.html").is_file() and (tmp_path / "suite.pdf").is_file()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["sweep", "--pooling", "none", "tiny:gpt2", "--out", "{out}", "--seq-len", "1"],
            "--seq-len must be at least 2",
        ),
        (["sweep", "--pooling", "none", "not an id", "--out", "{out}"], "is not a suite"),
        (
            ["sweep", "--pooling", "none", "EleutherAI/pythia-70m", "--revision", "../x", "--out", "{out}"],
            "malformed revision",
        ),
        (["sweep", "--pooling", "none", "tiny:gpt2", "--out", "{out}", "--views", "bogus"], "unknown view"),
        (["sweep", "--pooling", "none", "tiny:gpt2", "--out", "{out}", "--gpus-per-task", "1"], "need --executor ray"),
        (["sweep", "--pooling", "none", "tiny:gpt2"], "--out"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(tmp_path, capsys, argv, message):
    code = main([a.replace("{out}", str(tmp_path / "o")) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err and "\n" not in err
    assert not list(tmp_path.rglob("job.json"))
    assert not (tmp_path / "o").exists()  # no empty output folder left behind


class _ReaderLeaves:
    """stdout whose reader quits after the first line (`effdepth sweep ... | head -1`)."""

    def __init__(self):
        self.lines = 0

    def write(self, text):
        if self.lines:
            raise BrokenPipeError(32, "Broken pipe")
        self.lines += text.count("\n")
        return len(text)

    def flush(self):
        if self.lines > 1:
            raise BrokenPipeError(32, "Broken pipe")

    def fileno(self):
        raise OSError("not a real file")


def test_a_reader_that_leaves_stops_the_lines_not_the_sweep(tmp_path, corpus, monkeypatch):
    monkeypatch.setattr("sys.stdout", _ReaderLeaves())
    code = main(
        [
            "sweep",
            "--pooling",
            "none",
            "tiny:llama",
            "tiny:gpt2",
            "--out",
            str(tmp_path),
            "--corpus",
            corpus,
            "--seq-len",
            "16",
            "--num-seqs",
            "4",
            "--bootstrap",
            "10",
            "--no-progress",
            "--no-figures",
        ]
    )
    assert code == 0
    table = pd.read_csv(tmp_path / "summary.csv")
    assert table.model.nunique() == 2 and (table.status == "ok").all()
