"""The paper's Table 2 as data, and which measured model each row belongs to.

The values and their source (:data:`TABLE2_SOURCE`) are in ``paper_table2.yaml`` beside this module.

>>> row = table2_row("EleutherAI/pythia-70m")
>>> row.model, row.layers, row.deff
('Pythia-70M', 6, 1.23)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

#: The paper's corpus: FineWeb-Edu's 10BT sample, streamed from the start of its train split
#: (PAPER-PROTOCOL section 1).
PAPER_CORPUS = "hf:HuggingFaceFW/fineweb-edu:sample-10BT:train"


@dataclass(frozen=True)
class Table2Row:
    """One model of the paper's Table 2 (gap in percent, positive = below F_L)."""

    model: str
    layers: int
    deff: float
    deff_per_layer: float
    gap_pct: float
    note: str | None = None

    @property
    def reference(self) -> float:
        """F_L = 2L/(L+1)."""
        return 2.0 * self.layers / (self.layers + 1.0)


@lru_cache(maxsize=2)
def _paper_table(file: str) -> dict:
    """One of the paper's tables, as its YAML file beside this module holds it (rows and source)."""
    import yaml

    return yaml.safe_load((resources.files(__package__) / file).read_text(encoding="utf-8"))


def table2() -> tuple:
    """Every row of Table 2, in the paper's order.

    >>> len(table2()), table2()[10].model
    (16, 'Gemma-3-12b')
    """
    return tuple(Table2Row(**row) for row in _paper_table("paper_table2.yaml")["rows"])


def table2_source() -> str:
    """The source of the Table 2 values (one paragraph).

    >>> "arXiv 2609.31098" in table2_source()
    True
    """
    return " ".join(str(_paper_table("paper_table2.yaml")["source"]).split())


def _key(name: str) -> str:
    """A model name reduced to what identifies it: lower case, no owner, no base/pt suffixes, no version tags."""
    name = str(name).lower().rsplit("/", 1)[-1]
    name = re.sub(r"-(base|pt|hf|v0\.\d+)$", "", name)
    name = re.sub(r"-(0425|1124|0325)-", "-", name)  # OLMo-2 release dates
    return name.replace("_", "-")


def table2_row(model: str | None, paper_name: str | None = None) -> Table2Row | None:
    """The Table 2 row of a model: by its paper name (a suite's ``paper`` key), else by its hub id or name.

    >>> table2_row("allenai/OLMo-2-1124-13B").model, table2_row("Qwen/Qwen3.5-0.8B-Base").model
    ('OLMo-2-13B', 'Qwen3.5-0.8B')
    >>> table2_row("google/gemma-3-12b-pt").model, table2_row("SmolLM2-135M") is None
    ('Gemma-3-12b', True)
    """
    rows = {_key(r.model): r for r in table2()}
    for name in (paper_name, model):
        if name and _key(name) in rows:
            return rows[_key(name)]
    return None


@dataclass(frozen=True)
class TableS14Row:
    """One carry value of the paper's Table S14 (the trained residual-carry control)."""

    gamma: float
    deff_per_layer: float
    deff_per_layer_ci: list | None
    loss: float
    loss_ci: list | None
    norm_ratio: float


def table_s14() -> tuple:
    """The rows of Table S14, by carry value.

    >>> [(r.gamma, r.deff_per_layer) for r in table_s14()][:2]
    [(1.0, 0.094), (0.75, 0.092)]
    """
    return tuple(TableS14Row(**row) for row in _paper_table("paper_s14.yaml")["rows"])


def table_s14_source() -> str:
    """Where Table S14's numbers come from (one paragraph)."""
    return " ".join(str(_paper_table("paper_s14.yaml")["source"]).split())
