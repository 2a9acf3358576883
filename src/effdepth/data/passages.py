"""Corpora to passages: variable-length token sequences, one per sample of passage mode (docs/method.md#passage-mode).

``split`` (``--passage-split``): ``windows`` and ``document`` tokenize each document whole and cut its tokens,
so every token is what the whole text gives; ``paragraphs`` cuts the text itself (:func:`text_pieces`) and
tokenizes each passage alone, so every tokenizer gets the same passages. ``num_passages`` are drawn under
``seed`` and kept in corpus order, except a streamed Hugging Face dataset under ``document``, whose first
documents are taken. Each passage's text identity (document, character span, sha256) is kept where known.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from effdepth.data.corpus import check_tokenizer, is_token_ids, load_corpus
from effdepth.data.corpus_prefix import texts_sha256
from effdepth.data.packing import (
    HF_POOL_FACTOR,
    encode_batch,
    special_id,
    tokenizer_definition,
    tokenizer_len,
    tokenizer_name,
)
from effdepth.data.paragraphs import MIN_PASSAGE_BYTES, RESERVED_TOKENS, text_budget, text_pieces
from effdepth.data.text_sources import resolve_text_source
from effdepth.errors import EffdepthError
from effdepth.numerics.similarities import fewest_samples

BOS_CHOICES = ("auto", "always", "never")
SPLITS = ("windows", "paragraphs", "document")
#: ``document`` passages with fewer text tokens than this (special tokens not counted) are left out.
MIN_PASSAGE_TOKENS = 8
IDENTITY_FIELDS = ("document", "start", "end", "text_sha256")


@dataclass(frozen=True, eq=False)
class Passages:
    """Token sequences of varying length, with their provenance: ``ids`` back to back, ``offsets`` (N+1) where
    each starts, ``starts_with_bos`` which begin with the tokenizer's BOS. Compare by ``sha256``; ``identity``
    (or ``None`` where unknown): each passage's document index, character span ``[start, end)`` in it and the
    sha256 of that text, compared across tokenizers by ``info["text_sha256"]``.

    >>> p = Passages.from_rows([[5, 6, 7], [8, 9]], bos_token_id=5)
    >>> p.num_passages, p.lengths.tolist(), p.starts_with_bos.tolist(), p.identity
    (2, [3, 2], [True, False], None)
    """

    ids: np.ndarray
    offsets: np.ndarray
    starts_with_bos: np.ndarray
    name: str
    sha256: str
    info: dict = field(default_factory=dict)
    identity: dict | None = None

    @classmethod
    def from_rows(
        cls,
        rows,
        *,
        bos_token_id: int | None = None,
        name: str = "tensor",
        info: dict | None = None,
        identity: dict | None = None,
    ) -> "Passages":
        """Passages of token ``rows``; ``identity`` (see the class) sets ``info["text_sha256"]``."""
        rows = [np.asarray(r, dtype=np.int64) for r in rows]
        ids = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum([len(r) for r in rows])]).astype(np.int64)
        bos = np.array(
            [bos_token_id is not None and len(r) > 0 and int(r[0]) == bos_token_id for r in rows], dtype=bool
        )
        info = dict(info or {})
        if identity is not None:
            info["text_sha256"] = identity_sha256(identity)
        return cls(ids, offsets, bos, name, passages_sha256(ids, offsets), info, identity)

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


def text_identity(texts, spans) -> dict:
    """The identity of passages ``spans`` (``(document, start, end)`` each) in the documents ``texts``.

    >>> i = text_identity(["ab", "cde"], [(1, 0, 2)])
    >>> i["document"].tolist(), i["end"].tolist(), i["text_sha256"][0] == hashlib.sha256(b"cd").hexdigest()
    ([1], [2], True)
    """
    spans = np.asarray(spans, dtype=np.int64).reshape(-1, 3)
    digests = [hashlib.sha256(texts[d][a:b].encode("utf-8", "surrogatepass")).hexdigest() for d, a, b in spans.tolist()]
    return {
        "document": spans[:, 0].copy(),
        "start": spans[:, 1].copy(),
        "end": spans[:, 2].copy(),
        "text_sha256": np.array(digests, dtype="<U64"),
    }


def take_identity(identity: dict | None, rows) -> dict | None:
    """The identity of the passages ``rows`` (indices or a slice) of ``identity``; ``None`` stays ``None``."""
    return None if identity is None else {k: np.asarray(v)[rows] for k, v in identity.items()}


def identity_sha256(identity: dict) -> str:
    """Digest of every passage's identity, in order: what pairs two results' passages across tokenizers.

    >>> identity_sha256(text_identity(["ab"], [(0, 0, 1)])) == identity_sha256(text_identity(["ab"], [(0, 0, 2)]))
    False
    """
    count = len(identity["document"])
    digest = hashlib.sha256(f"effdepth-text-identity-v1 {count}\n".encode("ascii"))
    for name in IDENTITY_FIELDS[:3]:
        digest.update(np.ascontiguousarray(identity[name], dtype="<i8").tobytes())
    digest.update("".join(map(str, identity["text_sha256"])).encode("ascii"))
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
    >>> p = load_passages([text], byte_tokenizer(), max_len=40, num_passages=4, split="paragraphs")
    >>> int(p.lengths.max()) <= 40, int(p.identity["end"][0] - p.identity["start"][0]) == int(p.lengths[0])
    (True, True)
    """
    if is_token_ids(spec):
        return _given_passages(spec, tokenizer)
    check_passage_options(max_len, num_passages, bos, split)
    check_tokenizer(tokenizer, spec)
    source = resolve_text_source(spec)
    prefix, suffix = special_tokens(tokenizer, bos)
    budget = _budget(max_len, len(prefix) + len(suffix), split)
    stream_in_order = source.lazy and split == "document"
    want = num_passages if stream_in_order else num_passages * HF_POOL_FACTOR
    pool = (
        _text_pool(source, budget, want)
        if split == "paragraphs"
        else _token_pool(source, tokenizer, budget, split, want)
    )
    if len(pool.spans) < num_passages:
        raise EffdepthError(_too_few(source.name, len(pool.spans), num_passages, max_len, split, pool.longest, budget))
    chosen = (
        np.arange(num_passages)
        if stream_in_order
        else np.sort(np.random.default_rng(seed).permutation(len(pool.spans))[:num_passages])
    )
    rows = [prefix + body + suffix for body in pool.bodies(chosen, tokenizer)]
    _check_fit(rows, max_len, split)
    bos_id = special_id(tokenizer, "bos_token_id")
    kept = {
        "paragraphs": {"min_passage_bytes": MIN_PASSAGE_BYTES, "text_budget_bytes": budget},
        "document": {"min_passage_tokens": MIN_PASSAGE_TOKENS},
    }.get(split, {})
    info = {
        "source": source.description,
        "documents": len(pool.texts),
        "documents_complete": pool.complete,
        "passages_available": len(pool.spans),
        "max_len": max_len,
        "num_passages": num_passages,
        "split": split,
        "bos": bos,
        "prefix_ids": prefix,
        "suffix_ids": suffix,
        "bos_token_id": bos_id,
        **kept,
        "seed": seed,
        "sampling": _sampling_text(split, stream_in_order, pool.complete),
        "tokenizer": tokenizer_name(tokenizer),
        "tokenizer_sha256": tokenizer_definition(tokenizer),
        "vocab_size": tokenizer_len(tokenizer),
    }
    identity = pool.identity(chosen)
    passages = Passages.from_rows(rows, bos_token_id=bos_id, name=source.name, info=info, identity=identity)
    passages.info.update(
        {
            "text_sha256": passages.info.get("text_sha256"),
            "tokens": passages.tokens,
            "mean_length": round(float(passages.lengths.mean()), 2),
            "passages_with_bos": int(passages.starts_with_bos.sum()),
        }
    )
    return passages


def _budget(max_len: int, special: int, split: str) -> int:
    """A passage's room for text: tokens (``windows``, ``document``) or UTF-8 bytes (``paragraphs``)."""
    budget = text_budget(max_len, special) if split == "paragraphs" else max_len - special
    if split == "paragraphs" and budget < MIN_PASSAGE_BYTES:
        raise EffdepthError(
            f"--seq-len {max_len} leaves {max(budget, 0)} bytes of text to a paragraphs passage, fewer than the "
            f"{MIN_PASSAGE_BYTES} of the shortest one kept; use --seq-len {max_len - budget + MIN_PASSAGE_BYTES} "
            "or more"
        )
    if budget < 1:
        raise EffdepthError(
            f"--seq-len {max_len} leaves no room for text after the {special} special "
            "token(s) the tokenizer adds; use a larger --seq-len"
        )
    return budget


def _check_fit(rows: list, max_len: int, split: str) -> None:
    """Every passage within ``max_len`` tokens: the split promises it, so a longer one is effdepth's bug."""
    over = next((i for i, row in enumerate(rows) if len(row) > max_len), None)
    if over is not None:
        raise EffdepthError(
            f"passage {over} of the {split} split has {len(rows[over])} tokens, more than --seq-len {max_len}: "
            "effdepth cut it wrongly (a bug); please report it with the corpus and tokenizer"
        )


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
    sizes = (
        f"{MIN_PASSAGE_BYTES} to {budget} bytes of text"
        if split == "paragraphs"
        else f"{MIN_PASSAGE_TOKENS} to {max_len} tokens"
    )
    return (
        f"corpus '{name}' gives {found:,} passages of {sizes} ({split} split), "
        f"but {wanted:,} were requested; lower --num-seqs or use a bigger corpus"
    )


@dataclass
class _Pool:
    """A corpus's candidate passages: ``spans`` ``(document, start, end)`` in ``texts`` (the documents read;
    a span ``None`` where unknown) and, on a split cut on tokens, their ``tokens``."""

    texts: list = field(default_factory=list)
    spans: list = field(default_factory=list)
    tokens: list | None = None
    complete: bool = False
    longest: int = 0  # the longest document's tokens (cut on tokens)

    def bodies(self, chosen, tokenizer: Any) -> list:
        """The token ids of the passages ``chosen``; a passage cut on the text is tokenized alone."""
        if self.tokens is not None:
            return [list(self.tokens[i]) for i in chosen]
        return encode_batch(tokenizer, [self.texts[d][a:b] for d, a, b in (self.spans[i] for i in chosen)])

    def identity(self, chosen) -> dict | None:
        spans = [self.spans[i] for i in chosen]
        return None if any(s is None for s in spans) else text_identity(self.texts, spans)

    def read(self, source) -> "_Pool":
        """The pool of a source read to its end."""
        if not self.texts:
            raise EffdepthError(f"corpus '{source.name}' has no non-empty documents; give a corpus with text in it")
        self.complete = True
        return self


def _text_pool(source, budget: int, want: int) -> _Pool:
    """Paragraphs packed on the text (:func:`~effdepth.data.paragraphs.text_pieces`): no tokenizer decides them."""
    pool = _Pool()
    for text in source.documents:
        pool.texts.append(text)
        pool.spans += [(len(pool.texts) - 1, a, b) for a, b in text_pieces(text, budget, least=MIN_PASSAGE_BYTES)]
        if source.lazy and len(pool.spans) >= want:
            return pool
    return pool.read(source)


def _token_pool(source, tokenizer: Any, budget: int, split: str, want: int) -> _Pool:
    """Windows or each document's first tokens; a span is [first token's start, last token's end) where a
    fast tokenizer gives offsets."""
    pool = _Pool(tokens=[])
    for text, tokens, offsets in _tokenized_documents(source, tokenizer):
        pool.texts.append(text)
        pool.longest = max(pool.longest, len(tokens))
        if split == "windows":
            cuts = [(k * budget, body) for k, body in enumerate(windows(tokens, budget))]
        else:
            cuts = [(0, tokens[:budget])] if min(budget, len(tokens)) >= MIN_PASSAGE_TOKENS else []
        for start, body in cuts:
            pool.tokens.append(body)
            last = start + len(body) - 1
            known = offsets is not None
            pool.spans.append((len(pool.texts) - 1, int(offsets[start, 0]), int(offsets[last, 1])) if known else None)
        if source.lazy and len(pool.spans) >= want:
            return pool
    return pool.read(source)


#: Tokenized in-memory corpora (not streamed, at most :data:`KEPT_TOKENS`), by (tokenizer, documents).
TOKENIZED_CORPORA_KEPT = 2
KEPT_TOKENS = 1 << 25
_tokenized: dict = {}


def _tokenized_documents(source, tokenizer: Any):
    """Each document's ``(text, token ids, token character offsets or None)``, in order."""
    key = None if source.lazy else _corpus_key(source.documents, tokenizer)
    if key in _tokenized:
        for text, (ids, offsets) in zip(source.documents, _tokenized[key]):
            yield text, ids.tolist(), offsets
        return
    kept = []
    for text in source.documents:
        tokens, offsets = _document_tokens(tokenizer, text)
        if key is not None:
            kept.append((np.asarray(tokens, dtype=np.int32), offsets))
        yield text, tokens, offsets
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
    """A document's token ids (no special tokens) and, from a fast tokenizer, each token's ``(start, end)``
    characters (int32, ``(n, 2)``); a slow tokenizer gives no offsets (``None``)."""
    kwargs = {"add_special_tokens": False, "verbose": False, "split_special_tokens": True}
    if not getattr(tokenizer, "is_fast", False):
        return list(tokenizer(text, **kwargs)["input_ids"]), None
    encoded = tokenizer(text, return_offsets_mapping=True, **kwargs)
    return list(encoded["input_ids"]), np.asarray(encoded["offset_mapping"], dtype=np.int32).reshape(-1, 2)


def _sampling_text(split: str, in_order: bool, complete: bool) -> str:
    how = {
        "document": "each document is one passage, its first tokens",
        "paragraphs": "documents cut on the text at paragraph boundaries (blank lines), consecutive paragraphs "
        f"packed greedily into at most --seq-len less {RESERVED_TOKENS} UTF-8 bytes (a longer paragraph cut at "
        f"a space), passages of {MIN_PASSAGE_BYTES}+ bytes, each tokenized alone: the same passages under "
        "every tokenizer",
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
