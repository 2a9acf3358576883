"""``effdepth sweep``: measure many models (and revisions), one result each, resumable.

Every (model, revision, configuration) is a keyed :class:`~effdepth.scale.sweep.jobs.Job` whose
``result.json`` is written atomically, so a rerun skips finished jobs and retries failed ones
(``error.json``); with the local executor an interrupted one continues from ``DIR/<key>/checkpoint/``.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> corpus = d / "text.txt"; _ = corpus.write_text("To be, or not to be, that is the question. " * 40)
>>> s = sweep(["tiny:gpt2"], d / "out", corpus=str(corpus), seq_len=16, num_seqs=4, bootstrap=0, report=False, figures=False)
>>> s.counts, s.rows[0]["model"], s.rows[0]["L"]
({'ok': 1}, 'tiny:gpt2', 3)
"""

from __future__ import annotations

import gc
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from effdepth.errors import EffdepthError, one_line
from effdepth.options import Options, RunOptions
from effdepth.options.groups import ensure_writable
from effdepth.results.files import one_writer, write_json_atomic
from effdepth.results.result import Result
from effdepth.results.version import __version__
from effdepth.scale.executors import make_executor
from effdepth.scale.suites import TINY_PREFIX
from effdepth.scale.sweep.jobs import (
    ERROR,
    JOB,
    Job,
    job_folder,
    job_options,
    make_jobs,
    saved_result,
    slug,
)
from effdepth.scale.sweep.tables import COLUMNS, result_rows, summary_rows, write_outputs, write_table

__all__ = [
    "COLUMNS",
    "ERROR",
    "JOB",
    "Job",
    "SweepOutcome",
    "check_cache",
    "count_statuses",
    "job_folder",
    "job_options",
    "make_jobs",
    "measure_job",
    "record",
    "result_rows",
    "run_job",
    "run_jobs",
    "saved_result",
    "slug",
    "summary_rows",
    "sweep",
    "unfinished",
    "write_outputs",
    "write_table",
]


# --------------------------------------------------------------------------- running one job (anywhere)


def run_job(payload: dict) -> dict:
    """Measure one job, here or on a Ray worker: ``{"status": "ok", "result": dict}`` or ``{"status":
    "error", "error": one line, "type": ...}``; an interruption (not a failure) propagates.
    """
    from effdepth.measurement.checkpoint import MeasurementInterrupted

    try:
        result = measure_job(payload)
    except MeasurementInterrupted:
        raise
    except EffdepthError as exc:
        return {"status": "error", "error": str(exc), "type": "EffdepthError"}
    except Exception as exc:  # a model we cannot run must not stop the others
        return {"status": "error", "error": f"{type(exc).__name__}: {one_line(exc)}", "type": type(exc).__name__}
    finally:
        _free_memory()
    return {"status": "ok", "result": result.to_dict(), "pooled": None if result.pooled is None else str(result.pooled)}


def measure_job(payload: dict) -> Result:
    """The measurement itself: tiny models are built here, others loaded by ``measure``."""
    from effdepth.measurement import run_measurement

    if payload.get("effdepth") != __version__:
        # The key promises numbers from the driver's version.
        raise EffdepthError(
            f"this worker has effdepth {__version__} but the driver {payload.get('effdepth')}; install the same version everywhere"
        )
    if payload.get("offline"):
        from effdepth.models.hub import set_offline

        set_offline(True)
    own = {"model": payload.get("source") or payload["id"], "revision": payload.get("revision")}
    if payload["id"].startswith(TINY_PREFIX):
        own.update(model=_tiny_model(payload["id"]), tokenizer=_byte_tokenizer())
    elif payload.get("tokenizer"):
        own["tokenizer"] = payload["tokenizer"]  # loaded as --tokenizer loads one
    options = Options.from_dict(payload["options"]).replace(**own)
    checkpoint = payload.get("checkpoint")
    resume = checkpoint is not None and (Path(checkpoint) / "state.json").is_file()

    def run(resume):
        return run_measurement(
            options,
            RunOptions(
                progress=bool(payload.get("progress")),
                checkpoint=checkpoint,
                resume=resume,
                checkpoint_every_s=payload.get("checkpoint_every_s", 30.0),
            ),
        )

    from effdepth.measurement.checkpoint import CheckpointMismatch, remove_checkpoint

    try:
        return run(resume)
    except CheckpointMismatch:
        # Partial statistics that no longer fit (the branch moved, a damaged file) are discarded.
        if not resume:
            raise

        remove_checkpoint(Path(checkpoint))
        return run(False)


def _tiny_model(model_id: str):
    from effdepth.models.tiny import tiny_model

    model = tiny_model(model_id[len(TINY_PREFIX) :])
    model.name_or_path = model_id  # recorded as the model's id in the result
    return model


@lru_cache(maxsize=1)
def _byte_tokenizer():
    # One instance for every tiny model: the corpus loader caches tokenized text per tokenizer.
    from effdepth.data import byte_tokenizer

    return byte_tokenizer()


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- the driver


@dataclass
class SweepOutcome:
    """What a sweep did: the summary rows, how many jobs ended how, the files written."""

    out: Path
    rows: list
    counts: dict
    files: list = field(default_factory=list)

    def table(self) -> str:
        """The first view of each job as a plain-text table."""
        from effdepth.scale.sweep.report import suite_summary_text

        return suite_summary_text(self.rows)


def sweep(
    models,
    out,
    options: Options | None = None,
    *,
    revision: str | None = None,
    executor="local",
    figures: bool = True,
    report: bool = True,
    run: RunOptions | None = None,
    log=None,
    **measure_options,
) -> SweepOutcome:
    """Measure every model of ``models`` (suite names, suite files, ids, ``tiny:TYPE``, folders) into ``out``.

    ``options`` or ``measure_options`` (:func:`effdepth.measure`'s keywords) say how to measure;
    ``executor`` is ``"local"``, ``"ray"`` or one from :func:`~effdepth.scale.executors.make_executor`;
    ``log`` (e.g. ``print``) receives one line per job. With the local executor, partial statistics are
    saved every ``run.checkpoint_every_s`` seconds and on SIGINT/SIGTERM, and a rerun continues them.

    >>> import tempfile
    >>> s = sweep(["tiny:gpt2"], tempfile.mkdtemp(), corpus=["some text " * 30], seq_len=8, num_seqs=4,
    ...           bootstrap=0, figures=False, report=False)
    >>> s.counts
    {'ok': 1}
    """
    options = Options.build(**measure_options) if options is None else options.replace(**measure_options)
    run = run or RunOptions(progress=False)
    jobs = make_jobs(models, job_options(options), revision=revision)
    ex = make_executor(executor) if isinstance(executor, str) else executor
    check_cache(jobs, job_options(options), models=models, revision=revision)
    with one_writer(out):  # one sweep writes a folder: its jobs' records, the summary and the report
        statuses = run_jobs(jobs, out, ex, run=run, log=log)
        rows = summary_rows(out, jobs)
        files = write_outputs(out, rows, jobs, figures=figures, report=report, log=log)
    return SweepOutcome(Path(out), rows, count_statuses(statuses), files)


def check_cache(jobs: list, opts: dict, *, models=(), revision: str | None = None) -> None:
    """Before the first forward pass: every hub model and revision, and the corpus, from the hub or the
    cache (:func:`effdepth.models.hub.check_available`: offline, what is missing is listed at once).

    >>> check_cache(make_jobs(["tiny:gpt2"], {"corpus": ["text"]}), {"corpus": ["text"]})
    """
    from effdepth.models import hub

    allow_pickle = bool(opts.get("allow_pickle"))
    corpus = opts.get("corpus")
    needs = [
        hub.Need("model", j.model.id, j.revision, allow_pickle)
        for j in jobs
        if j.source is None and not j.model.is_tiny and not Path(j.model.id).expanduser().exists()
    ]
    needs += hub.corpus_needs(corpus)
    specs = [str(m) for m in (models if isinstance(models, (list, tuple)) else [models]) if isinstance(m, (str, Path))]
    with_models = any(n.kind == "model" for n in needs)
    hub_corpus = [corpus] if hub.parse_hf_corpus(corpus) is not None else []
    fix = hub.fetch_command(
        specs if with_models else [],
        revisions=[revision] if revision else [],
        corpora=hub_corpus if with_models else hub_corpus or [hub.SHAKESPEARE],
        allow_pickle=allow_pickle,
    )
    hub.check_available(needs, fix=fix)


def run_jobs(jobs: list, out, executor, *, run: RunOptions | None = None, log=None) -> dict:
    """Run the unfinished jobs on ``executor``; write each outcome. Returns ``{key: status}``.

    Status: ``done`` (finished before), ``ok`` or ``error``.
    """
    from effdepth.measurement.checkpoint import MeasurementInterrupted, checkpoint_dir

    log = log or (lambda line: None)
    run = run or RunOptions(progress=False)
    out = ensure_writable(Path(out))
    statuses: dict = {}
    todo = unfinished(jobs, out, statuses, log)
    numbers = {job.key: f"[{i}/{len(todo)}]" for i, job in enumerate(todo, 1)}
    started: dict = {}

    def on_start(job):
        started[job.key] = time.perf_counter()
        log(f"{numbers[job.key]} {job.label}: measuring")

    def on_done(job, outcome):
        statuses[job.key] = record(out, job, outcome)
        seconds = time.perf_counter() - started.get(job.key, time.perf_counter())
        log(f"{numbers[job.key]} {job.label}: {_outcome_text(outcome)} ({seconds:.1f} s)")

    local = executor.shares_filesystem  # only then can a job keep partial statistics where a rerun finds them

    from effdepth.models.hub import is_offline

    offline = is_offline()  # Ray workers on other nodes do not inherit this process's switch

    def payload(job):
        checkpoint = str(checkpoint_dir(job_folder(out, job))) if local else None
        data = job.payload(
            checkpoint=checkpoint, progress=run.progress and local, checkpoint_every_s=run.checkpoint_every_s
        )
        return {**data, "offline": True} if offline else data

    items = [(job, payload(job)) for job in todo]
    try:
        executor.run(items, run_job, on_done, on_start)
    except MeasurementInterrupted as exc:
        finished = sum(s in ("done", "ok") for s in statuses.values())
        # measure's own advice (--resume DIR) is for one run; a sweep resumes by being rerun.
        what = str(exc).split(";")[0]
        kept = " (its partial statistics are kept)" if local else ""
        raise MeasurementInterrupted(
            f"{what}{kept}; {finished} of {len(jobs)} results are done in {out}: rerun the same command to continue",
            exc.exit_code - 128,
        ) from None
    return statuses


def unfinished(jobs: list, out, statuses: dict, log) -> list:
    """The jobs without a saved result, each folder's job.json written; the others go into ``statuses`` as done."""
    todo = []
    for job in jobs:
        folder = job_folder(out, job)
        if saved_result(folder) is not None:
            statuses[job.key] = "done"
            log(f"{job.label}: done already ({job.key})")
            continue
        write_json_atomic(folder / JOB, job.describe())
        todo.append(job)
    return todo


def record(out, job: Job, outcome: dict) -> str:
    """Write a job's outcome (result.json or error.json) into its folder; returns the status."""
    folder = job_folder(out, job)
    if outcome.get("status") == "ok":
        result = Result.from_dict(outcome["result"])
        result.provenance["job"] = job.describe()
        pooled = outcome.get("pooled")  # kept beside the result (for compare, analyse) when this machine has it
        result.pooled = Path(pooled) if pooled and Path(pooled).is_dir() else None
        result.save(folder)
        (folder / ERROR).unlink(missing_ok=True)
        return "ok"
    error = {
        "model": job.model.id,
        "revision": job.revision,
        "tag": job.tag,
        "error": " ".join(str(outcome.get("error")).split()),
        "type": outcome.get("type"),
        "effdepth": __version__,
        "key": job.key,
    }
    write_json_atomic(folder / ERROR, error)
    return "error"


def _outcome_text(outcome: dict) -> str:
    if outcome.get("status") != "ok":
        return f"failed: {outcome.get('error')}"
    result = Result.from_dict(outcome["result"])
    v = result.default
    ci = f" [{v.ci['ratio'][0]:.3f}, {v.ci['ratio'][1]:.3f}]" if v.ci else ""
    return f"D_eff {v.deff:.3f} / F_L {v.reference:.3f} = {v.ratio:.3f}{ci} ({result.primary_similarity}, view {v.name}, N = {v.num_states})"


def count_statuses(statuses: dict) -> dict:
    """``{status: how many}``.

    >>> count_statuses({"a": "ok", "b": "ok", "c": "error"})
    {'ok': 2, 'error': 1}
    """
    return dict(Counter(statuses.values()))
