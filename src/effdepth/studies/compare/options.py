"""``effdepth compare``'s own options, declared once (the command line's flags are built from them); the
analysis options it shares with ``analyse`` are :class:`~effdepth.options.AnalysisOptions`'."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option

#: Which pairs a comparison of three or more results holds: each with the first, or every pair.
PAIRS = ("baseline", "all")
#: The analysis options a comparison may set (default: the results'), and the model options a model
#: argument is loaded with (everything else is the first result's).
ANALYSIS = ("views", "similarity", "bootstrap", "bootstrap_units", "max_memory")
MODEL = ("dtype", "device", "trust_remote_code", "allow_pickle")


@dataclass(frozen=True)
class CompareOptions:
    """``effdepth compare``: the results, and which pairs of them."""

    results: tuple = option(
        (),
        "saved results (a measure --out folder or its result.json), a trajectory folder (each checkpoint "
        "against the one before), or models, measured on the first result's passages with its options",
        flags=(),
        nargs="+",
        metavar="RESULT_OR_MODEL",
        cli_default=None,
    )
    pairs: str = option(
        "baseline", "baseline (default): every result against the first; all: every pair", choices=PAIRS
    )
