"""The ``paragraphs`` split, cut on the text: the same passages for every tokenizer (docs/method.md#passage-mode).

Paragraphs (text between blank lines) are packed greedily into passages of at most a budget of UTF-8 bytes;
a token covers at least one byte, so a passage of ``--seq-len`` less :data:`RESERVED_TOKENS` bytes fits
``--seq-len`` tokens under any tokenizer, and no token count decides where a passage ends.
"""

from __future__ import annotations

import re

import numpy as np

#: Passages of fewer UTF-8 bytes than this (about 8 tokens of English) are left out.
MIN_PASSAGE_BYTES = 32
#: Tokens of --seq-len left to special tokens (BOS, EOS) and a SentencePiece prefix space: the text budget is
#: --seq-len less these whatever the tokenizer, so the passages are every tokenizer's (one that adds more
#: special tokens gets a smaller budget, and passages of its own).
RESERVED_TOKENS = 3
PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n\s*")


def text_budget(max_len: int, special: int) -> int:
    """The UTF-8 bytes of a passage of at most ``max_len`` tokens, ``special`` of them the tokenizer's own.

    >>> text_budget(128, 1), text_budget(128, 4)
    (125, 123)
    """
    return max_len - max(RESERVED_TOKENS, special + 1)


def text_pieces(text: str, budget: int, least: int = 1) -> list:
    """``[(start, end)]``: consecutive paragraphs of ``text`` packed greedily into character spans of at most
    ``budget`` UTF-8 bytes; a longer paragraph is cut at its last whitespace within the budget (else at a
    character), its rest packed on with the paragraphs after it. Spans of fewer than ``least`` bytes are left out.

    >>> text = "ab cd\\n\\nef\\n\\n  ghij klmnopq"
    >>> [text[a:b] for a, b in text_pieces(text, 10)]
    ['ab cd\\n\\nef', 'ghij', 'klmnopq']
    >>> [text[a:b] for a, b in text_pieces(text, 10, least=5)], text_pieces("abcdefgh", 3)
    (['ab cd\\n\\nef', 'klmnopq'], [(0, 3), (3, 6), (6, 8)])
    """
    ends = utf8_ends(text)
    pieces, current = [], None
    for start, end in paragraph_spans(text):
        while ends[end] - ends[start] > budget:
            if current:
                pieces.append(current)
                current = None
            cut, start = _cut(text, ends, start, budget)
            pieces.append(cut)
        if current and ends[end] - ends[current[0]] > budget:
            pieces.append(current)
            current = None
        current = (current[0] if current else start, end)
    if current:
        pieces.append(current)
    return [(a, b) for a, b in pieces if ends[b] - ends[a] >= least]


def paragraph_spans(text: str) -> list:
    """``[(start, end)]`` of each paragraph (text between blank lines), its surrounding whitespace left out.

    >>> paragraph_spans(" a b \\n\\n\\n c\\n")
    [(1, 4), (9, 10)]
    """
    edges = [0] + [e for m in PARAGRAPH_BREAK.finditer(text) for e in (m.start(), m.end())] + [len(text)]
    spans = []
    for a, b in zip(edges[::2], edges[1::2]):
        piece = text[a:b]
        stripped = piece.strip()
        if stripped:
            start = a + len(piece) - len(piece.lstrip())
            spans.append((start, start + len(stripped)))
    return spans


def utf8_ends(text: str) -> np.ndarray:
    """``(len(text) + 1,)``: the UTF-8 bytes of ``text[:i]`` for every ``i``.

    >>> utf8_ends("aé€😀").tolist()
    [0, 1, 3, 6, 10]
    """
    points = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    sizes = 1 + (points >= 0x80).astype(np.int64) + (points >= 0x800) + (points >= 0x10000)
    return np.concatenate([[0], np.cumsum(sizes)])


def _cut(text: str, ends: np.ndarray, start: int, budget: int) -> tuple:
    """``((start, end), resume)``: the longest head of ``text[start:]`` within ``budget`` bytes that ends before
    a whitespace (else at a character), and where the rest begins (its leading whitespace skipped)."""
    limit = int(np.searchsorted(ends, ends[start] + budget, side="right")) - 1  # text[start:limit] fits
    limit = max(limit, start + 1)  # a character wider than the budget still moves on
    space = next((i for i in range(limit, start, -1) if text[i].isspace()), None)
    if space is None:
        return (start, limit), limit
    end, resume = space, space
    while text[end - 1].isspace():
        end -= 1
    while resume < len(text) and text[resume].isspace():
        resume += 1
    return (start, end), resume
