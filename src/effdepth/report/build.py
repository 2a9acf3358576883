"""``effdepth report``: load results, render HTML or Markdown, write atomically."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import EffdepthError
from ..files import write_atomic
from .sources import load_sources

FORMATS = ("html", "md")


def write_report(paths, output=None, fmt: str | None = None) -> list[Path]:
    """Write a report of the results under ``paths``; returns the files written.

    ``fmt`` is ``"html"`` (one self-contained file) or ``"md"`` (``X.md`` plus
    ``X_files/*.png``); by default it follows the suffix of ``output``, else
    HTML. ``output`` defaults to ``report.html`` / ``report.md``.

    >>> import effdepth, torch, tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = effdepth.from_states(torch.randn(5, 2, 8, 16).cumsum(0)).save(d / "run")
    >>> [p.name for p in write_report([d], d / "report.html")]
    ['report.html']
    """
    fmt = fmt or ("md" if output is not None and Path(output).suffix.lower() in (".md", ".markdown") else "html")
    if fmt not in FORMATS:
        raise EffdepthError(f"unknown report format {fmt!r}; use one of: {', '.join(FORMATS)}")
    output = Path(output) if output is not None else Path(f"report.{fmt}")
    sources = load_sources(paths)
    _prepare_folder(output.parent)
    if fmt == "html":
        from .html import render_html

        write_atomic(output, render_html(sources).encode("utf-8"))
        return [output]
    from .markdown import render_markdown

    files_dir = f"{output.stem}_files"
    text, images = render_markdown(sources, files_dir)
    written = []
    for rel, png in images.items():  # images first: the .md never points at a missing file
        written.append(write_atomic(output.parent / rel, png))
    written.insert(0, write_atomic(output, text.encode("utf-8")))
    return written


def _prepare_folder(folder: Path) -> None:
    # Fail before rendering figures, not after.
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EffdepthError(f"cannot write to {folder}: {exc.strerror}; choose another -o") from None
    if not os.access(folder, os.W_OK):
        raise EffdepthError(f"cannot write to {folder}: permission denied; choose another -o")
