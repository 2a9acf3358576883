"""Figure canvases and style shared by the intervention and experiment figures."""

from __future__ import annotations

import contextlib

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..report.figures import OKABE_ITO, save_figure

__all__ = ["OKABE_ITO", "save_figure", "new_figure", "style"]

_RC = {
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.labelsize": 9,
    "legend.fontsize": 7.5,
    "axes.spines.top": False,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "pdf.fonttype": 42,
}


def new_figure(width: float, height: float) -> Figure:
    """A bare Agg figure: no pyplot, no display, the user's backend left alone.

    >>> new_figure(2, 2).canvas.__class__.__name__
    'FigureCanvasAgg'
    """
    fig = Figure(figsize=(width, height), dpi=150, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


@contextlib.contextmanager
def style():
    """The house style of these figures, for the duration of a ``with``."""
    with matplotlib.rc_context(_RC):
        yield
