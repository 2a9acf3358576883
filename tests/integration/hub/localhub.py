"""A local server that speaks the Hugging Face hub's protocol to the real clients, for tests.

``huggingface_hub``, ``transformers`` and ``datasets`` talk to it unchanged when a process starts
with ``HF_ENDPOINT=http://127.0.0.1:PORT`` (and ``HF_HUB_DISABLE_XET=1``): the constants are read
at import, so only processes started after the server (the effdepth commands under test) see it.
Standard library only; written against huggingface_hub 2.4, transformers 5.25 and datasets 5.2
(the pins of the ``test`` extra).

Repositories are read from a folder::

    ROOT/models/OWNER/NAME/branches/BRANCH/<files>     one folder per branch, its files as they are
    ROOT/models/OWNER/NAME/repo.json                   optional: {"gated": "manual"}
    ROOT/datasets/OWNER/NAME/branches/BRANCH/<files>

Each branch's commit is a hash of the repository, the branch and its files, so two branches with
the same weights have different commits and the same LFS sha256, as on the hub.

What it answers (what the three clients ask):

- ``GET /api/{models,datasets}/REPO[/revision/REV]``: id, sha, siblings (with ``blobs=true``: size,
  blobId and the LFS sha256 and size), gated, private;
- ``GET /api/.../REPO/refs``: branches (and empty tags and converts);
- ``GET /api/.../REPO/tree/REV[/PATH]?recursive=``: files and folders;
- ``POST /api/.../REPO/paths-info/REV`` (form ``paths=``): the entries that exist;
- ``HEAD`` and ``GET /[datasets/]REPO/resolve/REV/PATH``: ``X-Repo-Commit``, ``ETag`` (the git blob
  id of a small file, the sha256 of an LFS file), ``X-Linked-Etag`` and ``X-Linked-Size`` for LFS
  files, ``Content-Length``, ``Accept-Ranges``; ``Range`` answered with 206 (416 past the end);
- errors as the hub words them: 404 with ``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound`` or
  ``EntryNotFound``; 401 ``GatedRepo`` for a gated repository's files (its metadata stays public).

Never Xet (no ``X-Xet-Hash``, no ``xetHash``), no pagination (one page), no authentication.

Faults (:meth:`LocalHub.fault`) make it answer a status (500), drop the connection part-way through
a file, or go away altogether (the listening socket closed, so the next connections are refused);
:attr:`LocalHub.requests` records what was asked.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

#: Files the hub keeps in LFS (what .gitattributes of model and dataset repositories track).
LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".parquet",
    ".gguf",
    ".onnx",
    ".arrow",
    ".h5",
    ".msgpack",
)
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class HubFile:
    """One file of a commit: its bytes on disk and what the hub says about it."""

    path: str
    source: Path
    size: int
    oid: str  # the git blob id (sha1 of "blob N\\0" + data)
    sha256: str | None  # LFS files only

    @property
    def etag(self) -> str:
        return self.sha256 or self.oid


@dataclass
class HubRepo:
    kind: str  # "model" or "dataset"
    id: str
    branches: dict  # name -> commit
    commits: dict  # commit -> {path: HubFile}
    gated: str | bool = False

    def commit_of(self, revision: str | None) -> str | None:
        revision = revision or "main"
        if revision in self.branches:
            return self.branches[revision]
        return revision if _COMMIT.match(revision) and revision in self.commits else None


def _read_file(path: str, source: Path) -> HubFile:
    data = source.read_bytes()
    oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    lfs = path.endswith(LFS_SUFFIXES)
    return HubFile(path, source, len(data), oid, hashlib.sha256(data).hexdigest() if lfs else None)


def load_repositories(root: Path) -> dict:
    """``{(kind, id): HubRepo}`` from the folder layout of the module docstring."""
    repos = {}
    for kind in ("model", "dataset"):
        base = Path(root) / f"{kind}s"
        for branches in sorted(base.glob("*/*/branches")) if base.is_dir() else ():
            folder = branches.parent
            repo_id = folder.relative_to(base).as_posix()
            meta = json.loads((folder / "repo.json").read_text()) if (folder / "repo.json").is_file() else {}
            repo = HubRepo(kind, repo_id, {}, {}, meta.get("gated", False))
            for branch in sorted(p for p in branches.iterdir() if p.is_dir()):
                files = {p.relative_to(branch).as_posix(): p for p in sorted(branch.rglob("*")) if p.is_file()}
                entries = {name: _read_file(name, p) for name, p in files.items()}
                digest = hashlib.sha1(f"{kind}:{repo_id}@{branch.name}".encode())
                for name, f in sorted(entries.items()):
                    digest.update(f"\n{name} {f.oid}".encode())
                commit = digest.hexdigest()
                repo.branches[branch.name] = commit
                repo.commits[commit] = entries
            repos[(kind, repo_id)] = repo
    return repos


@dataclass
class Fault:
    """What to do instead of answering a matching request.

    ``pattern`` is searched in ``"METHOD /path"``; ``times`` is how many requests it spoils
    (``None``: all). ``status``: answer that status with an empty body; ``drop_after``: send the
    headers and that many bytes of the body, then close the connection; ``gone``: close the server.
    """

    pattern: str
    times: int | None = 1
    status: int | None = None
    drop_after: int | None = None
    gone: bool = False
    hits: int = 0

    def matches(self, line: str) -> bool:
        return (self.times is None or self.hits < self.times) and re.search(self.pattern, line) is not None


@dataclass
class Request:
    method: str
    path: str
    status: int | None = None
    fault: str | None = None


class LocalHub:
    """The server: ``start()`` on 127.0.0.1 (a free port, or the port it had), ``stop()``, ``url``.

    >>> import tempfile
    >>> hub = LocalHub(tempfile.mkdtemp()).start()
    >>> hub.url.startswith("http://127.0.0.1:")
    True
    >>> hub.stop()
    """

    def __init__(self, root, port: int = 0):
        self.root = Path(root)
        self.port = port
        self.repos: dict = {}
        self.faults: list[Fault] = []
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.reload()

    # ----------------------------------------------------------------- control

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def reload(self) -> None:
        """Read the repositories from the folder again (after a fixture changed it)."""
        self.repos = load_repositories(self.root)

    def start(self) -> LocalHub:
        if self._server is not None:
            return self
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering: the listening socket is closed, so new connections are refused."""
        with self._lock:
            server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def fault(
        self,
        pattern: str,
        *,
        times: int | None = 1,
        status: int | None = None,
        drop_after: int | None = None,
        gone: bool = False,
    ) -> Fault:
        """Spoil the next ``times`` requests matching ``pattern`` (see :class:`Fault`)."""
        f = Fault(pattern, times, status, drop_after, gone)
        with self._lock:
            self.faults.append(f)
        return f

    def clear(self) -> None:
        """No faults, an empty request log."""
        with self._lock:
            self.faults.clear()
            self.requests.clear()

    def commit(self, repo: str, branch: str = "main", kind: str = "model") -> str:
        return self.repos[(kind, repo)].branches[branch]

    def asked(self, pattern: str, method: str | None = None) -> list[Request]:
        """The requests whose path matches ``pattern`` (and ``method``)."""
        with self._lock:
            return [r for r in self.requests if re.search(pattern, r.path) and (method is None or r.method == method)]

    def _take_fault(self, line: str) -> Fault | None:
        with self._lock:
            for f in self.faults:
                if f.matches(line):
                    f.hits += 1
                    return f
        return None

    def _log(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


class _NotFound(Exception):
    def __init__(self, code: str, message: str, status: int = 404, commit: str | None = None):
        super().__init__(message)
        self.code, self.message, self.status, self.commit = code, message, status, commit


class _Handler(BaseHTTPRequestHandler):
    hub: LocalHub
    protocol_version = "HTTP/1.1"
    server_version = "localhub/1"

    def log_message(self, format, *args):  # quiet: the request log is LocalHub.requests
        pass

    # ----------------------------------------------------------------- dispatch

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def _dispatch(self, method: str) -> None:
        self.close_connection = True  # one request per connection: a stopped server leaves no live ones
        url = urlsplit(self.path)
        record = Request(method, url.path)
        self.hub._log(record)
        self._record = record
        fault = self.hub._take_fault(f"{method} {url.path}")
        self._drop_after = None
        if fault is not None:
            record.fault = (
                "gone" if fault.gone else f"status {fault.status}" if fault.status else f"drop after {fault.drop_after}"
            )
            if fault.gone:  # closed before this connection is: the next connections are refused
                self.hub.stop()
                self._abort()
                return
            if fault.status is not None:
                self._send(
                    fault.status, b"Internal Error" if fault.status >= 500 else b"", {"Content-Type": "text/plain"}
                )
                return
            self._drop_after = fault.drop_after
        query = parse_qs(url.query)
        try:
            parts = [unquote(p) for p in url.path.split("/")[1:]]
            if parts[:1] == ["api"]:
                self._api(method, parts[1:], query)
            else:
                self._resolve(method, parts)
        except _NotFound as exc:
            headers = {"X-Error-Message": exc.message, "Content-Type": "application/json"}
            if exc.code:  # the hub names the error for repositories, revisions, files and access, not for other pages
                headers["X-Error-Code"] = exc.code
            if exc.commit:
                headers["X-Repo-Commit"] = exc.commit
            self._send(exc.status, json.dumps({"error": exc.message}).encode(), headers)

    def _abort(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # ----------------------------------------------------------------- repositories

    def _repo(self, kind: str, owner_name: list) -> HubRepo:
        repo_id = "/".join(owner_name)
        repo = self.hub.repos.get((kind, repo_id))
        if repo is None:
            raise _NotFound("RepoNotFound", "Repository not found")
        return repo

    def _commit(self, repo: HubRepo, revision: str | None) -> str:
        commit = repo.commit_of(revision)
        if commit is None:
            raise _NotFound("RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    # ----------------------------------------------------------------- /api

    def _api(self, method: str, parts: list, query: dict) -> None:
        kinds = {"models": "model", "datasets": "dataset"}
        if len(parts) < 3 or parts[0] not in kinds:
            raise _NotFound("", "Sorry, we can't find the page you are looking for.")
        kind, owner_name, rest = kinds[parts[0]], parts[1:3], parts[3:]
        repo = self._repo(kind, owner_name)
        if not rest or rest[0] == "revision":
            revision = "/".join(rest[1:]) if rest else None
            self._json(self._info(repo, self._commit(repo, revision), blobs=_true(query.get("blobs"))))
        elif rest == ["refs"] and method == "GET":
            branches = [
                {"name": b, "ref": f"refs/heads/{b}", "targetCommit": c} for b, c in sorted(repo.branches.items())
            ]
            prs = {"pullRequests": []} if "include_prs" in query else {}
            self._json({"branches": branches, "tags": [], "converts": [], **prs})
        elif rest[0] == "tree" and len(rest) >= 2 and method == "GET":
            commit = self._commit(repo, rest[1])
            self._json(self._tree(repo, commit, "/".join(rest[2:]).strip("/"), _true(query.get("recursive"))))
        elif rest[0] == "paths-info" and len(rest) >= 2 and method == "POST":
            commit = self._commit(repo, "/".join(rest[1:]))
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode()) if length else {}
            self._json([e for p in form.get("paths", []) if (e := self._entry(repo, commit, p.strip("/"))) is not None])
        else:
            raise _NotFound("", "Sorry, we can't find the page you are looking for.")

    def _info(self, repo: HubRepo, commit: str, *, blobs: bool) -> dict:
        siblings = []
        for name, f in sorted(repo.commits[commit].items()):
            s = {"rfilename": name}
            if blobs:
                s.update(size=f.size, blobId=f.oid)
                if f.sha256:
                    s["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(s)
        info = {
            "_id": hashlib.sha1(repo.id.encode()).hexdigest()[:24],
            "id": repo.id,
            "author": repo.id.split("/")[0],
            "sha": commit,
            "lastModified": "2024-01-01T00:00:00.000Z",
            "private": False,
            "gated": repo.gated,
            "disabled": False,
            "tags": [],
            "downloads": 0,
            "likes": 0,
            "siblings": siblings,
            "createdAt": "2024-01-01T00:00:00.000Z",
        }
        if repo.kind == "dataset":
            info["cardData"] = {}
        return info

    def _entry(self, repo: HubRepo, commit: str, path: str) -> dict | None:
        files = repo.commits[commit]
        if path in files:
            f = files[path]
            entry = {"type": "file", "oid": f.oid, "size": f.size, "path": path}
            if f.sha256:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            return entry
        prefix = path + "/"
        if path and any(name.startswith(prefix) for name in files):
            return {
                "type": "directory",
                "oid": hashlib.sha1(f"{commit}:{path}".encode()).hexdigest(),
                "size": 0,
                "path": path,
            }
        return None

    def _tree(self, repo: HubRepo, commit: str, path: str, recursive: bool) -> list:
        files = repo.commits[commit]
        if path and self._entry(repo, commit, path) is None:
            raise _NotFound("EntryNotFound", f'{path} does not exist on "{commit}"', commit=commit)
        prefix = f"{path}/" if path else ""
        names = set()
        for name in files:
            if not name.startswith(prefix):
                continue
            rest = name[len(prefix) :].split("/")
            depth = len(rest) if recursive else 1
            for i in range(1, depth + 1):
                names.add(prefix + "/".join(rest[:i]))
        entries = [self._entry(repo, commit, n) for n in sorted(names)]
        return sorted(entries, key=lambda e: (e["type"] != "directory", e["path"]))

    # ----------------------------------------------------------------- /resolve

    def _resolve(self, method: str, parts: list) -> None:
        kind = "model"
        if parts[:1] in (["datasets"], ["spaces"]):
            kind, parts = parts[0][:-1], parts[1:]
        if len(parts) < 5 or parts[2] != "resolve" or method not in ("GET", "HEAD"):
            raise _NotFound("", "Sorry, we can't find the page you are looking for.")
        repo = self._repo(kind, parts[:2])
        commit = self._commit(repo, parts[3])
        path = "/".join(parts[4:])
        f = repo.commits[commit].get(path)
        if f is None:
            raise _NotFound("EntryNotFound", "Entry not found", commit=commit)
        if repo.gated:
            raise _NotFound(
                "GatedRepo",
                f"Access to {kind} {repo.id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
                status=401,
            )
        headers = {
            "X-Repo-Commit": commit,
            "ETag": f'"{f.etag}"',
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{Path(path).name}"',
        }
        if f.sha256:
            headers.update({"X-Linked-Etag": f'"{f.sha256}"', "X-Linked-Size": str(f.size)})
        start, end = 0, f.size - 1
        status = 200
        wanted = self.headers.get("Range")
        if wanted and method == "GET":
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", wanted.strip())
            if m is None or (not m[1] and not m[2]):
                raise _NotFound("", "Invalid range", status=416)
            if m[1]:
                start, end = int(m[1]), min(int(m[2]) if m[2] else f.size - 1, f.size - 1)
            else:
                start = max(f.size - int(m[2]), 0)
            if start >= f.size or start > end:
                self._send(416, b"", {"Content-Range": f"bytes */{f.size}", **headers})
                return
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{f.size}"
        body = f.source.read_bytes()[start : end + 1] if method == "GET" else b""
        self._send(status, body, headers, length=end - start + 1)

    # ----------------------------------------------------------------- answers

    def _json(self, data) -> None:
        self._send(200, json.dumps(data).encode(), {"Content-Type": "application/json"})

    def _send(self, status: int, body: bytes, headers: dict, *, length: int | None = None) -> None:
        self._record.status = status
        self.send_response(status)
        for key, value in headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.send_header("Connection", "close")
        self.end_headers()
        if self._drop_after is not None and body:
            self.wfile.write(body[: self._drop_after])
            self.wfile.flush()
            self._abort()
            return
        if body:
            self.wfile.write(body)


def _true(values) -> bool:
    return bool(values) and values[0].lower() in ("1", "true", "yes")
