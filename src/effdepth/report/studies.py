"""What a report says about the studies saved beside results, whatever its format: one :class:`Study`
each, its title, tables, figure and caption from its kind (:class:`~effdepth.results.loading.StudyKind`,
which each study registers: ``effdepth.studies`` and ``effdepth.scale.trajectory``). The terminal
(``effdepth show``), the HTML and the Markdown reports render the same objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effdepth.results.loading import KINDS, StudyKind, kind_of, load


@dataclass
class Study:
    """A saved study: its kind, what :func:`effdepth.load` read back, and where."""

    spec: StudyKind
    record: object
    path: Path

    @property
    def kind(self) -> str:
        return self.spec.name

    @property
    def title(self) -> str:
        return f"{self.spec.title} of {self.spec.subject(self.record)}"

    @property
    def caption(self) -> str:
        return self.spec.caption

    def sections(self) -> list:
        """The study's :class:`~.content.model.Section` objects in order (a title may be empty)."""
        return self.spec.sections(self.record)

    def figure(self):
        return self.spec.figure(self.record)


def study_files() -> set:
    """The names of the files studies save their records in."""
    return {k.file for k in KINDS.values()}


def find_studies(paths) -> list:
    """Every study file in ``paths`` (files, or folders searched below), in path order."""
    names, found = study_files(), []
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(f for name in names for f in p.rglob(name)) if p.is_dir() else []
        for f in (f for f in files if f.name in names):
            obj = load(f)
            kind = kind_of(obj)
            if kind is not None:
                found.append(Study(kind, obj, f))
    return found
