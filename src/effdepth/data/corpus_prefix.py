"""The first documents of a Hugging Face dataset's split, kept as a local JSONL copy.

A passage-mode run reads only a streamed corpus's first documents; ``effdepth fetch`` writes those, in
stream order, to ``$EFFDEPTH_CACHE/corpora/<dataset>/<config>/<split>/first-<N>.jsonl`` and then
``first-<N>.json`` (commit, raw rows taken, sha256). Only a copy with its ``.json`` counts. A run reads
the copy before the network.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from effdepth.data.assets import cache_dir
from effdepth.errors import EffdepthError
from effdepth.results.files import write_atomic

#: Part of every copy's description; bump when the layout or the meaning of a field changes.
PREFIX_FORMAT = 1
_COPY = re.compile(r"^first-(\d+)\.json$")


@dataclass(frozen=True)
class CorpusPrefix:
    """A local copy of a split's first documents. ``meta`` holds ``dataset``, ``config``, ``split``,
    ``commit``, ``documents``, ``rows`` (raw rows read), ``complete`` (the split ended first) and ``sha256``.
    """

    path: Path
    meta: dict

    @property
    def documents(self) -> int:
        return int(self.meta["documents"])

    @property
    def complete(self) -> bool:
        return bool(self.meta.get("complete"))

    @property
    def commit(self) -> str | None:
        return self.meta.get("commit")

    def covers(self, documents: int) -> bool:
        """Whether the copy answers a run that reads at most ``documents`` documents."""
        return self.complete or self.documents >= documents

    def texts(self) -> Iterator[str]:
        """The documents in stream order, read one line at a time."""
        with self.path.open(encoding="utf-8") as fh:
            for number, line in enumerate(fh, 1):
                try:
                    yield json.loads(line)["text"]
                except (ValueError, KeyError, TypeError):
                    raise EffdepthError(
                        f"{self.path} line {number} is not a JSON object with a 'text' string; the local copy is "
                        f"damaged: delete {self.path.parent} and run effdepth fetch again"
                    ) from None


def prefix_folder(name: str, config: str | None, split: str) -> Path:
    """Where the copies of ``name``'s ``config``/``split`` live.

    >>> prefix_folder("HuggingFaceFW/fineweb-edu", "sample-10BT", "train").parts[-4:]
    ('corpora', 'HuggingFaceFW--fineweb-edu', 'sample-10BT', 'train')
    """
    return corpora_dir() / name.replace("/", "--") / (config or "default") / split


def corpora_dir() -> Path:
    """The folder of every local copy, in effdepth's cache (``$EFFDEPTH_CACHE``)."""
    return cache_dir() / "corpora"


def cached_prefix(name: str, config: str | None, split: str) -> CorpusPrefix | None:
    """The largest complete local copy of the split's first documents, or ``None``."""
    folder = prefix_folder(name, config, split)
    best = None
    for meta_path in folder.glob("first-*.json") if folder.is_dir() else ():
        if not _COPY.match(meta_path.name):
            continue
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        data = meta_path.with_suffix(".jsonl")
        if meta.get("format") != PREFIX_FORMAT or not data.is_file():
            continue
        if best is None or (meta["complete"], meta["documents"]) > (best.meta["complete"], best.documents):
            best = CorpusPrefix(data, meta)
    return best


def write_prefix(
    name: str,
    config: str | None,
    split: str,
    rows: Iterable[tuple[int, str]],
    documents: int,
    *,
    commit: str | None = None,
    progress=None,
) -> CorpusPrefix:
    """Write the first ``documents`` texts of ``rows`` (``(raw rows read so far, text)``) as a local copy.

    >>> import os, tempfile
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"EFFDEPTH_CACHE": tempfile.mkdtemp()}):
    ...     p = write_prefix("acme/notes", None, "train", [(1, "one"), (3, "two"), (4, "three")], 2, commit="c" * 40)
    ...     p.documents, p.meta["rows"], p.complete, list(p.texts()), cached_prefix("acme/notes", None, "train") == p
    (2, 3, False, ['one', 'two'], True)
    """
    if documents < 1:
        raise EffdepthError(f"--documents {documents} must be at least 1")
    folder = prefix_folder(name, config, split)
    digest = hashlib.sha256()
    state = {"documents": 0, "rows": 0}

    def write_lines(fh) -> None:
        for rows_read, text in rows:
            fh.write((json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8"))
            _update_sha256(digest, text)
            state["documents"] += 1
            state["rows"] = rows_read
            if progress is not None:
                progress(state["documents"])
            if state["documents"] >= documents:
                return
        state["complete"] = True

    data = write_atomic(folder / f"first-{documents}.jsonl", writer=write_lines)
    meta = {
        "format": PREFIX_FORMAT,
        "dataset": name,
        "config": config,
        "split": split,
        "commit": commit,
        "documents": state["documents"],
        "rows": state["rows"],
        "complete": bool(state.get("complete")),
        "sha256": digest.hexdigest(),
    }
    write_atomic(data.with_suffix(".json"), (json.dumps(meta, indent=1) + "\n").encode("utf-8"))
    return CorpusPrefix(data, meta)


def texts_sha256(texts: Iterable[str]) -> str:
    """sha256 over the texts, each as its UTF-8 byte length, ``:`` and its bytes (so boundaries count).

    >>> texts_sha256(["ab", "c"]) != texts_sha256(["a", "bc"])
    True
    """
    digest = hashlib.sha256()
    for text in texts:
        _update_sha256(digest, text)
    return digest.hexdigest()


def _update_sha256(digest, text: str) -> None:
    data = text.encode("utf-8", "surrogatepass")  # JSON may hold lone surrogates
    digest.update(f"{len(data)}:".encode("ascii"))
    digest.update(data)
