"""``effdepth trajectory``: D_eff across the training checkpoints of one model.

Checkpoints are the hub repository's branches (names read by :mod:`effdepth.scale.revisions`) or the
``save_pretrained`` subfolders of a local folder (``step-100``, ``checkpoint-100``); a preset
(:mod:`effdepth.scale.suites.trajectories`) names the model and its selection.

A checkpoint whose weights fingerprint repeats an earlier one (upstream repositories sometimes serve
the same weights under several branches, docs/capture.md) is flagged as a duplicate, not measured again.
One with only pickle weights fails without ``--allow-pickle``, never downloaded. Jobs run as a sweep's.
Output: ``DIR/trajectory.{csv,parquet}`` (a row per checkpoint, view and similarity), ``trajectory.json``
(``effdepth.load`` reads both back) and ``trajectory.{png,pdf}``.

>>> import tempfile, pathlib
>>> from effdepth.models.tiny import tiny_model
>>> from effdepth.data import byte_tokenizer
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> for step, seed in ((0, 0), (100, 1)):
...     tiny_model("gpt2", seed=seed).save_pretrained(d / "ckpts" / f"step-{step}")
...     _ = byte_tokenizer().save_pretrained(d / "ckpts" / f"step-{step}")
>>> t = trajectory(d / "ckpts", d / "out", corpus=["To be, or not to be. " * 20], seq_len=8, num_seqs=4, bootstrap=0)
>>> [(r["revision"], r["step"], r["status"]) for r in t.rows if r["similarity"] == "cka"]
[('step-0', 0, 'ok'), ('step-100', 100, 'ok')]
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from effdepth.errors import EffdepthError, one_line
from effdepth.options import Options, RunOptions, at_least
from effdepth.report.plain import table_text
from effdepth.results.files import file_sha256, one_writer, write_json_atomic
from effdepth.scale.executors import make_executor
from effdepth.scale.revisions import (
    FIRST_TRACKS,
    Checkpoint,
    parse_revision,
    parse_revisions,
    parse_selection,
    select_every,
    select_log,
    tokens_per_step_for,
)
from effdepth.scale.suites import SuiteModel, check_model_id, guess_family
from effdepth.scale.suites.trajectories import TrajectoryPreset, not_a_trajectory_source, preset_selection
from effdepth.scale.sweep import (
    COLUMNS,
    Job,
    count_statuses,
    job_options,
    record,
    run_jobs,
    summary_rows,
    unfinished,
    write_table,
)
from effdepth.scale.trajectory.report import trajectory_content
from effdepth.scale.trajectory.result import SCHEMA, SavedTrajectory
from effdepth.scale.trajectory.steps import STEP_COLUMNS, with_step_differences

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")

#: ``tokens`` is what the checkpoint's name says; ``tokens_seen`` the running total plotted.
TRAJECTORY_COLUMNS = (
    "model",
    "revision",
    "step",
    "tokens",
    "tokens_seen",
    "track",
    "final",
    "duplicate_of",
    "weights",
    "weights_source",
    *(c for c in COLUMNS if c not in ("model", "family", "params", "revision", "step", "tokens_seen")),
    *STEP_COLUMNS,
)


@dataclass
class Discovered:
    """The checkpoints of a model before selection: where they live and what they are."""

    model: str
    kind: str  # "hub" or "local"
    checkpoints: list
    skipped: list
    commits: dict = field(default_factory=dict)
    tokens_per_step: int | None = None
    notes: list = field(default_factory=list)


@dataclass
class TrajectoryOutcome:
    """What :func:`trajectory` measured and wrote; ``duplicates`` maps a revision to the earlier one with
    identical weights, ``skipped`` lists names that are not checkpoints."""

    out: Path
    rows: list
    checkpoints: list
    duplicates: dict
    skipped: list
    counts: dict
    files: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    preset: TrajectoryPreset | None = None

    def table(self) -> str:
        """One line per checkpoint: D_eff, D_eff/L and the updates' D_eff/L (the update diagnostic), as ``effdepth show`` prints it."""
        return table_text(
            trajectory_content(self.rows, self.duplicates, None if self.preset is None else self.preset.to_dict())
        )


def trajectory(
    model,
    out,
    options: Options | None = None,
    *,
    revisions: str | None = None,
    tokens_per_step: int | None = None,
    executor="local",
    figures: bool = True,
    run: RunOptions | None = None,
    log=None,
    **measure_options,
) -> TrajectoryOutcome:
    """Measure ``model`` (a hub id, a local folder of checkpoints or a preset) at each selected checkpoint
    into ``out``.

    ``revisions`` (not with a preset, which fixes them): ``"auto"`` (every checkpoint), ``"every:K"``,
    ``"log:K"`` (:func:`~effdepth.scale.revisions.select_log`) or a comma-separated list.
    ``tokens_per_step`` converts steps to tokens when the names do not say (Pythia's is known).
    ``options``/``measure_options`` and ``executor`` are as for :func:`~effdepth.scale.sweep.sweep`.
    """
    log = log or (lambda line: None)
    preset, revisions = preset_selection(model, revisions)
    model = preset.model if preset is not None else model
    parse_selection(revisions)  # bad input fails before the hub is asked anything
    if tokens_per_step is not None:
        at_least(1, "--tokens-per-step must be a whole number of tokens >= 1, got {v!r}")(tokens_per_step)
        tokens_per_step = int(tokens_per_step)
    if measure_options.get("revision") is not None or (options is not None and options.load.revision is not None):
        raise EffdepthError("trajectory takes --revisions (auto, every:K, log:K or a list), not --revision")
    opts = job_options(Options.build(**measure_options) if options is None else options.replace(**measure_options))
    ex = make_executor(executor) if isinstance(executor, str) else executor
    found = discover(model, tokens_per_step=tokens_per_step, revisions=revisions)
    checkpoints, notes = select(found, revisions)
    for note in notes:
        log(note)
    if not checkpoints:
        raise EffdepthError(
            f"no checkpoints to measure in {found.model}; names seen but skipped: {', '.join(found.skipped[:10]) or 'none'}"
        )
    _check_cache(found, checkpoints, revisions, opts)
    listings: dict = {}
    fingerprints = {c.revision: weights_fingerprint(found, c, listings) for c in checkpoints}
    duplicates = find_duplicates(checkpoints, fingerprints)
    for dup, original in duplicates.items():
        log(f"{dup}: same weights as {original} ({fingerprints[dup][1]}); flagged, not measured again")
    jobs = {
        c.revision: _job(found, c, opts, fingerprints[c.revision]) for c in checkpoints if c.revision not in duplicates
    }
    refused = refused_checkpoints(found.model, listings, allow_pickle=bool(opts.get("allow_pickle")))
    refused = {rev: why for rev, why in refused.items() if rev in jobs}
    for rev, why in refused.items():
        log(f"{rev}: {why}; not downloaded, not measured")
    with one_writer(out):  # one trajectory writes a folder: its checkpoints' records and its outputs
        statuses = run_jobs([job for rev, job in jobs.items() if rev not in refused], out, ex, run=run, log=log)
        statuses.update(record_refused(out, {rev: jobs[rev] for rev in refused}, refused, log=log))
        rows = with_step_differences(out, trajectory_rows(out, checkpoints, jobs, duplicates, fingerprints), log)
        outcome = TrajectoryOutcome(
            Path(out),
            rows,
            checkpoints,
            duplicates,
            found.skipped,
            count_statuses(statuses),
            notes=notes,
            preset=preset,
        )
        outcome.files = _write_outputs(outcome, found, revisions, figures=figures, log=log)
    return outcome


# --------------------------------------------------------------------------- finding checkpoints


def discover(model, *, tokens_per_step: int | None = None, revisions: str = "auto") -> Discovered:
    """Every checkpoint of ``model``: the hub's branches, or a local folder's subfolders. Offline (or with
    the hub out of reach) the branches come from the local cache; ``revisions`` shapes the ``effdepth
    fetch`` advice when they are not there."""
    text = str(model)
    path = Path(text).expanduser()
    if path.is_dir():
        return _discover_local(path, tokens_per_step)
    if "/" not in text and ":" not in text:  # not an owner/name, not tiny:TYPE: a misspelt preset or folder
        raise EffdepthError(not_a_trajectory_source(text))
    return _discover_hub(check_model_id(text), tokens_per_step, revisions)


def _discover_local(folder: Path, tokens_per_step: int | None) -> Discovered:
    if (folder / "config.json").is_file():
        raise EffdepthError(
            f"{folder} is a single model; a trajectory needs a folder with one subfolder per checkpoint (step-100/, step-200/, ...) or a hub id"
        )
    folders = [p for p in sorted(folder.iterdir()) if p.is_dir() and not p.name.startswith(".")]
    subfolders = {p.name: p for p in folders if (p / "config.json").is_file()}
    # Said, not dropped silently: an unfinished copy or a folder of something else.
    notes = [
        f"skipped {p.name}/: no config.json, so not a saved checkpoint" for p in folders if p.name not in subfolders
    ]
    checkpoints, skipped = parse_revisions(subfolders, tokens_per_step=tokens_per_step)
    checkpoints = [replace(c, path=str(subfolders[c.revision])) for c in checkpoints]
    return Discovered(str(folder), "local", checkpoints, skipped, tokens_per_step=tokens_per_step, notes=notes)


def _discover_hub(repo: str, tokens_per_step: int | None, revisions: str = "auto") -> Discovered:
    import huggingface_hub

    from effdepth.models import hub

    if repo.startswith("tiny:"):
        raise EffdepthError(
            "tiny models have no training checkpoints; save some with save_pretrained and pass their folder"
        )
    notes = []
    if hub.is_offline():
        commits, notes = _cached_branches(repo, revisions)
    else:
        try:
            with hub.quiet_hub():
                commits = {b.name: b.target_commit for b in huggingface_hub.list_repo_refs(repo).branches}
        except Exception as exc:  # network, auth, unknown repo: all mean no branch list
            problem = hub.hub_problem() if hub.is_network_error(exc) else None
            if problem is None:
                said = hub.hub_error_message(exc, repo)
                if said is not None:
                    raise EffdepthError(f"cannot list the branches of {repo}: {said}") from None
                raise EffdepthError(
                    f"cannot list the branches of {repo}: {type(exc).__name__}: {one_line(exc, 200)}; "
                    "check the id, your network or HF_HUB_OFFLINE (or pass a local folder of checkpoints)"
                ) from None
            if not hub.cached_branches(repo)[0]:
                raise EffdepthError(
                    f"cannot list the branches of {repo}: "
                    + hub.unreachable_message(
                        problem,
                        ", and none are in the local cache",
                        f"run `{hub.fetch_command([repo], revisions_spec=revisions)}` "
                        "on a machine with internet (a login node), then add --offline here",
                    )
                ) from None
            hub.set_offline(True)
            commits, notes = _cached_branches(repo, revisions)
            notes.insert(
                0,
                f"the Hugging Face hub cannot be reached ({problem}); reading the local cache only, as with --offline",
            )
    per_step = tokens_per_step or tokens_per_step_for(repo)
    checkpoints, skipped = parse_revisions(commits, tokens_per_step=per_step)
    return Discovered(repo, "hub", checkpoints, skipped, commits, tokens_per_step=per_step, notes=notes)


def _cached_branches(repo: str, revisions: str) -> tuple[dict, list]:
    """Offline: the branch list ``effdepth fetch --revisions`` recorded, else the branches in the cache."""
    from effdepth.models import hub

    commits, complete = hub.cached_branches(repo)
    fix = hub.fetch_command([repo], revisions_spec=revisions)
    if not commits:
        raise EffdepthError(
            f"cannot list the branches of {repo} offline: none are in the local cache {hub.hub_cache()}; "
            f"run `{fix}` on a machine with internet (a login node) first"
        )
    if complete:
        return commits, []
    return commits, [
        f"offline: the branches are those in the local cache ({len(commits)}), not the hub's full list; "
        f"`{fix}` records the full list"
    ]


def select(found: Discovered, revisions: str) -> tuple[list[Checkpoint], list[str]]:
    """The checkpoints ``--revisions`` asks for, and notes about names left out.

    >>> cps, _ = parse_revisions(["step0", "step1", "step2", "main"])
    >>> [c.revision for c in select(Discovered("m", "hub", cps, ["v1"]), "every:2")[0]]
    ['step0', 'step2', 'main']
    """
    kind, arg = parse_selection(revisions)
    notes = list(found.notes)
    if found.skipped and kind != "list":
        shown = ", ".join(found.skipped[:8]) + (f" and {len(found.skipped) - 8} more" if len(found.skipped) > 8 else "")
        notes.append(f"skipped {len(found.skipped)} name(s) that are not checkpoints: {shown}")
    if kind == "auto":
        return list(found.checkpoints), notes
    if kind == "every":
        return select_every(found.checkpoints, arg), notes
    if kind == "log":
        chosen, planned = select_log(found.checkpoints, arg)
        steps = sum(not c.final for c in chosen)
        if steps < planned:
            notes.append(
                f"log:{arg}: {steps} of {planned} planned checkpoints exist (a checkpoint nearest to two planned "
                "positions is measured once)"
            )
        later = list(dict.fromkeys(c.track for c in found.checkpoints if not c.final and c.track not in FIRST_TRACKS))
        if later:
            notes.append(
                f"log:{arg} spaces the first training track only; the checkpoints of {', '.join(later)} are not selected"
            )
        return chosen, notes
    return _listed(found, arg, notes), notes


def _listed(found: Discovered, names: list, notes: list) -> list[Checkpoint]:
    by_name = {c.revision: c for c in found.checkpoints}
    chosen = []
    for name in names:
        if name in by_name:
            chosen.append(by_name[name])
        elif found.kind == "local":
            why = "it has no config.json" if (Path(found.model) / name).is_dir() else "no such folder"
            raise EffdepthError(
                f"no checkpoint folder {name!r} in {found.model} ({why}); have: {', '.join(by_name) or 'none'}"
            )
        elif parse_revision(name) is None:
            notes.append(f"skipped {name}: not a checkpoint name (step..., stage...-step...-tokens...B or main)")
        else:
            # A tag or a branch the listing did not show: trust the user, the load will tell.
            chosen.append(parse_revisions([name], tokens_per_step=found.tokens_per_step)[0][0])
    order = {c.revision: i for i, c in enumerate(found.checkpoints)}
    return sorted(chosen, key=lambda c: order.get(c.revision, len(order)))


def _check_cache(found: Discovered, checkpoints: list, revisions: str, opts: dict) -> None:
    """Offline, every selected checkpoint (and the corpus) must be in the cache: all missing are listed at once."""
    from effdepth.models import hub

    if not hub.is_offline():
        return
    corpus = opts.get("corpus")
    needs = hub.corpus_needs(corpus)
    fix_corpora = [corpus] if hub.parse_hf_corpus(corpus) is not None else []
    if found.kind == "hub":
        needs = [
            hub.Need("model", found.model, c.revision, opts.get("allow_pickle", False)) for c in checkpoints
        ] + needs
        fix = hub.fetch_command(
            [found.model], revisions_spec=revisions, corpora=fix_corpora, allow_pickle=opts.get("allow_pickle", False)
        )
    else:
        fix = hub.fetch_command(corpora=fix_corpora or [hub.SHAKESPEARE])
    hub.check_available(needs, fix=fix)


# --------------------------------------------------------------------------- identical weights


def weights_fingerprint(
    found: Discovered, checkpoint: Checkpoint, listings: dict | None = None
) -> tuple[str | None, str]:
    """``(fingerprint, how it was obtained)``; equal fingerprints mean identical weights. ``listings``
    receives the hub's file list of each revision it read (``{revision: [(name, sha256)]}``)."""
    if found.kind == "local":
        return local_fingerprint(Path(checkpoint.path))
    from effdepth.models.hub import cached_weight_shas, is_offline

    if is_offline():
        shas = cached_weight_shas(found.model, checkpoint.revision)
        if shas:
            return _digest(shas), "cached LFS sha256"  # the same digest as the hub's metadata gives
    else:
        fp = hub_fingerprint(found.model, checkpoint.revision, listings)
        if fp is not None:
            return fp, "hub LFS sha256"
    commit = found.commits.get(checkpoint.revision)
    return (f"commit:{commit}", "branch commit") if commit else (None, "unknown")


def hub_fingerprint(repo: str, revision: str, listings: dict | None = None) -> str | None:
    """A digest of the LFS sha256 of the revision's weight files (safetensors when there are any, else
    pickle weights, only hashed) from the hub's metadata; ``None`` when the hub does not say."""
    import huggingface_hub

    api = huggingface_hub.HfApi()
    files = _model_info_files(api, repo, revision)
    if listings is not None and files:
        listings[revision] = files
    weights = _weight_entries(files)
    if weights and all(sha for _, sha in weights):
        return _digest(weights)
    names = [name for name, _ in weights] or ["model.safetensors"]
    weights = _weight_entries(_paths_info_files(api, repo, revision, names))
    return _digest(weights) if weights and all(sha for _, sha in weights) else None


def _model_info_files(api, repo: str, revision: str) -> list:
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except Exception:  # no metadata is not an error: we fall back
        return []
    return [(s.rfilename, _lfs_sha256(getattr(s, "lfs", None))) for s in (getattr(info, "siblings", None) or [])]


def _paths_info_files(api, repo: str, revision: str, names: list) -> list:
    try:
        entries = api.get_paths_info(repo, names, revision=revision)
    except Exception:
        return []
    return [(e.path, _lfs_sha256(getattr(e, "lfs", None))) for e in entries if hasattr(e, "lfs")]


def _lfs_sha256(lfs) -> str | None:
    if lfs is None:
        return None
    return getattr(lfs, "sha256", None) or (lfs.get("sha256") if isinstance(lfs, dict) else None)


def _weight_entries(files: list) -> list:
    from effdepth.models.hub.cache import fingerprinted_files

    shas = dict(files)
    return [(name, shas[name]) for name in fingerprinted_files(shas)]


def local_fingerprint(folder: Path) -> tuple[str | None, str]:
    """sha256 of the weight files of a checkpoint folder (safetensors first).

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); _ = (d / "model.safetensors").write_bytes(b"w")
    >>> local_fingerprint(d)[1]
    'file sha256'
    """
    from effdepth.models.hub.cache import fingerprinted_files

    names = fingerprinted_files(p.name for p in folder.iterdir() if p.is_file())
    return (_digest([(n, file_sha256(folder / n)) for n in names]), "file sha256") if names else (None, "unknown")


def _digest(entries: list) -> str:
    return hashlib.sha256(json.dumps(sorted(entries)).encode()).hexdigest()


def refused_checkpoints(repo: str, listings: dict, *, allow_pickle: bool = False) -> dict:
    """``{revision: why}`` for the checkpoints whose hub file list (``listings``) effdepth will not
    load: only pickle weights without ``allow_pickle``. Found while planning, before any download.

    >>> refused_checkpoints("o/m", {"step1": [("pytorch_model.bin", "a")], "step2": [("model.safetensors", "b")]})
    {'step1': 'checkpoint step1 of o/m has only pickle weights (pytorch_model.bin), which can run arbitrary code when loaded; pass --allow-pickle if you trust its source'}
    """
    from effdepth.models.hub import pickle_only, pickle_refusal, weight_files

    refused = {}
    for revision, files in listings.items():
        names = [name for name, _ in files]
        if not weight_files(names, allow_pickle=allow_pickle) and pickle_only(names):
            refused[revision] = pickle_refusal(f"checkpoint {revision} of {repo}")
    return refused


def record_refused(out, jobs: dict, refused: dict, *, log=None) -> dict:
    """Write each refused checkpoint's ``error.json`` (its reason) without running it; ``{key: status}``.
    A checkpoint measured before (with ``--allow-pickle``) keeps its result."""
    statuses: dict = {}
    for job in unfinished(list(jobs.values()), out, statuses, log or (lambda line: None)):
        statuses[job.key] = record(out, job, {"status": "error", "error": refused[job.tag], "type": "EffdepthError"})
    return statuses


def find_duplicates(checkpoints: list[Checkpoint], fingerprints: dict) -> dict:
    """``{revision: earlier revision with the same weights}``, in training order.

    >>> cps, _ = parse_revisions(["step1", "step2", "step3"])
    >>> find_duplicates(cps, {"step1": ("a", ""), "step2": ("a", ""), "step3": (None, "")})
    {'step2': 'step1'}
    """
    first, duplicates = {}, {}
    for c in checkpoints:
        fp = fingerprints.get(c.revision, (None, ""))[0]
        if fp is None:
            continue
        if fp in first:
            duplicates[c.revision] = first[fp]
        else:
            first[fp] = c.revision
    return duplicates


# --------------------------------------------------------------------------- jobs and rows


def _job(found: Discovered, c: Checkpoint, opts: dict, fingerprint: tuple) -> Job:
    local = found.kind == "local"
    model = SuiteModel(found.model, family=guess_family(found.model) if not local else "local")
    extra = _checkpoint_columns(c, {c.revision: fingerprint})
    return Job(
        model,
        opts,
        revision=None if local else c.revision,
        source=c.path if local else None,
        tag=c.revision,
        name=Path(found.model).name if local else found.model,
        weights=fingerprint[0],
        extra=extra,
        tokenizer=_shared_tokenizer(Path(c.path)) if local else None,
    )


def _shared_tokenizer(checkpoint: Path) -> str | None:
    # Training scripts often save the tokenizer once, next to the checkpoints.
    if any((checkpoint / f).is_file() for f in TOKENIZER_FILES):
        return None
    parent = checkpoint.parent
    return str(parent) if any((parent / f).is_file() for f in TOKENIZER_FILES) else None


def trajectory_rows(out, checkpoints: list, jobs: dict, duplicates: dict, fingerprints: dict) -> list[dict]:
    """Rows in training order; a duplicate repeats its original's numbers with status ``duplicate``."""
    measured = {rev: summary_rows(out, [job]) for rev, job in jobs.items()}
    rows = []
    for c in checkpoints:
        if c.revision in duplicates:
            original = duplicates[c.revision]
            for r in measured[original]:
                rows.append(
                    {
                        **r,
                        **_checkpoint_columns(c, fingerprints),
                        "revision": c.revision,
                        "duplicate_of": original,
                        "status": "duplicate",
                        "note": f"same weights as {original}",
                    }
                )
        else:
            rows += [{**r, "duplicate_of": None} for r in measured[c.revision]]
    return rows


def _checkpoint_columns(c: Checkpoint, fingerprints: dict) -> dict:
    fp, how = fingerprints.get(c.revision, (None, "unknown"))
    return {
        "step": c.step,
        "tokens": c.tokens,
        "tokens_seen": c.tokens_seen,
        "track": c.track,
        "final": c.final,
        "weights": fp,
        "weights_source": how,
    }


def _write_outputs(outcome: TrajectoryOutcome, found: Discovered, revisions: str, *, figures: bool, log) -> list[Path]:
    summary = {
        "model": found.model,
        "source": found.kind,
        "revisions": revisions,
        "preset": None if outcome.preset is None else outcome.preset.to_dict(),
        "checkpoints": [asdict(c) for c in outcome.checkpoints],
        "duplicates": outcome.duplicates,
        "skipped": outcome.skipped,
        "notes": outcome.notes,
    }
    title = found.model if found.kind == "hub" else Path(found.model).name
    if outcome.preset is not None:
        title = f"{outcome.preset.name} ({title})"
    return write_trajectory(outcome.out, outcome.rows, summary, title=title if figures else None, log=log)


def write_trajectory(out, rows: list, summary: dict, *, title: str | None, log=None) -> list[Path]:
    """``trajectory.{csv,parquet}`` of ``rows``, ``trajectory.json`` of ``summary`` and, with a ``title``, the
    figure; each file written whole or not at all."""
    out = Path(out)
    files = write_table(out, "trajectory", rows, TRAJECTORY_COLUMNS, log=log)
    write_json_atomic(out / "trajectory.json", {"schema": SCHEMA, **summary})  # effdepth.load knows it by its schema
    files.append(out / "trajectory.json")
    if title is not None and any(r["status"] in ("ok", "duplicate") and r.get("D_eff") is not None for r in rows):
        from effdepth.report.style import save_figure
        from effdepth.scale.trajectory.figures import trajectory_figure

        files += save_figure(trajectory_figure(rows, title=title), out / "trajectory")
    return files
