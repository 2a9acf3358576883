"""``effdepth report``: load results and the studies saved beside them, render HTML or Markdown, write
atomically. A study's title, tables, figure and caption come from its registered kind."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from effdepth.errors import EffdepthError
from effdepth.report.sources import failed_models, load_sources
from effdepth.results.files import write_atomic
from effdepth.results.loading import KINDS, StudyKind, kind_of, load

FORMATS = ("html", "md")

#: The suffixes each format writes; ``-o`` with any other suffix is refused (HTML in a .pdf helps no one).
SUFFIXES = {"html": (".html", ".htm"), "md": (".md", ".markdown")}


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
    def heading(self) -> str:
        return self.title[:1].upper() + self.title[1:]

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


def write_report(paths, output=None, fmt: str | None = None, failed=None) -> list[Path]:
    """Write a report of the results under ``paths`` to ``output`` (default ``report.html``); returns the
    files written. ``fmt``: ``"html"`` or ``"md"`` (``X.md`` plus ``X_files/*.png``), by default
    ``output``'s suffix's. ``failed``: the ``(model, error)`` not measured (default: a sweep's records).

    >>> import effdepth, torch, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0)).save(d / "run")
    >>> [p.name for p in write_report([d], d / "report.html")]
    ['report.html']
    """
    fmt = report_format(output, fmt)
    output = Path(output) if output is not None else Path(f"report.{fmt}")
    studies = find_studies(paths)
    # A study file, or a folder holding a study and no result.json (a carry experiment), is reported by its study alone.
    result_paths = [p for p in paths if not _study_only(Path(p))]
    sources = load_sources(result_paths) if result_paths or not studies else []
    if failed is None:  # a sweep's members that left an error: listed, never dropped silently
        failed = failed_models(paths)
    _prepare_folder(output.parent)
    if fmt == "html":
        from effdepth.report.html import render_html

        write_atomic(output, render_html(sources, failed=failed, studies=studies).encode("utf-8"))
        return [output]
    from effdepth.report.markdown import render_markdown

    files_dir = f"{output.stem}_files"
    text, images = render_markdown(sources, files_dir, failed=failed, studies=studies)
    written = []
    for rel, png in images.items():  # images first: the .md never points at a missing file
        written.append(write_atomic(output.parent / rel, png))
    written.insert(0, write_atomic(output, text.encode("utf-8")))
    _remove_stale_images(output.parent / files_dir, set(written))
    return written


def _study_only(path: Path) -> bool:
    """Whether ``path`` is a study file, or a folder with a study and no ``result.json`` below it."""
    names = study_files()
    if path.is_file():
        return path.name in names
    if not path.is_dir() or not any(True for name in names for _ in path.rglob(name)):
        return False
    return not any(path.rglob("result.json"))


def _remove_stale_images(folder: Path, kept: set) -> None:
    """PNGs an earlier report of the same name left in its ``X_files/`` folder that this one does
    not use: they would sit beside numbers they do not show. Only PNGs, only in that folder."""
    for png in folder.glob("*.png"):
        if png not in kept:
            try:
                png.unlink()
            except OSError:
                pass


def report_format(output, fmt: str | None = None) -> str:
    """The format to write ``output`` in: ``fmt`` when given, else its suffix's; a one-line error otherwise.

    >>> report_format("x.md"), report_format(None), report_format("x.htm", "html")
    ('md', 'html', 'html')
    >>> report_format("x.pdf")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: cannot write a report to x.pdf: effdepth writes HTML (.html, .htm) or Markdown (.md, .markdown); for a PDF, print the HTML report from a browser
    """
    if fmt is not None and fmt not in FORMATS:
        raise EffdepthError(f"unknown report format {fmt!r}; use one of: {', '.join(FORMATS)}")
    if output is None:
        return fmt or "html"
    suffix = Path(output).suffix.lower()
    found = next((f for f, suffixes in SUFFIXES.items() if suffix in suffixes), None)
    if found is None:
        works = " or ".join(f"{name} ({', '.join(SUFFIXES[f])})" for f, name in (("html", "HTML"), ("md", "Markdown")))
        hint = "; for a PDF, print the HTML report from a browser" if suffix == ".pdf" else ""
        raise EffdepthError(f"cannot write a report to {output}: effdepth writes {works}{hint}")
    if fmt is not None and found != fmt:
        raise EffdepthError(
            f"cannot write a report to {output}: --format {fmt} writes {' or '.join(SUFFIXES[fmt])} files"
        )
    return found


def _prepare_folder(folder: Path) -> None:
    # Fail before rendering figures, not after.
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EffdepthError(f"cannot write to {folder}: {exc.strerror}; choose another -o") from None
    if not os.access(folder, os.W_OK):
        raise EffdepthError(f"cannot write to {folder}: permission denied; choose another -o")
