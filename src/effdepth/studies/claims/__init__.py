"""``effdepth claims``: does a model reproduce the paper? (docs/method.md#claims)

The abstract's five claims and a sixth of ours (:data:`effdepth.results.verdicts.CLAIMS`), judged on
saved results for every similarity they hold. Whatever the verdicts, the check succeeds; only input it
cannot read is an error.

>>> import effdepth, torch, tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20).save(d / "run")
>>> outcome = check_paths([d / "run"])
>>> [c.label for c in outcome.checked], len(outcome.checked[0].verdicts)
(['states'], 12)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.report.sources import failed_models, load_sources
from effdepth.results.result import Result
from effdepth.results.verdicts import check_claims, require_claim_views

MEASURE_FIRST = "measure first: effdepth measure MODEL --views paper --out DIR"


@dataclass
class Checked:
    """One result file, its label among the others, and its verdicts."""

    path: Path
    label: str
    result: Result
    verdicts: list


@dataclass
class ClaimsOutcome:
    """Every result checked, and the models a sweep could not measure (``(model, error)``)."""

    checked: list
    failed: list = field(default_factory=list)
    #: Paired comparisons found under the paths (``(path, Comparison)``): their "B below A" claims.
    comparisons: list = field(default_factory=list)

    def text(self) -> str:
        """What ``effdepth claims`` prints.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20)
        >>> ClaimsOutcome([Checked(Path("a"), "a", r, []), Checked(Path("b"), "b", r, [])]).text().split()[:2]
        ['Beside', 'the']
        """
        from effdepth.studies.claims.report import (
            claims_sweep_text,
            claims_text,
            pair_claims_text,
            passage_comparison_text,
        )

        pairs = pair_claims_text(self.comparisons) if self.comparisons else ""
        if not self.checked:
            return pairs
        if len(self.checked) == 1 and not self.failed:
            c = self.checked[0]
            verdicts = claims_text(c.result, c.label)
        else:
            verdicts = claims_sweep_text([(c.label, c.result) for c in self.checked], self.failed)
        beside = passage_comparison_text([(c.label, c.result) for c in self.checked])
        return "\n\n".join(x for x in (beside, verdicts, pairs) if x)


def check_paths(paths) -> ClaimsOutcome:
    """Load every result named by ``paths`` (``result.json`` files, a run's folder, a sweep's folder:
    every ``result.json`` below it) and judge the claims on each; a path without readable results is a
    one-line :class:`~effdepth.EffdepthError` that says what to run.

    >>> import tempfile
    >>> check_paths([tempfile.mkdtemp()])
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: no result.json under ...; pass the --out folder of an effdepth run or a result.json; measure first: effdepth measure MODEL --views paper --out DIR
    """
    comparisons = find_comparisons(paths)
    try:
        sources = load_sources(paths)
    except EffdepthError as exc:
        if comparisons:  # a comparison's folder holds no result of its own unless it measured a model
            return ClaimsOutcome([], comparisons=comparisons)
        raise EffdepthError(f"{exc}; {MEASURE_FIRST}") from None
    for source in sources:
        require_claim_views(source.result, where=str(source.path))
    checked = [Checked(s.path, s.label, s.result, check_claims(s.result)) for s in sources]
    return ClaimsOutcome(checked, failed_models(paths), comparisons)


def find_comparisons(paths) -> list:
    """``(path, Comparison)`` of every ``comparison.json`` named by ``paths`` or below them."""
    from effdepth.results.loading import load

    found = []
    for p in map(Path, paths):
        files = [p] if p.name == "comparison.json" else sorted(p.rglob("comparison.json")) if p.is_dir() else []
        found += [(f, load(f)) for f in files]
    return found
