"""The record of a comparison: every result compared (``members``), and for each pair its paired
differences, the sample-size curve of the difference and the cross-model CKA matrix, saved as
``comparison.json`` (docs/method.md#comparing-two-results).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.files import finite, write_json_atomic
from effdepth.results.result import refuse_newer

SCHEMA = "effdepth.comparison/1"
#: The differences of a pair, per similarity and view: the quantity, its label in tables, and its unit.
QUANTITIES = (("deff", "D_eff", "states"), ("ratio", "D_eff/F_L", "F_L"), ("gap_pct", "gap", "% of F_L"))


@dataclass
class PairComparison:
    """B against A (``a``, ``b``: indices into :attr:`Comparison.members`).

    ``differences[similarity][view][quantity]`` holds ``estimate`` (B - A on all passages), ``interval``
    (the paired percentile interval, ``None`` without resamples), ``a`` and ``b`` (the two estimates)
    and ``resolved`` (whether the interval excludes 0); ``sample_size[similarity]`` the curve of the
    difference of D_eff over nested subsets (N/8 .. N); ``cross[similarity]`` the (L_A+1, L_B+1)
    CKA matrix of every state of A against every state of B (``notes`` say why there is none).
    """

    a: int
    b: int
    differences: dict
    sample_size: dict = field(default_factory=dict)
    cross: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def difference(self, quantity: str = "ratio", view: str = "default", similarity: str = "cka") -> dict:
        """One paired difference; a one-line error names what the pair holds when it is missing."""
        try:
            return self.differences[similarity][view][quantity]
        except KeyError:
            held = ", ".join(f"{s}/{v}" for s, views in self.differences.items() for v in views)
            raise EffdepthError(f"this pair has no {similarity} {view} {quantity}; it has {held}") from None


@dataclass
class Comparison:
    """What :func:`effdepth.compare` returns: the results compared and their pairs.

    ``members``: one dict per result (``label``, ``path``, ``model``, ``revision``, ``num_layers``);
    ``config``: the paired bootstrap (resamples, units, seed, level), views and similarities, pairing.
    """

    members: list
    pairs: list
    config: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def label(self, index: int) -> str:
        return self.members[index]["label"]

    def pair(self, a=0, b=1) -> PairComparison:
        """The pair of ``b`` against ``a`` (indices or labels)."""
        a, b = (self._index(x) for x in (a, b))
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p
        held = "; ".join(f"{self.label(p.b)} against {self.label(p.a)}" for p in self.pairs)
        raise EffdepthError(f"this comparison holds no pair {self.label(b)} against {self.label(a)}; it holds {held}")

    def _index(self, x) -> int:
        if isinstance(x, int):
            return x
        labels = [m["label"] for m in self.members]
        if x not in labels:
            raise EffdepthError(f"no result {x!r} in this comparison; it compares {', '.join(labels)}")
        return labels.index(x)

    def to_dict(self) -> dict:
        return finite(
            {
                "schema": SCHEMA,
                "members": self.members,
                "pairs": [
                    {
                        "a": p.a,
                        "b": p.b,
                        "differences": p.differences,
                        "sample_size": p.sample_size,
                        "cross": p.cross,
                        "notes": p.notes,
                    }
                    for p in self.pairs
                ],
                "config": self.config,
                "provenance": self.provenance,
            }
        )

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema != SCHEMA:
            refuse_newer(schema, SCHEMA, "this comparison")
            raise EffdepthError(f"not an effdepth comparison (schema {schema!r}, expected {SCHEMA!r})")
        try:
            pairs = [
                PairComparison(
                    int(p["a"]),
                    int(p["b"]),
                    p["differences"],
                    p.get("sample_size", {}),
                    p.get("cross", {}),
                    p.get("notes", []),
                )
                for p in data["pairs"]
            ]
            return cls(list(data["members"]), pairs, data.get("config", {}), data.get("provenance", {}))
        except (KeyError, TypeError, ValueError) as exc:
            raise EffdepthError(
                f"damaged comparison.json ({type(exc).__name__}: {exc}); run effdepth compare again"
            ) from None

    def save(self, folder) -> Path:
        """Write ``comparison.json`` atomically into ``folder``; returns its path."""
        path = Path(folder) / "comparison.json"
        write_json_atomic(path, self.to_dict())
        return path

    def same_inputs(self, other: "Comparison") -> bool:
        """Whether ``other`` compares the same results (by path and model), so it may replace this one."""
        key = [(m.get("path"), m.get("model"), m.get("revision")) for m in self.members]
        return key == [(m.get("path"), m.get("model"), m.get("revision")) for m in other.members]
