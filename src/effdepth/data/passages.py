"""Corpora to passages: variable-length token sequences, one per sample of passage mode (docs/method.md#passage-mode).

Each document is tokenized whole and its tokens cut (``split``: windows, paragraphs or document, as
``--passage-split`` says), so every token is what the whole text gives. ``num_passages`` are drawn under
``seed`` and kept in corpus order, except a streamed Hugging Face dataset under ``document``, whose first
documents are taken.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from effdepth.data.corpus import check_tokenizer, is_token_ids, load_corpus
from effdepth.data.corpus_prefix import texts_sha256
from effdepth.data.packing import HF_POOL_FACTOR, special_id, tokenizer_definition, tokenizer_len, tokenizer_name
from effdepth.data.text_sources import resolve_text_source
from effdepth.errors import EffdepthError
from effdepth.numerics.similarities import fewest_samples

BOS_CHOICES = ("auto", "always", "never")
SPLITS = ("windows", "paragraphs", "document")
#: Passages with fewer text tokens than this (special tokens not counted) are left out.
MIN_PASSAGE_TOKENS = 8
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")


@dataclass(frozen=True, eq=False)
class Passages:
    """Token sequences of varying length, with their provenance: ``ids`` back to back, ``offsets`` (N+1) where
    each starts, ``starts_with_bos`` which begin with the tokenizer's BOS. Compare by ``sha256``.

    >>> p = Passages.from_rows([[5, 6, 7], [8, 9]], bos_token_id=5)
    >>> p.num_passages, p.lengths.tolist(), p.starts_with_bos.tolist()
    (2, [3, 2], [True, False])
    """

    ids: np.ndarray
    offsets: np.ndarray
    starts_with_bos: np.ndarray
    name: str
    sha256: str
    info: dict = field(default_factory=dict)

    @classmethod
    def from_rows(
        cls, rows, *, bos_token_id: int | None = None, name: str = "tensor", info: dict | None = None
    ) -> "Passages":
        rows = [np.asarray(r, dtype=np.int64) for r in rows]
        ids = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        bos = np.array(
            [bos_token_id is not None and len(r) > 0 and int(r[0]) == bos_token_id for r in rows], dtype=bool
        )
        return cls(ids, offsets, bos, name, passages_sha256(ids, offsets), dict(info or {}))

    @property
    def num_passages(self) -> int:
        return len(self.offsets) - 1

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    def passage(self, index: int) -> np.ndarray:
        return self.ids[self.offsets[index] : self.offsets[index + 1]]

    @property
    def input_ids(self) -> torch.Tensor:
        """Every passage as one ``(N, T)`` tensor, right-padded with 0 (equal-length windows have no padding).

        >>> Passages.from_rows([[5, 6, 7], [8, 9]]).input_ids.tolist()
        [[5, 6, 7], [8, 9, 0]]
        """
        return self.batch(range(self.num_passages))[0]

    def batch(self, indices, pad_id: int = 0) -> tuple:
        """``(input_ids, attention_mask)`` of the passages ``indices``, right-padded to the longest.

        >>> p = Passages.from_rows([[5, 6, 7], [8, 9]])
        >>> ids, mask = p.batch([1, 0], pad_id=0); ids.tolist(), mask.tolist()
        ([[8, 9, 0], [5, 6, 7]], [[1, 1, 0], [1, 1, 1]])
        """
        indices = list(indices)
        width = int(max(self.lengths[i] for i in indices))
        ids = torch.full((len(indices), width), int(pad_id), dtype=torch.int64)
        mask = torch.zeros((len(indices), width), dtype=torch.int64)
        for row, i in enumerate(indices):
            tokens = torch.from_numpy(self.passage(i))
            ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        return ids, mask


def passages_sha256(ids: np.ndarray, offsets: np.ndarray) -> str:
    """Content hash of passages: their count, lengths and int64 little-endian ids.

    >>> passages_sha256(np.array([1, 2, 3]), np.array([0, 1, 3])) == passages_sha256(np.array([1, 2, 3]), np.array([0, 2, 3]))
    False
    """
    digest = hashlib.sha256(f"effdepth-passages-v1 {len(offsets) - 1}\n".encode("ascii"))
    digest.update(np.ascontiguousarray(np.diff(offsets), dtype="<i8").tobytes())
    digest.update(np.ascontiguousarray(ids, dtype="<i8").tobytes())
    return digest.hexdigest()


def check_passage_options(max_len, num_passages, bos, split) -> None:
    """One-line errors for passage options, before anything loads.

    >>> check_passage_options(512, 3, "auto", "windows")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --num-seqs 3 is below 4: similarity across passages needs at least 4 passages
    """
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 2:
        raise EffdepthError(
            f"--seq-len must be an integer >= 2 (the longest passage, in tokens: the drop-pos0 control "
            f"pools from the second token), got {max_len!r}"
        )
    least = fewest_samples().min_samples
    if not isinstance(num_passages, int) or isinstance(num_passages, bool) or num_passages < least:
        raise EffdepthError(
            f"--num-seqs {num_passages} is below {least}: similarity across passages needs at least {least} passages"
        )
    if bos not in BOS_CHOICES:
        raise EffdepthError(f"--bos must be one of {', '.join(BOS_CHOICES)}, got {bos!r}")
    if split not in SPLITS:
        raise EffdepthError(f"--passage-split must be one of {', '.join(SPLITS)}, got {split!r}")


def check_given_rows(mask: np.ndarray) -> None:
    """Token ids given as such, one passage per row: at least 4 rows, refused before the forward pass.

    >>> check_given_rows(np.ones((4, 3), dtype=bool))
    >>> check_given_rows(np.ones((3, 3), dtype=bool))
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: 3 row(s) of token ids given: similarity across passages needs at least 4 passages (one per row); give 4 or more rows
    """
    rows, least = int(mask.shape[0]), fewest_samples().min_samples
    if rows < least:
        raise EffdepthError(
            f"{rows} row(s) of token ids given: similarity across passages needs at least {least} "
            f"passages (one per row); give {least} or more rows"
        )


def special_tokens(tokenizer: Any, bos: str) -> tuple:
    """``(prefix, suffix)`` token ids put around every passage under ``bos`` (``auto``, ``always``, ``never``).

    >>> from effdepth.data.tokenizers import byte_tokenizer
    >>> special_tokens(byte_tokenizer(), "auto"), special_tokens(byte_tokenizer(), "always")
    (([], []), ([256], []))
    """
    if bos == "never":
        return [], []
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    start = next((i for i in range(len(full) - len(plain) + 1) if full[i : i + len(plain)] == plain), 0)
    prefix, suffix = full[:start], full[start + len(plain) :]
    if bos == "always":
        bos_id = special_id(tokenizer, "bos_token_id")
        if bos_id is None:
            raise EffdepthError(
                f"--bos always, but the tokenizer {tokenizer_name(tokenizer)} has no BOS token; "
                "use --bos auto (its own defaults) or never"
            )
        if not prefix or prefix[0] != bos_id:
            prefix = [bos_id] + prefix
    return prefix, suffix


def load_passages(
    spec: Any = None,
    tokenizer: Any = None,
    *,
    max_len: int = 512,
    num_passages: int = 1024,
    seed: int = 0,
    bos: str = "auto",
    split: str = "windows",
) -> Passages:
    """``num_passages`` passages of at most ``max_len`` tokens from a corpus (see the module docstring).

    >>> from effdepth.data.tokenizers import byte_tokenizer
    >>> text = "\\n\\n".join(f"paragraph {i} " + "x" * 20 for i in range(12))
    >>> p = load_passages([text], byte_tokenizer(), max_len=40, num_passages=4, bos="always")
    >>> p.num_passages, p.lengths.tolist(), bool(p.starts_with_bos.all())
    (4, [40, 40, 40, 40], True)
    >>> int(load_passages([text], byte_tokenizer(), max_len=40, num_passages=4, split="paragraphs").lengths.max()) <= 40
    True
    """
    if is_token_ids(spec):
        return _given_passages(spec, tokenizer)
    check_passage_options(max_len, num_passages, bos, split)
    check_tokenizer(tokenizer, spec)
    source = resolve_text_source(spec)
    prefix, suffix = special_tokens(tokenizer, bos)
    budget = max_len - len(prefix) - len(suffix)
    if budget < 1:
        raise EffdepthError(
            f"--seq-len {max_len} leaves no room for text after the {len(prefix) + len(suffix)} special "
            "token(s) the tokenizer adds; use a larger --seq-len"
        )
    stream_in_order = source.lazy and split == "document"
    bodies, documents, complete, longest = _bodies(
        source, tokenizer, budget, split, want=num_passages if stream_in_order else num_passages * HF_POOL_FACTOR
    )
    if len(bodies) < num_passages:
        raise EffdepthError(_too_few(source.name, len(bodies), num_passages, max_len, split, longest, budget))
    chosen = (
        np.arange(num_passages)
        if stream_in_order
        else np.sort(np.random.default_rng(seed).permutation(len(bodies))[:num_passages])
    )
    rows = [prefix + list(bodies[i]) + suffix for i in chosen]
    bos_id = special_id(tokenizer, "bos_token_id")
    info = {
        "source": source.description,
        "documents": documents,
        "documents_complete": complete,
        "passages_available": len(bodies),
        "max_len": max_len,
        "num_passages": num_passages,
        "split": split,
        "bos": bos,
        "prefix_ids": prefix,
        "suffix_ids": suffix,
        "bos_token_id": bos_id,
        "min_passage_tokens": MIN_PASSAGE_TOKENS,
        "seed": seed,
        "sampling": _sampling_text(split, stream_in_order, complete),
        "tokenizer": tokenizer_name(tokenizer),
        "vocab_size": tokenizer_len(tokenizer),
    }
    passages = Passages.from_rows(rows, bos_token_id=bos_id, name=source.name, info=info)
    passages.info.update(
        {
            "tokens": passages.tokens,
            "mean_length": round(float(passages.lengths.mean()), 2),
            "passages_with_bos": int(passages.starts_with_bos.sum()),
        }
    )
    return passages


def _given_passages(spec: Any, tokenizer: Any) -> Passages:
    """Token ids given as such: one passage per row, its real tokens by the attention mask."""
    corpus = load_corpus(spec, tokenizer)
    ids = corpus.input_ids.numpy()
    mask = (
        np.ones_like(ids, dtype=bool) if corpus.attention_mask is None else corpus.attention_mask.numpy().astype(bool)
    )
    check_given_rows(mask)
    rows = [row[keep] for row, keep in zip(ids, mask)]
    bos_id = special_id(tokenizer, "bos_token_id") if tokenizer is not None else None
    info = {
        **corpus.info,
        "split": "given",
        "bos": "as given",
        "sampling": "used exactly as given: one passage per row",
    }
    return Passages.from_rows(rows, bos_token_id=bos_id, name=corpus.name, info=info)


def _too_few(name: str, found: int, wanted: int, max_len: int, split: str, longest: int, budget: int) -> str:
    """The one-line error for a corpus that gives fewer passages than were asked for."""
    if split == "windows":
        return (
            f"corpus '{name}' gives {found:,} windows of exactly {max_len} tokens (its longest document has "
            f"{longest:,} text tokens, a window {budget}), but {wanted:,} were requested; lower --seq-len or "
            "--num-seqs, use a bigger corpus, or --passage-split paragraphs (passages of varying length)"
        )
    return (
        f"corpus '{name}' gives {found:,} passages of {MIN_PASSAGE_TOKENS} to {max_len} tokens ({split} split), "
        f"but {wanted:,} were requested; lower --num-seqs or use a bigger corpus"
    )


def _bodies(source, tokenizer: Any, budget: int, split: str, want: int) -> tuple:
    """``(passage token lists, documents read, whether every document was read, the longest document's tokens)``."""
    bodies: list = []
    documents = longest = 0
    for tokens, starts in _tokenized_documents(source, tokenizer):
        documents += 1
        longest = max(longest, len(tokens))
        if split == "windows":
            bodies += windows(tokens, budget)
        else:
            pieces = [tokens[:budget]] if split == "document" else _pack(tokens, starts, budget)
            bodies += [p for p in pieces if len(p) >= MIN_PASSAGE_TOKENS]
        if source.lazy and len(bodies) >= want:
            return bodies, documents, False, longest
    if documents == 0:
        raise EffdepthError(f"corpus '{source.name}' has no non-empty documents; give a corpus with text in it")
    return bodies, documents, True, longest


#: Tokenized in-memory corpora (not streamed, at most :data:`KEPT_TOKENS`), by (tokenizer, documents).
TOKENIZED_CORPORA_KEPT = 2
KEPT_TOKENS = 1 << 25
_tokenized: dict = {}


def _tokenized_documents(source, tokenizer: Any):
    """Each document's ``(token ids, paragraph starts)``, in order."""
    key = None if source.lazy else _corpus_key(source.documents, tokenizer)
    if key in _tokenized:
        for ids, starts in _tokenized[key]:
            yield ids.tolist(), starts
        return
    kept = []
    for text in source.documents:
        tokens, starts = _document_tokens(tokenizer, text)
        if key is not None:
            kept.append((np.asarray(tokens, dtype=np.int32), starts))
        yield tokens, starts
    if key is not None and sum(len(ids) for ids, _ in kept) <= KEPT_TOKENS:
        while len(_tokenized) >= TOKENIZED_CORPORA_KEPT:
            _tokenized.pop(next(iter(_tokenized)))
        _tokenized[key] = kept


def _corpus_key(documents: list, tokenizer: Any) -> tuple | None:
    """What a corpus's tokens depend on (tokenizer definition, every text); None for a slow tokenizer."""
    definition = tokenizer_definition(tokenizer) if getattr(tokenizer, "is_fast", False) else None
    return None if definition is None else (definition, texts_sha256(documents))


def windows(tokens: list, size: int) -> list:
    """A document's tokens cut into consecutive windows of exactly ``size``, the short remainder dropped.

    >>> windows(list(range(7)), 3)
    [[0, 1, 2], [3, 4, 5]]
    """
    return [tokens[i : i + size] for i in range(0, len(tokens) - size + 1, size)]


def _document_tokens(tokenizer: Any, text: str) -> tuple:
    """A document's token ids (no special tokens) and the token index where each paragraph starts."""
    kwargs = {"add_special_tokens": False, "verbose": False, "split_special_tokens": True}
    breaks = [m.end() for m in _PARAGRAPH_BREAK.finditer(text)]
    if getattr(tokenizer, "is_fast", False):
        encoded = tokenizer(text, return_offsets_mapping=True, **kwargs)
        ids = list(encoded["input_ids"])
        token_starts = np.array([s for s, _ in encoded["offset_mapping"]], dtype=np.int64)
        starts = sorted({int(np.searchsorted(token_starts, b)) for b in breaks} - {0, len(ids)})
        return ids, starts
    # A slow tokenizer has no offsets: each paragraph is tokenized on its own.
    ids, starts = [], []
    for piece in _split_at(text, breaks):
        if ids:
            starts.append(len(ids))
        ids += list(tokenizer(piece, **kwargs)["input_ids"])
    return ids, starts


def _split_at(text: str, cuts: list) -> list:
    edges = [0] + cuts + [len(text)]
    return [text[a:b] for a, b in zip(edges[:-1], edges[1:]) if text[a:b]]


def _pack(tokens: list, starts: list, budget: int) -> list:
    """Consecutive paragraphs (``tokens`` cut at ``starts``) packed greedily into pieces of ``budget`` at most.

    >>> _pack(list(range(10)), [3, 5, 9], 4)
    [[0, 1, 2], [3, 4], [5, 6, 7, 8], [9]]
    """
    edges = [0] + list(starts) + [len(tokens)]
    paragraphs = [tokens[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]
    pieces, current = [], []
    for paragraph in paragraphs:
        while len(paragraph) > budget:
            if current:
                pieces.append(current)
                current = []
            pieces.append(paragraph[:budget])
            paragraph = paragraph[budget:]
        if len(current) + len(paragraph) > budget:
            pieces.append(current)
            current = []
        current = current + paragraph
    if current:
        pieces.append(current)
    return pieces


def _sampling_text(split: str, in_order: bool, complete: bool) -> str:
    how = {
        "document": "each document is one passage, its first tokens",
        "paragraphs": "documents tokenized whole and cut at paragraph boundaries; consecutive paragraphs packed "
        f"greedily; passages of {MIN_PASSAGE_TOKENS}+ text tokens",
        "windows": "documents tokenized whole and cut into consecutive windows of exactly --seq-len tokens, the "
        "remainder dropped",
    }[split]
    pool = "the whole corpus" if complete else "the first documents of the split"
    draw = (
        "the first passages, in order"
        if in_order
        else "drawn by numpy default_rng(seed).permutation, kept in corpus order"
    )
    return f"{how}; from {pool}, {draw}; special tokens as --bos says"
