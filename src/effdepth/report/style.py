"""The one figure style of effdepth: bare Agg figures, never ``pyplot`` nor ``matplotlib.use``,
so nothing needs a display and a user's backend is left as it was.

>>> import tempfile
>>> with style():
...     fig = new_figure(3, 2)
...     _ = fig.add_subplot().plot([0, 1], color=OKABE_ITO["blue"])
>>> [p.suffix for p in save_figure(fig, Path(tempfile.mkdtemp()) / "line")]
['.png', '.pdf']
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from effdepth.errors import EffdepthError
from effdepth.results.files import write_atomic

DPI = 150

#: Okabe & Ito (2008), "Color Universal Design": distinguishable under the common colour-vision deficiencies.
OKABE_ITO = {
    "black": "#000000",
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
}

#: The house rc parameters, applied by :func:`style`.
RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 8,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "pdf.fonttype": 42,  # TrueType in the PDF: journals reject Type 3 fonts
    "ps.fonttype": 42,
}


def new_figure(width: float, height: float) -> Figure:
    """A bare Agg figure (inches), constrained layout: no pyplot, no display, the user's backend untouched.

    >>> new_figure(2, 2).canvas.__class__.__name__
    'FigureCanvasAgg'
    """
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


@contextlib.contextmanager
def style():
    """The house style (font sizes, light grid, TrueType in PDFs) for figures made inside the ``with``.

    >>> with style():
    ...     fig = new_figure(2, 2)
    """
    with matplotlib.rc_context(RC):
        yield


def save_figure(fig: Figure, stem, formats=("png", "pdf")) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` atomically, then close the figure.

    >>> import tempfile
    >>> fig = Figure(); _ = fig.add_subplot().plot([0, 1])
    >>> [p.suffix for p in save_figure(fig, Path(tempfile.mkdtemp()) / "line")]
    ['.png', '.pdf']
    """
    stem = Path(stem)
    try:
        try:
            stem.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EffdepthError(
                f"cannot write figures to {stem.parent}: {exc.strerror}; choose another output folder"
            ) from None
        return [_save_atomic(fig, stem.with_name(f"{stem.name}.{fmt}"), fmt) for fmt in formats]
    finally:
        close_figure(fig)


def figure_png(fig: Figure, dpi: int = DPI) -> bytes:
    """The figure as PNG bytes (for inlining in reports); closes the figure.

    >>> fig = Figure(); _ = fig.add_subplot().plot([0, 1])
    >>> figure_png(fig)[:4]
    b'\\x89PNG'
    """
    buf = io.BytesIO()
    try:
        _canvas(fig).print_figure(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    finally:
        close_figure(fig)
    return buf.getvalue()


def close_figure(fig: Figure) -> None:
    """Free a figure; also unregisters it from pyplot if the caller made it there.

    >>> fig = new_figure(1, 1); _ = fig.add_subplot()
    >>> close_figure(fig); fig.axes
    []
    """
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close(fig)
    fig.clear()


def _save_atomic(fig: Figure, path: Path, fmt: str) -> Path:
    # No timestamps in the files: the same result gives byte-identical figures.
    meta = {"CreationDate": None} if fmt == "pdf" else {"Software": None}
    return write_atomic(
        path, writer=lambda fh: _canvas(fig).print_figure(fh, format=fmt, dpi=DPI, bbox_inches="tight", metadata=meta)
    )


def _canvas(fig: Figure):
    return fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
