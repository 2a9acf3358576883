"""``effdepth sweep``: measure many models (and revisions), one result each, resumable.

Every (model, revision, configuration) is a :class:`Job` with a key::

    <model slug>/<revision slug>/effdepth-<version>-<digest>

where the digest hashes the model id, revision, weights fingerprint (when
known) and every measurement option that can change the numbers (corpus,
sequence length and count, similarity, views, bootstrap, seed, dtype, ...;
not batch size or device, see :data:`UNHASHED_OPTIONS`).
``DIR/<key>/result.json`` is written atomically when a job finishes, so
rerunning the same command skips finished jobs, and a new effdepth version
or other options get new keys instead of stale numbers. A job that
fails leaves ``DIR/<key>/error.json`` (one line) and the others go on; it is
retried on the next run. With the local executor an interrupted model keeps
its partial statistics in ``DIR/<key>/checkpoint/`` and continues from them.

At the end: ``DIR/summary.csv`` and ``DIR/summary.parquet`` (one row per
result, view and similarity; ``F_N`` is the structural reference of the
row's N), ``DIR/suite.{png,pdf}`` and ``DIR/report.html``.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> corpus = d / "text.txt"; _ = corpus.write_text("To be, or not to be, that is the question. " * 40)
>>> s = sweep(["tiny:gpt2"], d / "out", corpus=str(corpus), seq_len=16, num_seqs=4, bootstrap=0, report=False, figures=False)
>>> s.counts, s.rows[0]["model"], s.rows[0]["L"]
({'ok': 1}, 'tiny:gpt2', 3)
"""

from __future__ import annotations

import csv
import gc
import hashlib
import io
import json
import math
import re
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from .version import __version__
from .errors import EffdepthError
from .executors import make_executor
from .options import UNHASHED_OPTIONS, Options, RunOptions
from .files import write_json_atomic
from .report.sources import ERROR_FILE, read_error
from .result import Result, load
from .revisions import check_revision, parse_revision, tokens_per_step_for
from .suites import TINY_PREFIX, SuiteModel, resolve_models

RESULT, ERROR, JOB = "result.json", ERROR_FILE, "job.json"

#: Options a sweep sets itself, per job.
MANAGED_OPTIONS = ("model", "revision", "tokenizer")

#: One row per (job, view, similarity). F_N = 2N/(N+1) is the structural reference of the row's N
#: (N = L, or L + 1 with the embedding; the paper's F_L when N = L).
COLUMNS = (
    "model", "family", "params", "revision", "step", "tokens_seen", "view", "similarity", "L", "N",
    "D_eff", "D_eff_lo", "D_eff_hi", "F_N", "ratio", "ratio_lo", "ratio_hi", "gap_pct", "gap_pct_lo", "gap_pct_hi",
    "R_init", "R_init_lo", "R_init_hi", "R_size", "R_size_lo", "R_size_hi", "R_matched", "R_matched_lo", "R_matched_hi",
    "R_structural_cal", "R_structural_cal_lo", "R_structural_cal_hi", "R_matched_cal", "R_matched_cal_lo", "R_matched_cal_hi",
    "initial_state", "initial_state_lo", "initial_state_hi", "size_imbalance", "size_imbalance_lo", "size_imbalance_hi",
    "correlated_updates", "correlated_updates_lo", "correlated_updates_hi",
    "updates_D_eff", "updates_D_eff_lo", "updates_D_eff_hi",
    "sequences", "tokens_measured", "status", "error", "key",
)
# (column, ViewResult value, ci key)
_METRICS = (
    ("D_eff", lambda v: v.deff, "deff"),
    ("ratio", lambda v: v.ratio, "ratio"),
    ("gap_pct", lambda v: v.gap_pct, "gap_pct"),
    ("R_init", lambda v: v.references["init"], "reference_init"),
    ("R_size", lambda v: v.references["size"], "reference_size"),
    ("R_matched", lambda v: v.references["matched"], "reference_matched"),
    ("R_structural_cal", lambda v: v.references.get("structural_cal"), "reference_structural_cal"),
    ("R_matched_cal", lambda v: v.references.get("matched_cal"), "reference_matched_cal"),
    ("initial_state", lambda v: v.attribution["initial_state"], "initial_state"),
    ("size_imbalance", lambda v: v.attribution["size_imbalance"], "size_imbalance"),
    ("correlated_updates", lambda v: v.attribution["correlated_updates"], "correlated_updates"),
    # The update diagnostic (passage mode, CKA estimators): D_eff of the updates f_1..f_L themselves.
    ("updates_D_eff", lambda v: v.update_deff, "update_deff"),
)


# --------------------------------------------------------------------------- jobs


@dataclass(frozen=True)
class Job:
    """One measurement: a model at a revision with the sweep's options.

    ``source`` is where to load from when it is not ``model.id`` (a local
    checkpoint folder); ``tag`` names the revision in keys and tables
    (default: the revision, else ``main``); ``weights`` is a fingerprint of
    the weights when known (it joins the key, so changed weights are
    measured again); ``extra`` holds table columns such as ``step``.

    >>> j = Job(SuiteModel("EleutherAI/pythia-70m"), {"seq_len": 16}, revision="step1000")
    >>> j.key.startswith("EleutherAI-pythia-70m/step1000/effdepth-")
    True
    """

    model: SuiteModel
    options: dict
    revision: str | None = None
    source: str | None = None
    tag: str | None = None
    name: str | None = None
    weights: str | None = None
    extra: dict = field(default_factory=dict)
    tokenizer: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name or self.model.id}@{self.tag or self.revision or 'main'}"

    @property
    def digest(self) -> str:
        what = {
            "effdepth": __version__,
            "model": self.model.id,
            "source": self.source,
            "revision": self.revision,
            "weights": self.weights,
            "tokenizer": self.tokenizer,
            "options": {k: v for k, v in self.options.items() if k not in UNHASHED_OPTIONS},
        }
        return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def key(self) -> str:
        return f"{slug(self.name or self.model.id)}/{slug(self.tag or self.revision or 'main')}/effdepth-{__version__}-{self.digest[:12]}"

    def describe(self) -> dict:
        """What ``DIR/<key>/job.json`` records, for people and for the summary."""
        return {
            "model": self.model.id, "family": self.model.family, "params": self.model.params, "revision": self.revision,
            "tag": self.tag, "source": self.source, "weights": self.weights, "options": self.options, "extra": self.extra,
            "effdepth": __version__, "digest": self.digest, "key": self.key,
        }

    def payload(self, *, checkpoint: str | None = None, progress: bool = False, checkpoint_every_s: float = 30.0) -> dict:
        """What a worker needs to measure this job: plain data, picklable and JSON-able."""
        return {
            "id": self.model.id, "source": self.source, "revision": self.revision, "options": self.options,
            "tokenizer": self.tokenizer, "effdepth": __version__, "checkpoint": checkpoint, "progress": progress,
            "checkpoint_every_s": checkpoint_every_s,
        }


def slug(text) -> str:
    """A single safe path component: never ``..``, never absolute, never empty.

    >>> slug("EleutherAI/pythia-70m"), slug("../../etc/passwd"), slug("tiny:llama"), slug("..")
    ('EleutherAI-pythia-70m', 'etc-passwd', 'tiny-llama', 'x')
    """
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", str(text))
    s = re.sub(r"\.{2,}", ".", s).strip(".-")
    return s[:80].strip(".-") or "x"


def job_folder(out, job: Job) -> Path:
    """``out/<key>``, checked to stay inside ``out`` whatever the id and revision were."""
    root = Path(out).resolve()
    folder = (root / job.key).resolve()
    if root not in folder.parents:
        raise EffdepthError(f"refusing to write {job.label} outside {root}")
    return folder


def make_jobs(models, options: dict, *, revision: str | None = None) -> list[Job]:
    """One job per model; ``revision`` applies to models that do not name their own.

    >>> [j.label for j in make_jobs(["tiny:gpt2", "EleutherAI/pythia-70m"], {}, revision="step1000")]
    ['tiny:gpt2@main', 'EleutherAI/pythia-70m@step1000']
    """
    jobs = []
    for m in resolve_models(models):
        rev = None if m.id.startswith(TINY_PREFIX) else (m.revision or revision)
        if rev is not None:
            check_revision(rev)
        rev = None if rev == "main" else rev  # the default branch: one key whether named or not
        jobs.append(Job(m, options, revision=rev, extra=_revision_columns(m.id, rev)))
    return jobs


def _revision_columns(model_id: str, revision: str | None) -> dict:
    c = parse_revision(revision, tokens_per_step=tokens_per_step_for(model_id)) if revision else None
    return {"step": c.step, "tokens_seen": c.tokens} if c else {}


def job_options(options: Options) -> dict:
    """A sweep's options as JSON-able data (they are hashed and sent to workers); the
    model, revision and tokenizer are each job's own.

    >>> job_options(Options.build(seq_len=16, views="default,drop-bos"))["views"]
    ['default', 'drop-bos']
    """
    out = {k: v for k, v in options.to_dict().items() if k not in MANAGED_OPTIONS}
    out["corpus"] = _corpus_spec(options.load.corpus)
    return out


def _corpus_spec(corpus):
    if corpus is None or isinstance(corpus, str):
        return corpus
    if isinstance(corpus, Path):
        return str(corpus)
    if isinstance(corpus, (list, tuple)) and all(isinstance(t, str) for t in corpus):
        return list(corpus)
    raise EffdepthError("a sweep's corpus must be shakespeare, a file or folder path, hf:NAME[:CONFIG[:SPLIT]] or a list of texts")


# --------------------------------------------------------------------------- running one job (anywhere)


def run_job(payload: dict) -> dict:
    """Measure one job; the outcome is ``{"status": "ok", "result": dict}`` or
    ``{"status": "error", "error": one line, "type": ...}``. Runs in this
    process or on a Ray worker; an interruption (not a failure) propagates.
    """
    from .checkpoint import MeasurementInterrupted

    try:
        result = measure_job(payload)
    except MeasurementInterrupted:
        raise
    except EffdepthError as exc:
        return {"status": "error", "error": str(exc), "type": "EffdepthError"}
    except Exception as exc:  # a model we cannot run must not stop the others
        return {"status": "error", "error": f"{type(exc).__name__}: {_one_line(exc)}", "type": type(exc).__name__}
    finally:
        _free_memory()
    return {"status": "ok", "result": result.to_dict()}


def measure_job(payload: dict) -> Result:
    """The measurement itself: tiny models are built here, others loaded by ``measure``."""
    from .measure import run_measurement

    if payload.get("effdepth") != __version__:
        # The key promises numbers from the driver's version.
        raise EffdepthError(
            f"this worker has effdepth {__version__} but the driver {payload.get('effdepth')}; install the same version everywhere"
        )
    if payload.get("offline"):
        from .hub import set_offline

        set_offline(True)
    own = {"model": payload.get("source") or payload["id"], "revision": payload.get("revision")}
    if payload["id"].startswith(TINY_PREFIX):
        own.update(model=_tiny_model(payload["id"]), tokenizer=_byte_tokenizer())
    elif payload.get("tokenizer"):
        own["tokenizer"] = _load_tokenizer(payload["tokenizer"])
    options = Options.from_dict(payload["options"]).replace(**own)
    checkpoint = payload.get("checkpoint")
    resume = checkpoint is not None and (Path(checkpoint) / "state.json").is_file()

    def run(resume):
        return run_measurement(options, RunOptions(
            progress=bool(payload.get("progress")), checkpoint=checkpoint, resume=resume,
            checkpoint_every_s=payload.get("checkpoint_every_s", 30.0),
        ))

    from .checkpoint import CheckpointMismatch, remove_checkpoint

    try:
        return run(resume)
    except CheckpointMismatch:
        # Partial statistics that no longer fit (the branch moved, the file was
        # damaged) are discarded; the job is keyed, so nothing else can be there.
        if not resume:
            raise

        remove_checkpoint(Path(checkpoint))
        return run(False)


def _tiny_model(model_id: str):
    from .tiny import tiny_model

    model = tiny_model(model_id[len(TINY_PREFIX):])
    model.name_or_path = model_id  # recorded as the model's id in the result
    return model


def _load_tokenizer(location: str):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(location)
    except Exception as exc:
        raise EffdepthError(f"cannot load the tokenizer in {location}: {_one_line(exc)}") from None


@lru_cache(maxsize=1)
def _byte_tokenizer():
    # One instance for every tiny model: the corpus loader caches tokenized text per tokenizer.
    from .data import byte_tokenizer

    return byte_tokenizer()


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


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
        from .report.tables import suite_summary_text

        return suite_summary_text(self.rows)


def sweep(models, out, options: Options | None = None, *, revision: str | None = None, executor="local",
          figures: bool = True, report: bool = True, run: RunOptions | None = None, log=None, **measure_options) -> SweepOutcome:
    """Measure every model of ``models`` (suite names, suite files, ids, ``tiny:TYPE``, folders) into ``out``.

    ``options`` (an :class:`~effdepth.options.Options`) or ``measure_options``
    (:func:`effdepth.measure`'s keywords: ``corpus``, ``seq_len``,
    ``num_seqs``, ``views``, ``bootstrap``, ``dtype``, ...) say how to measure.
    ``executor`` is ``"local"``, ``"ray"`` or an executor from
    :func:`~effdepth.executors.make_executor` (Ray with its options).
    ``log`` (e.g. ``print``) receives one line per job. With the local
    executor, partial statistics are saved every ``run.checkpoint_every_s``
    seconds and on SIGINT/SIGTERM, and a rerun continues them.

    >>> import tempfile
    >>> s = sweep(["tiny:gpt2"], tempfile.mkdtemp(), corpus=["some text " * 30], seq_len=8, num_seqs=4,
    ...           bootstrap=0, figures=False, report=False)
    >>> s.counts
    {'ok': 1}
    """
    options = _combined(options, measure_options)
    run = run or RunOptions(progress=False)
    jobs = make_jobs(models, job_options(options), revision=revision)
    ex = make_executor(executor) if isinstance(executor, str) else executor
    check_cache(jobs, job_options(options), models=models, revision=revision)
    statuses = run_jobs(jobs, out, ex, run=run, log=log)
    rows = summary_rows(out, jobs)
    files = write_outputs(out, rows, jobs, figures=figures, report=report, log=log)
    return SweepOutcome(Path(out), rows, count_statuses(statuses), files)


def _combined(options: Options | None, measure_options: dict) -> Options:
    if options is None:
        return Options.build(**measure_options)
    return options.replace(**measure_options) if measure_options else options


def check_cache(jobs: list, opts: dict, *, models=(), revision: str | None = None) -> None:
    """Before the first forward pass: every hub model and revision, and the corpus, from the hub or the cache.

    Offline, all that is missing is listed at once with the ``effdepth fetch``
    command that fills the cache; online the hub is probed once (see
    :func:`effdepth.hub.check_available`).

    >>> check_cache(make_jobs(["tiny:gpt2"], {"corpus": ["text"]}), {"corpus": ["text"]})
    """
    from . import hub

    allow_pickle = bool(opts.get("allow_pickle"))
    corpus = opts.get("corpus")
    needs = [hub.Need("model", j.model.id, j.revision, allow_pickle) for j in jobs
             if j.source is None and not j.model.is_tiny and not Path(j.model.id).expanduser().exists()]
    needs += hub.corpus_needs(corpus)
    specs = [str(m) for m in (models if isinstance(models, (list, tuple)) else [models]) if isinstance(m, (str, Path))]
    with_models = any(n.kind == "model" for n in needs)
    hub_corpus = [corpus] if hub.parse_hf_corpus(corpus) is not None else []
    fix = hub.fetch_command(specs if with_models else [], revisions=[revision] if revision else [],
                            corpora=hub_corpus if with_models else hub_corpus or [hub.SHAKESPEARE], allow_pickle=allow_pickle)
    hub.check_available(needs, fix=fix)


def run_jobs(jobs: list, out, executor, *, run: RunOptions | None = None, log=None) -> dict:
    """Run the unfinished jobs on ``executor``; write each outcome. Returns ``{key: status}``.

    Status: ``done`` (finished before), ``ok`` or ``error``.
    """
    from .checkpoint import MeasurementInterrupted, checkpoint_dir

    log = log or (lambda line: None)
    run = run or RunOptions(progress=False)
    out = _writable(Path(out))
    statuses, todo = {}, []
    for job in jobs:
        folder = job_folder(out, job)
        if _finished(folder):
            statuses[job.key] = "done"
            log(f"{job.label}: done already ({job.key})")
            continue
        write_json_atomic(folder / JOB, job.describe())
        todo.append(job)
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

    from .hub import is_offline

    offline = is_offline()  # Ray workers on other nodes do not inherit this process's switch

    def payload(job):
        checkpoint = str(checkpoint_dir(job_folder(out, job))) if local else None
        data = job.payload(checkpoint=checkpoint, progress=run.progress and local, checkpoint_every_s=run.checkpoint_every_s)
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


def record(out, job: Job, outcome: dict) -> str:
    """Write a job's outcome (result.json or error.json) into its folder; returns the status."""
    folder = job_folder(out, job)
    if outcome.get("status") == "ok":
        result = Result.from_dict(outcome["result"])
        result.provenance["job"] = job.describe()
        result.save(folder)
        (folder / ERROR).unlink(missing_ok=True)
        return "ok"
    error = {"model": job.model.id, "revision": job.revision, "tag": job.tag, "error": " ".join(str(outcome.get("error")).split()),
             "type": outcome.get("type"), "effdepth": __version__, "key": job.key}
    write_json_atomic(folder / ERROR, error)
    return "error"


def _finished(folder: Path) -> bool:
    return _load_result(folder) is not None


def _load_result(folder: Path) -> Result | None:
    if not (folder / RESULT).is_file():
        return None
    try:
        return load(folder)
    except EffdepthError:
        return None  # unreadable: measure it again


def _writable(out: Path) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EffdepthError(f"cannot write to {out}: {exc.strerror}; choose another --out") from None
    return out


def _outcome_text(outcome: dict) -> str:
    if outcome.get("status") != "ok":
        return f"failed: {outcome.get('error')}"
    result = Result.from_dict(outcome["result"])
    v = result.default
    ci = f" [{v.ci['ratio'][0]:.3f}, {v.ci['ratio'][1]:.3f}]" if v.ci else ""
    return f"D_eff {v.deff:.3f} / F_N {v.reference:.3f} = {v.ratio:.3f}{ci} ({result.primary_similarity}, view {v.name}, N = {v.num_states})"


def count_statuses(statuses: dict) -> dict:
    """``{status: how many}``.

    >>> count_statuses({"a": "ok", "b": "ok", "c": "error"})
    {'ok': 2, 'error': 1}
    """
    counts: dict = {}
    for s in statuses.values():
        counts[s] = counts.get(s, 0) + 1
    return counts


# --------------------------------------------------------------------------- summary table


def summary_rows(out, jobs: list) -> list[dict]:
    """One row per (job, view) from what is on disk: results, errors, or ``missing``."""
    rows = []
    for job in jobs:
        folder = job_folder(out, job)
        result = _load_result(folder)
        if result is not None:
            rows += result_rows(job, result)
        elif (folder / ERROR).is_file():
            rows.append(_row(job, status="error", error=read_error(folder / ERROR)[1]))
        else:
            rows.append(_row(job, status="missing"))
    return rows


def result_rows(job: Job, result: Result) -> list[dict]:
    """A row per view and similarity of ``result`` (the primary similarity first), with the job's columns.

    A view without a value under a similarity (cka's ``pos0-only``) gets a row with status
    ``unavailable``, the reason in ``error`` and no numbers.
    """
    from .report.rows import view_order

    rows = []
    layers = result.config.get("num_layers")
    for sim, views in result.similarities.items():
        reasons = (result.unavailable or {}).get(sim, {})
        for name in view_order(result):
            v = views.get(name)
            if v is None:
                if name in reasons:
                    rows.append(_row(job, status="unavailable", view=name, similarity=sim, L=layers, error=reasons[name]))
                continue
            row = _row(job, status="ok", view=name, similarity=sim, L=layers, N=v.num_states, F_N=v.reference,
                       sequences=v.sequences, tokens_measured=v.tokens)
            for column, value, ci_key in _METRICS:
                row[column] = _float(value(v))
                bounds = (v.ci or {}).get(ci_key) or [None, None]
                row[f"{column}_lo"], row[f"{column}_hi"] = _float(bounds[0]), _float(bounds[1])
            rows.append(row)
    return rows



def _row(job: Job, **values) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(model=job.name or job.model.id, family=job.model.family, params=job.model.params,
               revision=job.tag or job.revision or "main", key=job.key)
    row.update({k: v for k, v in job.extra.items()})
    row.update(values)
    return row


def _float(x):
    return None if x is None or not math.isfinite(float(x)) else float(x)


def write_table(out, stem: str, rows: list[dict], columns=None, log=None) -> list[Path]:
    """``stem.csv`` always, ``stem.parquet`` when pyarrow is installed; both atomic."""
    from .files import write_atomic

    columns = list(columns or (rows[0].keys() if rows else COLUMNS))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if r.get(k) is None else r.get(k)) for k in columns} for r in rows)
    files = [write_atomic(Path(out) / f"{stem}.csv", text.getvalue().encode("utf-8"))]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        if log:
            log(f"{stem}.parquet skipped: pip install 'effdepth[parquet]' for Parquet tables")
        return files
    table = pa.Table.from_pylist([{k: r.get(k) for k in columns} for r in rows], schema=_schema(pa, columns, rows))
    buf = io.BytesIO()
    pq.write_table(table, buf)
    files.append(write_atomic(Path(out) / f"{stem}.parquet", buf.getvalue()))
    return files


def _schema(pa, columns, rows):
    """Types from the values, so an all-empty column is a typed column of nulls."""
    fields = []
    for c in columns:
        values = [r.get(c) for r in rows if r.get(c) is not None]
        if values and all(isinstance(v, bool) for v in values):
            t = pa.bool_()
        elif values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            t = pa.int64()
        elif values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            t = pa.float64()
        elif not values and c not in ("model", "family", "revision", "view", "similarity", "status", "error", "key"):
            t = pa.float64()
        else:
            t = pa.string()
        fields.append(pa.field(c, t))
    return pa.schema(fields)


def write_outputs(out, rows, jobs, *, figures: bool = True, report: bool = True, log=None) -> list[Path]:
    """``summary.{csv,parquet}``, ``suite.{png,pdf}`` and ``report.html`` of a sweep."""
    log = log or (lambda line: None)
    out = Path(out)
    files = write_table(out, "summary", rows, COLUMNS, log=log)
    ok = [r for r in rows if r["status"] == "ok"]
    if figures and ok:
        from .report.figures_suite import suite_figure
        from .report.style import save_figure

        files += save_figure(suite_figure(rows), out / "suite")
    if report and ok:
        files += _write_report(out, jobs, rows, log)
    return files


def _write_report(out: Path, jobs: list, rows: list, log) -> list[Path]:
    try:
        from .report.build import write_report
    except ImportError:
        log("report.html skipped: this effdepth has no report module")
        return []
    paths = [job_folder(out, j) / RESULT for j in jobs if (job_folder(out, j) / RESULT).is_file()]
    failed = list(dict.fromkeys((r["model"], r["error"]) for r in rows if r["status"] == "error"))  # a row per similarity
    try:
        return write_report(paths, out / "report.html", failed=failed)
    except EffdepthError as exc:  # the numbers are safe on disk; a report problem must not fail the run
        log(f"report.html skipped: {exc}")
        return []
