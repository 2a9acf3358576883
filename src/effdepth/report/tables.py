"""What the terminal prints (no plotting imports): report content (:mod:`.content`) written by :mod:`.plain`;
and what the studies share: their registration as saved records, and saving one with its figure."""

from __future__ import annotations

from pathlib import Path

from effdepth.report.content import result_content
from effdepth.report.content.facts import extras_table
from effdepth.report.content.model import Section
from effdepth.report.plain import content_text, section_text
from effdepth.results.loading import KINDS, SavedStudy, StudyKind, kind_of, register
from effdepth.results.result import Result


def result_summary_text(result: Result) -> str:
    """Everything the terminal shows for a result, in either mode: headline, its mode's sections, extras.

    >>> import effdepth, torch
    >>> "R_matched" in result_summary_text(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    True
    """
    return content_text(result_content(result), extras_table(result))


def study_text(kind: str, record: dict) -> str:
    """The tables of a saved study (``null`` or ``prune``: what its JSON holds), as terminal text."""
    return "\n\n".join(section_text(s) for s in KINDS[kind].sections(SavedStudy(kind, record)))


def show_text(obj) -> str:
    """What ``effdepth show`` prints for anything :func:`effdepth.load` returns: a study as its kind
    says, a result in full.

    >>> import effdepth, torch
    >>> show_text(effdepth.from_states(torch.randn(3, 8, 4, 8))).startswith("model states")
    True
    """
    kind = kind_of(obj)
    if kind is None:
        return result_summary_text(obj)
    return "\n\n".join([kind.headline(obj)] + [section_text(s) for s in kind.sections(obj)])


def save_study(study, folder) -> Path:
    """``study.save(folder)``, then its kind's figure beside it, ``<kind>.{png,pdf}``; returns what ``save`` returns.

    >>> import effdepth, torch, tempfile
    >>> from effdepth.studies.intervene import InterventionResult
    >>> ir = InterventionResult((1.0, 0.5), (1, 2), {lam: effdepth.from_states(torch.randn(4, 6, 8, 16)) for lam in (1.0, 0.5)})
    >>> p = save_study(ir, tempfile.mkdtemp())
    >>> sorted(f.name for f in p.parent.glob("intervention.*"))
    ['intervention.json', 'intervention.pdf', 'intervention.png']
    """
    from effdepth.report.style import save_figure

    path, kind = study.save(folder), kind_of(study)
    save_figure(kind.figure(study), Path(folder) / kind.name)
    return path


def record_model(record: dict) -> str:
    """The model a saved study's record names.

    >>> record_model({"model": {"id": "m"}}), record_model({})
    ('m', 'model')
    """
    return str((record.get("model") or {}).get("id", "model"))


def register_saved_study(rank: int, name: str, schema: str, title: str, caption: str, table, figure) -> StudyKind:
    """Register a study read back as the JSON it saved (a :class:`SavedStudy`), of the model its record names,
    with one ``table(record)`` and one ``figure(record)``."""
    return register(
        StudyKind(
            rank,
            name,
            schema,
            SavedStudy,
            lambda data, path: SavedStudy(name, data, path),
            title,
            caption,
            lambda saved: record_model(saved.record),
            lambda saved: [Section("", table(saved.record))],
            lambda saved: figure(saved.record),
            lambda saved: f"{title} of {record_model(saved.record)}",
        )
    )
