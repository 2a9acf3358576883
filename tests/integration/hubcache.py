"""A local Hugging Face cache for tests: the layout huggingface_hub uses (blobs, snapshots, refs).

Imported by name from the test files (``from hubcache import add_revision``): a
module of its own, since several conftest.py files share that module name.
"""

import hashlib
import os
from pathlib import Path


def git_blob_id(data: bytes) -> str:
    """The id git (and the hub's ETag) gives a small, non-LFS file."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_revision(cache: Path, repo: str, folder: Path, *, branch: str | None, commit: str | None = None) -> str:
    """Put a save_pretrained ``folder`` into ``cache`` as ``repo`` at a commit (and ``branch``), laid out
    as huggingface_hub does: ``models--ORG--NAME/{blobs/<etag>, snapshots/<commit>/<file> -> blob, refs/<branch>}``.
    Weights are LFS files, their blob named by sha256; other files by their git blob id."""
    repo_dir = cache / ("models--" + repo.replace("/", "--"))
    commit = commit or hashlib.sha1(f"{repo}@{branch}@{folder}".encode()).hexdigest()
    snapshot = repo_dir / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo_dir / "blobs").mkdir(exist_ok=True)
    for f in sorted(folder.iterdir()):
        data = f.read_bytes()
        etag = hashlib.sha256(data).hexdigest() if f.suffix in (".safetensors", ".bin") else git_blob_id(data)
        blob = repo_dir / "blobs" / etag
        if not blob.exists():
            blob.write_bytes(data)
        link = snapshot / f.name
        if not link.exists():
            link.symlink_to(os.path.relpath(blob, snapshot))
    if branch is not None:
        (repo_dir / "refs" / branch).parent.mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / branch).write_text(commit)
    return commit
