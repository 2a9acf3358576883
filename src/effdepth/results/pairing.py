"""Whether two results hold the same passages, so their numbers pair passage by passage (``effdepth compare``).

Two results pair when their passages' text identities agree (``provenance["corpus"]["text_sha256"]``: each
passage's document, character span and text hash, in order), whatever their tokenizers; a result without one
(measured before effdepth kept it, token ids given, a slow tokenizer on a split cut on tokens) pairs by its
token content (``sha256``) under the same tokenizer. Otherwise one line says what differs, in the order a
user would fix it, and the command that measures B on A's passages.
"""

from __future__ import annotations

import shlex

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.results.provenance import corpus_record
from effdepth.results.store import PooledStore

#: The split cut on the text, which pairs across tokenizers.
TEXT_SPLIT = "paragraphs"
#: The shortest --seq-len that leaves a paragraphs passage room for its text (data/paragraphs.py: 32 bytes of
#: text, 3 tokens kept for special tokens).
TEXT_SPLIT_MIN_LEN = 35


class PassagesToMeasure:
    """Passages a model is about to be measured on, read as pairing reads a result, so a pair that would not
    match is refused before the weights load (``effdepth compare`` given a model).

    ``passages``: :class:`~effdepth.data.passages.Passages`; ``model``: the model as the command line names it.
    """

    def __init__(self, passages, model: str):
        self.passages = passages
        self.provenance = {"corpus": corpus_record(passages), "model": {"id": str(model)}}
        self.config: dict = {}
        self.pooled = None


def pairing_problem(a, b, a_name: str = "A", b_name: str = "B") -> str | None:
    """``None`` when the results ``a`` and ``b`` hold the same passages, else one line: what differs and the
    command that would measure ``b``'s model on ``a``'s passages.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 4, 6, 8), bootstrap=0)
    >>> pairing_problem(r, r)
    'A records no passages (states given, not a corpus), so nothing says which passages it holds; compare results that effdepth measure made from a corpus'
    """
    pa, pb = _record(a), _record(b)
    for name, record in ((a_name, pa), (b_name, pb)):
        if not (record.get("text_sha256") or record.get("sha256")):
            return (
                f"{name} records no passages (states given, not a corpus), so nothing says which passages it "
                "holds; compare results that effdepth measure made from a corpus"
            )
    by_text = bool(pa.get("text_sha256") and pb.get("text_sha256"))
    tokenizers_differ = _tokenizers_differ(pa, pb)
    if by_text and pa["text_sha256"] == pb["text_sha256"]:
        return None
    if not by_text and pa.get("sha256") == pb.get("sha256") and not tokenizers_differ:
        return None
    differences = _option_differences(pa, pb, a_name, b_name)
    fix = f"measure {b_name} on {a_name}'s passages: {measure_command(b, pa)}"
    if tokenizers_differ and (not by_text or _split(pa) != TEXT_SPLIT):
        differences.append(_tokenizer_difference(pa, by_text, a_name, b_name))
        if not any(d.startswith("corpus") for d in differences):
            fix = (
                f"measure both on --passage-split {TEXT_SPLIT}, which is cut on the text: "
                f"{measure_command(a, pa, split=TEXT_SPLIT)} and {measure_command(b, pa, split=TEXT_SPLIT)}"
            )
    if not differences:
        first = first_differing_passage(a, b, a_name, b_name)
        differences.append(first or f"their passages' {'texts' if by_text else 'tokens'} differ")
    if not by_text:
        old = [n for n, r in ((a_name, pa), (b_name, pb)) if not r.get("text_sha256")]
        differences[-1] += (
            f" (compared by token content: {' and '.join(old)} record{'s' if len(old) == 1 else ''} no text "
            "identity, measured before effdepth kept one or from token ids)"
        )
    return f"{a_name} and {b_name} hold different passages: {'; '.join(differences)}; {fix}"


def check_pairing(a, b, a_name: str = "A", b_name: str = "B") -> None:
    """Raise :class:`~effdepth.errors.EffdepthError` with :func:`pairing_problem`'s line when they do not pair."""
    problem = pairing_problem(a, b, a_name, b_name)
    if problem is not None:
        raise EffdepthError(problem)


def first_differing_passage(a, b, a_name: str = "A", b_name: str = "B") -> str | None:
    """``passage i differs: document d characters [s, e) in A, ... in B`` from the two results' pooled stores;
    ``None`` when either has no stored identity or they agree as far as the shorter goes."""
    ia, ib = stored_identity(a), stored_identity(b)
    if ia is None or ib is None:
        return None
    n = min(len(ia["document"]), len(ib["document"]))
    differ = np.zeros(n, dtype=bool)
    for field in ("document", "start", "end", "text_sha256"):
        differ |= np.asarray(ia[field][:n]) != np.asarray(ib[field][:n])
    if not differ.any():
        return None
    i = int(np.flatnonzero(differ)[0])

    def where(identity) -> str:
        return f"document {int(identity['document'][i])} characters [{int(identity['start'][i])}, {int(identity['end'][i])})"

    return f"passage {i} differs: {where(ia)} in {a_name}, {where(ib)} in {b_name}"


def stored_identity(result) -> dict | None:
    """The text identity in a result's pooled store (or of :class:`PassagesToMeasure`); ``None`` without a
    readable store or one."""
    if isinstance(result, PassagesToMeasure):
        return result.passages.identity
    if getattr(result, "pooled", None) is None:
        return None
    try:
        return PooledStore.open(result.pooled).identity
    except (EffdepthError, OSError, ValueError, KeyError):
        return None


def measure_command(result, passages: dict, split: str | None = None) -> str:
    """``effdepth measure`` of ``result``'s model on the passages ``passages`` (a :func:`_record`) describes.

    ``split`` another split to cut them with (the --seq-len raised to what a paragraphs passage needs).

    >>> measure_command(None, {"name": "file:/t.txt", "split": "windows", "max_len": 64, "num_passages": 32,
    ...                        "seed": 0, "bos": "auto"}, split="paragraphs")
    'effdepth measure MODEL --corpus /t.txt --passage-split paragraphs --seq-len 64 --num-seqs 32 --seed 0 --bos auto'
    >>> measure_command(None, {"name": "shakespeare", "split": "windows", "max_len": 16}, split="paragraphs")
    'effdepth measure MODEL --corpus shakespeare --passage-split paragraphs --seq-len 35'
    """
    model = (getattr(result, "provenance", None) or {}).get("model") or {}
    parts = ["effdepth", "measure", _model_argument(model)]
    if model.get("source") == "hub" and model.get("revision") not in (None, "main"):
        parts += ["--revision", str(model["revision"])]
    max_len = passages.get("max_len")
    if split == TEXT_SPLIT and max_len is not None:
        max_len = max(int(max_len), TEXT_SPLIT_MIN_LEN)
    flags = (
        ("--corpus", _corpus_argument(passages.get("name"))),
        ("--passage-split", split or passages.get("split")),
        ("--seq-len", max_len),
        ("--num-seqs", passages.get("num_passages")),
        ("--seed", passages.get("seed")),
        ("--bos", passages.get("bos")),
    )
    for flag, value in flags:
        if value is not None and not (flag == "--passage-split" and value == "given"):
            parts += [flag, str(value)]
    return shlex.join(parts)


def _record(result) -> dict:
    """What a result says of its passages: its provenance's corpus record, the config filling gaps."""
    corpus = dict((getattr(result, "provenance", None) or {}).get("corpus") or {})
    config = getattr(result, "config", None) or {}
    for key, fallback in (("split", "passage_split"), ("max_len", "seq_len"), ("num_passages", "num_passages")):
        if corpus.get(key) is None and config.get(fallback) is not None:
            corpus[key] = config[fallback]
    for key in ("bos", "seed"):
        corpus.setdefault(key, config.get(key))
    return corpus


def _split(record: dict) -> str | None:
    return record.get("split")


def _option_differences(pa: dict, pb: dict, a_name: str, b_name: str) -> list:
    """The options that make passages differ, in the order a user would fix them."""
    checks = [
        ("corpus", "name"),
        ("corpus", "source"),
        ("passage split", "split"),
        ("--seq-len", "max_len"),
        ("passage count", "num_passages"),
        ("passage draw seed", "seed"),
    ]
    if _split(pa) != TEXT_SPLIT or _split(pb) != TEXT_SPLIT:  # the text is cut on tokens, as BOS leaves room
        checks.append(("--bos", "bos"))
    out, said = [], set()
    for label, key in checks:
        if label not in said and pa.get(key) != pb.get(key):
            out.append(f"{label} {pa.get(key)} ({a_name}) vs {pb.get(key)} ({b_name})")
            said.add(label)
    return out


def _tokenizers_differ(pa: dict, pb: dict) -> bool:
    """By their definitions' hashes when both have one, else by vocabulary size (names hold local paths)."""
    if pa.get("tokenizer_sha256") and pb.get("tokenizer_sha256"):
        return pa["tokenizer_sha256"] != pb["tokenizer_sha256"]
    return pa.get("vocab_size") != pb.get("vocab_size")


#: How each split cut on tokens is named in a line.
_CUT_ON_TOKENS = {"windows": "windows", "document": "document passages", "given": "token ids given as such"}


def _tokenizer_difference(pa: dict, by_text: bool, a_name: str, b_name: str) -> str:
    if by_text or _split(pa) != TEXT_SPLIT:
        cut = _CUT_ON_TOKENS.get(_split(pa), f"{_split(pa)} passages")
        return f"their tokenizers differ, and {cut} are cut on tokens"
    return f"their tokenizers differ, and {a_name} or {b_name} records no text identity to pair them by"


def _model_argument(model: dict) -> str:
    """What ``effdepth measure`` takes for the model a result's provenance records."""
    source = model.get("source")
    if source == "embedded-gguf" and model.get("name"):
        return str(model["name"])
    if source in ("local", "gguf") and model.get("path"):
        return str(model["path"])
    return str(model.get("id") or "MODEL")


def _corpus_argument(name) -> str:
    """``--corpus`` of a corpus record's name: ``shakespeare``, a path, ``hf:...``; ``CORPUS`` for texts given
    in Python."""
    if not isinstance(name, str):
        return "CORPUS"
    if name.startswith(("file:", "dir:")):
        return name.split(":", 1)[1]
    return name if name == "shakespeare" or name.startswith("hf:") else "CORPUS"
