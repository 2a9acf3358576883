"""The record of an intervention: one full :class:`~effdepth.Result` per carry value, saved as
``intervention.json`` with each result in ``carry-<lam>/result.json``.

>>> import effdepth, torch, tempfile
>>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
>>> effdepth.load(ir.save(tempfile.mkdtemp())).layers
(1, 2, 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.results.files import write_json_atomic
from effdepth.results.result import Result
from effdepth.studies.intervene.hooks import format_carry

SCHEMA = "effdepth.intervention/1"


@dataclass
class InterventionResult:
    """One full :class:`~effdepth.Result` per carry value (``results``: lam -> result, in the order given) and
    the table across them; ``layers`` are the 1-based blocks the carry was applied to."""

    carries: tuple
    layers: tuple
    results: dict
    config: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)
    #: ``{lam: differences}`` of each carry against carry 1 (:class:`~effdepth.studies.compare.PairComparison`'s).
    paired: dict = field(default_factory=dict)

    def rows(self, view: str | None = None) -> list:
        """One dict per lam: D_eff, its interval, F_N, ratio, references, loss, perplexity.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16))
        >>> InterventionResult((1.0,), (1, 2, 3), {1.0: r}).rows()[0]["lam"]
        1.0
        """
        return [intervention_row(lam, self.results[lam], view, self.paired.get(lam)) for lam in self.carries]

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "carries": list(self.carries),
            "layers": list(self.layers),
            "config": self.config,
            "provenance": self.provenance,
            "table": {name: self.rows(name) for name in self.results[self.carries[0]].views},
            "paired": [{"lam": lam, "differences": d} for lam, d in self.paired.items()],
            "results": [
                {"lam": lam, "path": f"{carry_folder(lam)}/result.json", "result": self.results[lam].to_dict()}
                for lam in self.carries
            ],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InterventionResult":
        if data.get("schema") != SCHEMA:
            raise EffdepthError(f"not an effdepth intervention (schema {data.get('schema')!r}, expected {SCHEMA!r})")
        results = {float(r["lam"]): Result.from_dict(r["result"]) for r in data["results"]}
        return cls(
            tuple(float(c) for c in data["carries"]),
            tuple(data["layers"]),
            results,
            data.get("config", {}),
            data.get("provenance", {}),
            {float(p["lam"]): p["differences"] for p in data.get("paired") or []},
        )

    def save(self, folder) -> Path:
        """Write ``carry-<lam>/result.json`` for each lam, then ``intervention.json`` (last, so its presence
        means the whole set is there); returns the latter."""
        folder = Path(folder)
        for lam in self.carries:
            self.results[lam].save(folder / carry_folder(lam) / "result.json")
        path = folder / "intervention.json"
        write_json_atomic(path, self.to_dict())
        return path


def carry_folder(lam: float) -> str:
    """``carry-<lam>``, e.g. ``carry-0.75``.

    >>> carry_folder(1.0)
    'carry-1'
    """

    return f"carry-{format_carry(lam)}"


def intervention_row(lam: float, result: Result, view: str | None = None, paired: dict | None = None) -> dict:
    """The table row of one measured carry value; ``paired``: its differences against carry 1, whose D_eff
    difference and paired interval the row holds (``deff_vs_1``, ``deff_vs_1_ci``).

    >>> import effdepth, torch
    >>> intervention_row(0.5, effdepth.from_states(torch.randn(4, 8, 8, 16)))["loss"] is None
    True
    """
    v = result.default if view is None else result.views[view]
    loss = (result.extras or {}).get("loss") or {}
    difference = ((paired or {}).get(result.primary_similarity) or {}).get(v.name, {}).get("deff") or {}
    if lam == 1.0:
        difference = {"estimate": 0.0, "interval": None}
    return {
        "lam": float(lam),
        "view": v.name,
        "deff": v.deff,
        "deff_ci": (v.ci or {}).get("deff"),
        "reference": v.reference,
        "ratio": v.ratio,
        "ratio_ci": (v.ci or {}).get("ratio"),
        **{f"reference_{k}": v.references[k] for k in ("init", "size", "matched")},
        "deff_vs_1": difference.get("estimate"),
        "deff_vs_1_ci": difference.get("interval"),
        "loss": loss.get("mean"),
        "perplexity": loss.get("perplexity"),
    }
