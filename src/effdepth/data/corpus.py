"""Corpora to fixed-length token sequences: the start of the data flow.

Text is read by :mod:`.text_sources` and packed by :mod:`.packing`; token ids are used exactly as given.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from effdepth.data.packing import (
    HF_POOL_FACTOR,
    cached_stream,
    choose_chunks,
    gather_chunks,
    is_int,
    sampling_text,
    special_id,
    stream_until,
    tokenizer_len,
    tokenizer_name,
)
from effdepth.data.text_sources import ACCEPTED_FORMS, TextSource, resolve_text_source
from effdepth.errors import EffdepthError, tokenizer_hint


@dataclass(frozen=True, eq=False)
class TokenizedCorpus:
    """Token sequences ready for a causal LM, with their provenance: ``input_ids`` int64 ``(num_seqs,
    seq_len)``, ``attention_mask`` the same shape (1 = real token) or ``None`` when every position is real,
    ``sha256`` (:func:`ids_sha256` of the two; compare corpora by it) and a JSON-able ``info``.

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
        return f"TokenizedCorpus({self.name!r}, {self.num_seqs}x{self.seq_len}{masked}, sha256={self.sha256[:12]}…)"


def ids_sha256(input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> str:
    """Content hash of token ids (and mask): ``b"effdepth-ids-v1 {rows}x{cols}\\n"``, the ids' int64
    little-endian bytes, then with a mask ``b"attention_mask\\n"`` and its bytes.

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

    ``spec``: ``None`` / ``"shakespeare"``; a text file (``.jsonl``: a ``text`` field per line) or a
    folder of them; ``"hf:NAME[:CONFIG[:SPLIT]]"``; a list of strings; or token ids (a 2-D integer
    tensor/array or an ``{"input_ids", "attention_mask"}`` mapping) used exactly as given, ids bounded by
    ``vocab_size`` (default ``len(tokenizer)``).

    >>> from effdepth.data.tokenizers import byte_tokenizer
    >>> c = load_corpus(["to be or not to be"], byte_tokenizer(), seq_len=4, num_seqs=2)
    >>> c.input_ids[:, 0].tolist(), c.input_ids.shape
    ([256, 256], torch.Size([2, 4]))
    """
    if is_token_ids(spec):
        return _from_token_ids(spec, tokenizer, vocab_size)
    seq_len, num_seqs, seed = _check_sizes(seq_len, num_seqs, seed)
    check_tokenizer(tokenizer, spec)
    return _from_text(resolve_text_source(spec), tokenizer, seq_len, num_seqs, seed, add_bos)


def _from_text(
    source: TextSource, tokenizer: Any, seq_len: int, num_seqs: int, seed: int, add_bos: bool
) -> TokenizedCorpus:
    bos_id = special_id(tokenizer, "bos_token_id") if add_bos else None
    chunk_len = seq_len - (1 if bos_id is not None else 0)
    if source.lazy:
        target = num_seqs * HF_POOL_FACTOR * chunk_len
        stream, documents, complete = stream_until(tokenizer, source.documents, target)
    else:
        stream, documents, complete = cached_stream(tokenizer, source.documents), len(source.documents), True
    if documents == 0:
        raise EffdepthError(f"corpus '{source.name}' has no non-empty documents; give a corpus with text in it")
    starts = choose_chunks(stream.size, chunk_len, num_seqs, seed, seq_len, source.name)
    input_ids = gather_chunks(stream, starts, chunk_len, bos_id)
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
        "separator_token_id": special_id(tokenizer, "eos_token_id"),
        "seed": seed,
        "chunk_starts": [int(s) for s in starts],
        "sampling": sampling_text(chunk_len, bos_id, complete),
        "tokenizer": tokenizer_name(tokenizer),
        "vocab_size": tokenizer_len(tokenizer),
    }
    return TokenizedCorpus(input_ids, None, source.name, ids_sha256(input_ids), info)


# -- Argument checks


def _check_sizes(seq_len: Any, num_seqs: Any, seed: Any) -> tuple[int, int, int]:
    """The three as plain ints (numpy ints would not serialise to JSON), or an EffdepthError."""
    if not is_int(seq_len) or seq_len < 2:
        raise EffdepthError(
            f"--seq-len must be an integer >= 2 (a BOS token plus at least one text token), got {seq_len!r}"
        )
    if not is_int(num_seqs) or num_seqs < 1:
        raise EffdepthError(f"--num-seqs must be an integer >= 1, got {num_seqs!r}")
    if not is_int(seed) or seed < 0:
        raise EffdepthError(f"--seed must be a non-negative integer, got {seed!r}")
    return int(seq_len), int(num_seqs), int(seed)


def check_tokenizer(tokenizer: Any, spec: Any) -> None:
    """A text corpus needs a callable (Hugging Face) tokenizer; an EffdepthError says what to load.

    >>> try:
    ...     check_tokenizer(None, "shakespeare")
    ... except Exception as exc:
    ...     print(str(exc).split(";")[0])
    corpus 'shakespeare' is text and needs a tokenizer to become token ids
    """
    if tokenizer is None:
        label = "shakespeare" if spec is None else spec if isinstance(spec, (str, os.PathLike)) else "texts"
        raise EffdepthError(f"corpus '{label}' is text and needs a tokenizer to become token ids; {tokenizer_hint()}")
    if not callable(tokenizer):
        raise EffdepthError(
            f"tokenizer must be a Hugging Face tokenizer (callable), got {type(tokenizer).__name__}; "
            "load one with transformers.AutoTokenizer.from_pretrained"
        )


# -- Token ids given by the caller


def _from_token_ids(spec: Any, tokenizer: Any, vocab_size: int | None) -> TokenizedCorpus:
    if isinstance(spec, Mapping):
        ids, mask, kind = _unpack_mapping(spec)
    else:
        ids, mask, kind = _as_int64("token ids", spec), None, type(spec).__name__
    if vocab_size is None and tokenizer is not None:
        vocab_size = tokenizer_len(tokenizer)
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
        "tokenizer": None if tokenizer is None else tokenizer_name(tokenizer),
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

    ``allow_binary_float`` accepts a float array of only 0.0 and 1.0 (a mask); nothing is rounded.
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


# -- The spec, before a model loads


def is_token_ids(spec: Any) -> bool:
    """Token ids given as such (a 2-D integer tensor/array or an ``input_ids`` mapping), used exactly as given.

    >>> import torch
    >>> is_token_ids(torch.zeros(2, 3, dtype=torch.long)), is_token_ids("shakespeare")
    (True, False)
    """
    return isinstance(spec, (torch.Tensor, np.ndarray, Mapping))


def check_corpus_spec(spec: Any) -> None:
    """The checks of a corpus that cost nothing (a named path exists), before a model loads.

    >>> check_corpus_spec("shakespeare")
    >>> try:
    ...     check_corpus_spec("no/such/file.txt")
    ... except Exception as exc:
    ...     print(str(exc).split(";")[0])
    corpus path no/such/file.txt does not exist
    """
    if spec is None or is_token_ids(spec) or not isinstance(spec, (str, os.PathLike)):
        return
    if isinstance(spec, str) and (spec == "shakespeare" or spec.startswith("hf:")):
        return
    path = Path(spec).expanduser()
    if not path.exists():
        raise EffdepthError(f"corpus path {path} does not exist; accepted forms: {ACCEPTED_FORMS}")
