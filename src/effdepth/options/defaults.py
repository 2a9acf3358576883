"""The defaults of every measurement option, the named protocols, and how each mode fills them in."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.data.paper import PAPER_CORPUS
from effdepth.errors import EffdepthError

MAX_BOOTSTRAP = 100_000
#: Defaults shared by both poolings, and the sizes of ``--pooling none`` (every token a sample: fewer passages).
DEFAULTS = {"seq_len": 256, "num_seqs": 32, "batch_size": 8, "bootstrap": 1000, "seed": 0}
#: The sizes of ``--pooling mean`` (the default): passages of at most 512 tokens, as the paper's.
PASSAGE_DEFAULTS = {"seq_len": 512, "num_seqs": 1024}
POOLINGS = ("mean", "none")
STATES = ("blocks", "hidden")


@dataclass(frozen=True)
class Protocol:
    """A named set of measurement settings (``--protocol NAME``); flags given beside it win and are recorded."""

    name: str
    description: str
    settings: dict


PROTOCOLS = {
    "paper": Protocol(
        "paper",
        "the paper's settings (PAPER-PROTOCOL section 1): 10,000 FineWeb-Edu passages of at most "
        "512 tokens (each document's first tokens), bfloat16 weights, transformers' hidden_states, linear CKA",
        {
            "corpus": PAPER_CORPUS,
            "num_seqs": 10_000,
            "seq_len": 512,
            "dtype": "bfloat16",
            "states": "hidden",
            "pooling": "mean",
            "passage_split": "document",
            "similarity": "cka",
            "bos": "auto",
        },
    ),
}


def check_protocol(name) -> None:
    """An unknown protocol fails at once.

    >>> check_protocol("papr")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: unknown --protocol 'papr'; known: paper
    """
    if name is not None and name not in PROTOCOLS:
        raise EffdepthError(f"unknown --protocol {name!r}; known: {', '.join(PROTOCOLS)}")


def resolve_defaults(values: dict) -> dict:
    """Options as given, with the protocol's settings and each mode's sizes where none is given.

    >>> resolve_defaults({"pooling": "none"})["seq_len"], resolve_defaults({})["seq_len"]
    (256, 512)
    """
    given = {k: v for k, v in values.items() if v is not None}
    check_protocol(given.get("protocol"))
    if given.get("protocol"):
        given = {**PROTOCOLS[given["protocol"]].settings, **given}
    passages = given.get("pooling", "mean") == "mean"
    for name, value in (PASSAGE_DEFAULTS if passages else DEFAULTS).items():
        if name in ("seq_len", "num_seqs"):
            given.setdefault(name, value)
    if passages and given.get("add_bos") is False:  # --no-bos in passage mode: no special token at all
        given.setdefault("bos", "never")
    return given
