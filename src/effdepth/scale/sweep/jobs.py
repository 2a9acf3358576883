"""A sweep's jobs: one (model, revision, configuration) each, keyed so a rerun finds what is done.

Every job has a key::

    <model slug>/<revision slug>/effdepth-<version>-<digest>

where the digest hashes the model id, revision, weights fingerprint (when known) and every option that
can change the numbers (not those in :data:`~effdepth.options.UNHASHED_OPTIONS`). ``DIR/<key>/`` holds
``job.json``, then ``result.json`` or ``error.json``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.options import UNHASHED_OPTIONS, Options
from effdepth.report.sources import ERROR_FILE
from effdepth.results.loading import load
from effdepth.results.result import Result
from effdepth.results.version import __version__
from effdepth.scale.revisions import check_revision, parse_revision, tokens_per_step_for
from effdepth.scale.suites import TINY_PREFIX, SuiteModel, resolve_models

RESULT, ERROR, JOB = "result.json", ERROR_FILE, "job.json"

#: Options a sweep sets itself, per job.
MANAGED_OPTIONS = ("model", "revision", "tokenizer")


@dataclass(frozen=True)
class Job:
    """One measurement: a model at a revision with the sweep's options.

    ``source``: where to load from when not ``model.id``; ``tag``: the revision's name in keys and tables
    (default: the revision, else ``main``); ``weights``: the weights' fingerprint when known (it joins
    the key); ``extra``: table columns such as ``step``.

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
            "model": self.model.id,
            "family": self.model.family,
            "params": self.model.params,
            "revision": self.revision,
            "tag": self.tag,
            "source": self.source,
            "weights": self.weights,
            "options": self.options,
            "extra": self.extra,
            "effdepth": __version__,
            "digest": self.digest,
            "key": self.key,
        }

    def payload(
        self, *, checkpoint: str | None = None, progress: bool = False, checkpoint_every_s: float = 30.0
    ) -> dict:
        """What a worker needs to measure this job: plain data, picklable and JSON-able."""
        return {
            "id": self.model.id,
            "source": self.source,
            "revision": self.revision,
            "options": self.options,
            "tokenizer": self.tokenizer,
            "effdepth": __version__,
            "checkpoint": checkpoint,
            "progress": progress,
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
    raise EffdepthError(
        "a sweep's corpus must be shakespeare, a file or folder path, hf:NAME[:CONFIG[:SPLIT]] or a list of texts"
    )


def saved_result(folder: Path) -> Result | None:
    """The finished result in a job's folder, or ``None`` (none yet, or unreadable: measured again)."""
    if not (folder / RESULT).is_file():
        return None
    try:
        return load(folder, expect=Result)
    except EffdepthError:
        return None  # unreadable: measure it again
