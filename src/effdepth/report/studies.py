"""What a report says about the studies saved beside results (``null.json``, ``prune.json``), whatever
its format: one :class:`Study` each, with its table and figure.

The terminal (``effdepth null``, ``effdepth prune-check``, ``effdepth show``), the HTML and the Markdown
reports render the same tables.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .content import Cell, Table
from .numbers import fmt

STUDY_FILES = {"null.json": "null", "prune.json": "prune"}
TITLES = {"null": "random-weight null", "prune": "pruning boundary check"}
CAPTIONS = {"null": "D_eff/L of the default view: each random initialisation (open), their mean (bar) and the trained "
                    "model (filled), per similarity.",
            "prune": "Held-out perplexity after skipping the first k blocks of each order (log scale), and each "
                     "block's position in the two orders; the line is agreement."}


@dataclass
class Study:
    """A saved study: its kind, what it recorded, and where."""

    kind: str
    record: dict
    path: Path

    @property
    def title(self) -> str:
        return f"{TITLES[self.kind]} of {(self.record.get('model') or {}).get('id', 'model')}"

    @property
    def caption(self) -> str:
        return CAPTIONS[self.kind]

    def table(self) -> Table:
        return null_table(self.record) if self.kind == "null" else prune_table(self.record)

    def figure(self):
        if self.kind == "null":
            from .figures_null import null_figure

            return null_figure(self.record)
        from .figures_prune import prune_figure

        return prune_figure(self.record)


def find_studies(paths) -> list:
    """Every study file in ``paths`` (files, or folders searched below), in path order."""
    from ..loading import load
    from ..loading import SavedStudy

    found = []
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(f for name in STUDY_FILES for f in p.rglob(name)) if p.is_dir() else []
        for f in files:
            if f.name in STUDY_FILES:
                obj = load(f)
                if isinstance(obj, SavedStudy):
                    found.append(Study(obj.kind, obj.record, f))
    return found


def null_table(record: dict) -> Table:
    """The trained model's D_eff/L and D_eff/F_L against its random-weight null, one row per similarity."""
    rows = []
    for sim, s in record["summary"].items():
        rows.append([Cell(sim), Cell(fmt(s["trained_deff_per_layer"])),
                     Cell(f"{fmt(s['null_deff_per_layer_mean'])} ± {fmt(s['null_deff_per_layer_sd'])}"),
                     Cell(fmt(s["trained_ratio"])), Cell(f"{fmt(s['null_ratio_mean'])} ± {fmt(s['null_ratio_sd'])}")])
    seeds = record["seeds"]
    note = (f"random init: mean ± sample sd over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}), the same "
            f"architecture (config sha256 {record['config_sha256'][:12]}) and options; default view")
    return Table(["similarity", "trained D_eff/L", "random init D_eff/L", "trained D_eff/F_L", "random init D_eff/F_L"],
                 rows, [False, True, True, True, True], note=note)


def prune_table(record: dict) -> Table:
    """Held-out perplexity per k under each skip order, and the blocks each skips."""
    base = fmt(record["baseline"]["perplexity"])
    rows = [[Cell("0"), Cell("-"), Cell(base), Cell("-"), Cell(base)]]
    for row in record["rows"]:
        rows.append([Cell(str(row["k"])), Cell(",".join(map(str, row["block_influence_skipped"]))),
                     Cell(fmt(row["block_influence_perplexity"])), Cell(",".join(map(str, row["local_deff_skipped"]))),
                     Cell(fmt(row["local_deff_perplexity"]))])
    note = (f"held-out perplexity over {record['heldout'].get('num_passages')} passages "
            f"({record['baseline']['tokens']:,} predicted tokens); Spearman correlation of the two rankings: "
            f"{fmt(record['spearman_of_rankings'])}")
    return Table(["k", "block influence skips", "perplexity", "local D_eff skips", "perplexity"], rows,
                 [True, False, True, False, True], note=note)
