"""Tokenizing and packing: a text source's documents -> the token sequences of a corpus.

Documents are tokenized without special tokens and joined with EOS; the stream is cut into chunks of
``seq_len - 1`` tokens, BOS prepended, and ``num_seqs`` chunks drawn as a prefix of one permutation under
``seed`` (more sequences are a superset), kept in corpus order.
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import re
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from effdepth.data.corpus_prefix import texts_sha256
from effdepth.errors import EffdepthError
from effdepth.results.files import write_atomic

#: For Hugging Face datasets only this many times the requested chunks are read.
HF_POOL_FACTOR = 4
# Documents longer than this are tokenized in pieces, to bound the tokenizer's memory.
_PIECE_CHARS = 1 << 20
_BATCH_DOCS = 64
_STREAMS_PER_TOKENIZER = 4
# Text this long (Shakespeare: 5 MB) has its token stream kept in the effdepth cache too.
_DISK_STREAM_MIN_CHARS = 1 << 20
# Part of a stored stream's key: bump it when tokenizing or packing changes.
_STREAM_FORMAT = 1


# -- What packing reads of a tokenizer ----------------------------------------


def is_int(value: Any) -> bool:
    """A Python or numpy integer, not a bool (numpy ints would not serialise to JSON as they are).

    >>> is_int(np.int64(3)), is_int(True), is_int(3.0)
    (True, False, False)
    """
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def special_id(tokenizer: Any, attribute: str) -> int | None:
    """The tokenizer's ``bos_token_id``, ``eos_token_id``... as an int, or ``None`` when it has none.

    >>> from effdepth.data.tokenizers import byte_tokenizer
    >>> special_id(byte_tokenizer(), "bos_token_id"), special_id(object(), "bos_token_id")
    (256, None)
    """
    value = getattr(tokenizer, attribute, None)
    return int(value) if is_int(value) else None


def tokenizer_name(tokenizer: Any) -> str:
    """The tokenizer's class and, when it has one, the name it was loaded from (for provenance)."""
    name = getattr(tokenizer, "name_or_path", "") or ""
    return f"{type(tokenizer).__name__}({name})" if name else type(tokenizer).__name__


def tokenizer_len(tokenizer: Any) -> int | None:
    """The tokenizer's vocabulary size, or ``None`` for an object without a length."""
    try:
        return int(len(tokenizer))
    except TypeError:
        return None


def tokenizer_definition(tokenizer: Any) -> str | None:
    """The sha256 of a fast tokenizer's whole definition, or ``None`` for one that does not give it."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    return hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()


# -- Token streams -------------------------------------------------------------

# Per tokenizer object (weakly held), a small LRU of token streams keyed by the corpus text's hash.
_STREAM_CACHE: weakref.WeakKeyDictionary[Any, collections.OrderedDict] = weakref.WeakKeyDictionary()


def cached_stream(tokenizer: Any, docs: list[str]) -> np.ndarray:
    """The packed token stream of ``docs``; repeated calls in one process reuse it."""
    key = (texts_sha256(docs), special_id(tokenizer, "eos_token_id"), tokenizer_len(tokenizer))
    try:
        streams = _STREAM_CACHE.setdefault(tokenizer, collections.OrderedDict())
    except TypeError:  # not weak-referenceable: no caching
        streams = collections.OrderedDict()
    if key in streams:
        streams.move_to_end(key)
        return streams[key]
    stored = _stored_stream_path(tokenizer, key) if sum(map(len, docs)) >= _DISK_STREAM_MIN_CHARS else None
    stream = _read_stored_stream(stored) if stored is not None else None
    if stream is None:
        stream = _pack(_tokenize_all(tokenizer, docs), special_id(tokenizer, "eos_token_id"))
        if stored is not None:
            _store_stream(stored, stream)
    stream.flags.writeable = False  # shared between calls
    streams[key] = stream
    while len(streams) > _STREAMS_PER_TOKENIZER:
        streams.popitem(last=False)
    return stream


def _stored_stream_path(tokenizer: Any, key: tuple) -> Path | None:
    """Where a large corpus's token stream is cached, keyed by all that decides it; ``None`` if unknowable."""
    definition = tokenizer_definition(tokenizer)
    if definition is None:
        return None
    try:
        from importlib.metadata import version

        from effdepth.data.assets import cache_dir

        fields = [_STREAM_FORMAT, _PIECE_CHARS, type(tokenizer).__name__, definition, version("tokenizers"), *key]
        name = hashlib.sha256(json.dumps(fields).encode("utf-8")).hexdigest()[:32]
        return cache_dir() / "streams" / f"{name}.npz"
    except Exception:  # noqa: BLE001 - a stream that cannot be keyed is simply tokenized
        return None


def _read_stored_stream(path: Path) -> np.ndarray | None:
    """A stored stream, or ``None`` when it is missing or damaged (then it is tokenized again)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            stream, digest = data["stream"].astype(np.int64), str(data["sha256"])
    except Exception:  # noqa: BLE001 - missing, truncated, not an npz: tokenize again
        return None
    return stream if hashlib.sha256(stream.tobytes()).hexdigest() == digest else None


def _store_stream(path: Path, stream: np.ndarray) -> None:
    """Keep ``stream`` at ``path``, written whole and renamed into place; a failure only costs the next run time."""
    small = stream.astype(np.int32) if stream.size == 0 or int(stream.max()) < 2**31 else stream
    digest = np.array(hashlib.sha256(stream.tobytes()).hexdigest())
    with contextlib.suppress(EffdepthError):  # write_atomic turns OSError into EffdepthError
        write_atomic(path, writer=lambda f: np.savez(f, stream=small, sha256=digest))


def stream_until(tokenizer: Any, documents: Iterator[str], target: int) -> tuple[np.ndarray, int, bool]:
    """Tokenize documents in order until ``target`` tokens are packed or they run out."""
    token_lists, total, count, batch = [], 0, 0, []
    for doc in documents:
        batch.append(doc)
        if len(batch) == _BATCH_DOCS:
            total += _extend(token_lists, _tokenize_all(tokenizer, batch))
            count, batch = count + len(batch), []
            if total >= target:
                return _pack(token_lists, special_id(tokenizer, "eos_token_id")), count, False
    if batch:
        _extend(token_lists, _tokenize_all(tokenizer, batch))
        count += len(batch)
    return _pack(token_lists, special_id(tokenizer, "eos_token_id")), count, True


def _extend(token_lists: list, new: list) -> int:
    token_lists.extend(new)
    return sum(len(t) + 1 for t in new)


def _tokenize_all(tokenizer: Any, docs: list[str]) -> list[list[int]]:
    """Token ids of each document, no special tokens, long documents in pieces."""
    pieces, owners = [], []
    for index, doc in enumerate(docs):
        for piece in split_long_text(doc, _PIECE_CHARS):
            pieces.append(piece)
            owners.append(index)
    result: list[list[int]] = [[] for _ in docs]
    for start in range(0, len(pieces), _BATCH_DOCS):
        batch = pieces[start : start + _BATCH_DOCS]
        for owner, ids in zip(owners[start : start + _BATCH_DOCS], encode_batch(tokenizer, batch), strict=True):
            result[owner].extend(ids)
    return result


def encode_batch(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """Each text's token ids, no special tokens added (a literal special token in the text stays text)."""
    # verbose=False: we cut the stream ourselves. split_special_tokens: a literal "<|im_start|>" stays text.
    kwargs = {"add_special_tokens": False, "verbose": False, "split_special_tokens": True}
    try:
        encoded = tokenizer(texts, **kwargs)
    except TypeError:
        encoded = tokenizer(texts, add_special_tokens=False)
    return list(encoded["input_ids"])


def split_long_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of about ``limit`` characters after newlines.

    Cuts go only after a newline followed by a non-space character, where a byte-level BPE
    pre-tokenizer splits anyway, so the pieces' tokens are the whole's.

    >>> split_long_text("ab\\ncd\\nef", 4)
    ['ab\\n', 'cd\\n', 'ef']
    """
    if len(text) <= limit:
        return [text]
    pieces, start, last = [], 0, 0
    for match in _CUT.finditer(text):
        end = match.end()
        if end - start > limit and last > start:
            pieces.append(text[start:last])
            start = last
        last = end
    if len(text) - start > limit and last > start:
        pieces.append(text[start:last])
        start = last
    pieces.append(text[start:])
    return pieces


_CUT = re.compile(r"\n(?=\S)")


def _pack(token_lists: list[list[int]], separator: int | None) -> np.ndarray:
    parts = []
    for index, ids in enumerate(token_lists):
        if index and separator is not None:
            parts.append(np.array([separator], dtype=np.int64))
        parts.append(np.asarray(ids, dtype=np.int64))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def choose_chunks(tokens: int, chunk_len: int, num_seqs: int, seed: int, seq_len: int, name: str) -> np.ndarray:
    available = tokens // chunk_len
    if available < num_seqs:
        raise EffdepthError(
            f"corpus '{name}' has {tokens:,} tokens: enough for {available:,} sequences of {seq_len:,} tokens, "
            f"but {num_seqs:,} were requested; lower --num-seqs/--seq-len or use a bigger corpus"
        )
    chosen = np.random.default_rng(seed).permutation(available)[:num_seqs]
    return np.sort(chosen) * chunk_len


def gather_chunks(stream: np.ndarray, starts: np.ndarray, chunk_len: int, bos_id: int | None) -> torch.Tensor:
    rows = stream[starts[:, None] + np.arange(chunk_len)[None, :]]
    if bos_id is not None:
        rows = np.concatenate([np.full((len(starts), 1), bos_id, dtype=np.int64), rows], axis=1)
    return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))


def sampling_text(chunk_len: int, bos_id: int | None, complete: bool) -> str:
    pool = (
        "the whole corpus"
        if complete
        else (f"the first documents of the split, read until {HF_POOL_FACTOR}x the requested chunks were available")
    )
    bos = f"BOS id {bos_id} prepended to each" if bos_id is not None else "no BOS prepended"
    return (
        f"documents tokenized without special tokens and joined with EOS; {pool} cut into non-overlapping "
        f"{chunk_len}-token chunks; num_seqs chunks drawn by numpy default_rng(seed).permutation, "
        f"kept in corpus order; {bos}"
    )
