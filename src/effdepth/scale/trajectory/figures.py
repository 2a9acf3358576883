"""The figure of a trajectory: D_eff, F_L and the references across training checkpoints, and (passage
mode) the update diagnostic: D_eff/L of the updates beside D_eff/L of the states.

Takes the trajectory's rows (plain dicts, as in ``trajectory.csv``);
:func:`effdepth.scale.trajectory.trajectory` saves it as ``DIR/trajectory.{png,pdf}``.
"""

from __future__ import annotations

from effdepth.report.figures_common import REFERENCE_STYLES
from effdepth.report.rows import lead_rows
from effdepth.report.style import OKABE_ITO, new_figure, style
from effdepth.scale.sweep.figures import similarity_note

#: The legend entry of the checkpoints whose D_eff moved against the one before (rows' ``moved``).
MOVED_LABEL = "moved vs previous (paired 95% interval excludes 0)"


def trajectory_figure(rows: list[dict], title: str = ""):
    """D_eff (with its interval), F_L and the matched references against training tokens, for each
    checkpoint's first view with a value under its primary similarity (named in the title).

    With ``updates_D_eff`` (passage mode) a second panel draws D_eff/L of the updates beside that of the
    states, with 95% intervals (near 1 for the updates if the cumulative sum alone made D_eff low).
    x: tokens seen when every point has them, else the step (symlog, step 0 at the left). Duplicates are
    grey crosses off the line; ``main`` without a step sits right of the last checkpoint. A checkpoint whose
    D_eff moved against the one before (``moved``: its paired interval excludes 0) is ringed; rows without
    the column (older trajectories) draw without rings.

    >>> r = lambda rev, step, d: {"key": rev, "revision": rev, "step": step, "tokens_seen": step * 10, "track": "main",
    ...     "final": False, "status": "ok", "D_eff": d, "D_eff_lo": d - .1, "D_eff_hi": d + .1, "F_L": 1.9,
    ...     "R_init": 1.5, "R_size": 1.8, "R_matched": 1.4, "L": 4, "updates_D_eff": 2 * d}
    >>> fig = trajectory_figure([r("step0", 0, 1.0), r("step10", 10, 1.2), r("step100", 100, 1.3)])
    >>> [ax.get_xscale() for ax in fig.axes], fig.axes[1].get_ylabel()
    (['symlog', 'symlog'], 'D_eff / L')
    """
    points = lead_rows(rows, lambda r: r["revision"])
    x_key, x_label = _x_axis(points)
    xs = _positions(points, x_key)
    measured = [(x, p) for x, p in zip(xs, points) if p["status"] == "ok" and p.get("D_eff") is not None]
    dups = [(x, p) for x, p in zip(xs, points) if p["status"] == "duplicate" and p.get("D_eff") is not None]
    updates = any(p.get("updates_D_eff") is not None and p.get("L") for _, p in measured)
    with style():
        fig = new_figure(6.4, 6.6 if updates else 4.0)
        axes = fig.subplots(2, 1, sharex=True, height_ratios=(3, 2)) if updates else [fig.add_subplot()]
        ax = axes[0]
        for series in _tracks(measured):
            _series(ax, series, "D_eff", r"$D_\mathrm{eff}$ (95% CI)", OKABE_ITO["blue"], "-", "o", band=True)
            _series(ax, series, "F_L", r"$F_L$", OKABE_ITO["black"], "--", None, band=False)
            for key, name in (("R_init", "init"), ("R_size", "size"), ("R_matched", "matched")):
                label, colour, dash, marker = REFERENCE_STYLES[name]
                _series(ax, series, key, label, colour, dash, None, band=True, alpha=0.1)
        _duplicates(ax, dups, "D_eff")
        _moved(ax, measured)
        if updates:
            _update_panel(axes[1], measured, dups)
        # main has no step: its tick says so instead of a made-up token count.
        named = {x: p["revision"] for x, p in zip(xs, points) if x_key is not None and p.get(x_key) is None}
        _scale(axes[-1], [x for x, _ in measured + dups], tokens=x_key == "tokens_seen", named=named)
        _label_final(ax, zip(xs, points))
        axes[-1].set_xlabel(x_label)
        ax.set_ylabel("effective depth")
        heading = f"{title}: effective depth during training" if title else "Effective depth during training"
        ax.set_title(heading + similarity_note(points))
        handles, labels = [], []
        for a in axes:
            h, lab = a.get_legend_handles_labels()
            handles, labels = handles + h, labels + lab
        unique = dict(zip(labels, handles))
        fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=3, frameon=False)
    return fig


def _duplicates(ax, dups: list, key: str, scale=None) -> None:
    pts = [
        (x, p[key] / (scale(p) if scale else 1))
        for x, p in dups
        if p.get(key) is not None and (scale is None or scale(p))
    ]
    _points(
        ax,
        pts,
        marker="x",
        markersize=8,
        markeredgewidth=1.6,
        color="#777777",
        label="duplicate weights (repeats an earlier checkpoint)",
    )


def _moved(ax, measured: list) -> None:
    """Rings round the D_eff of the checkpoints that moved against the one before."""
    pts = [(x, p["D_eff"]) for x, p in measured if p.get("moved") is True]
    _points(
        ax,
        pts,
        marker="o",
        markersize=10,
        markerfacecolor="none",
        markeredgewidth=1.8,
        color=OKABE_ITO["reddish_purple"],
        label=MOVED_LABEL,
        zorder=3,
    )


def _points(ax, pts: list, **style) -> None:
    """``(x, y)`` points as unjoined markers, when there are any."""
    if pts:
        ax.plot([x for x, _ in pts], [y for _, y in pts], linestyle="none", **style)


def _update_panel(ax, measured: list, dups: list) -> None:
    """D_eff/L of the states and of the updates f_l (the update diagnostic), each with its interval."""
    per_layer = [(x, _over_layers(p)) for x, p in measured if p.get("L")]
    for series in _tracks(per_layer):
        _series(ax, series, "D_eff", r"states $D_\mathrm{eff}/L$", OKABE_ITO["blue"], "-", "o", band=True)
        label = r"updates $f_l$: $D_\mathrm{eff}/L$ (update diagnostic)"
        _series(ax, series, "updates_D_eff", label, OKABE_ITO["vermillion"], "-", "s", band=True)
    _duplicates(ax, dups, "updates_D_eff", scale=lambda p: p.get("L"))
    ax.set_ylabel("D_eff / L")
    ax.set_ylim(bottom=0)
    ax.set_title("update diagnostic: D_eff/L of the updates beside the states'", fontsize="medium")


def _over_layers(row: dict) -> dict:
    """The row's D_eff and updates' D_eff (values and interval ends) divided by its number of layers L."""
    layers = float(row["L"])
    out = dict(row)
    for key in ("D_eff", "updates_D_eff"):
        for suffix in ("", "_lo", "_hi"):
            value = row.get(key + suffix)
            out[key + suffix] = None if value is None else value / layers
    return out


def _tracks(measured: list) -> list[list]:
    """Points per training track; later tracks (OLMo-2 stage 2) start from the last point of the first."""
    names = list(dict.fromkeys(p.get("track") or "main" for _, p in measured if not _apart(p)))
    tracks = [
        sorted(
            ((x, p) for x, p in measured if (p.get("track") or "main") == t and not _apart(p)),
            key=lambda xp: xp[0],
        )
        for t in names
    ]
    if len(tracks) > 1 and tracks[0]:
        tracks = tracks[:1] + [[tracks[0][-1]] + t for t in tracks[1:]]
    finals = [(x, p) for x, p in measured if _apart(p)]
    return tracks + ([finals] if finals else [])


def _apart(point: dict) -> bool:
    """The final model without a step (a hub's ``main``) stands apart; a run's last step (measured during
    training) ends its track."""
    return bool(point.get("final")) and point.get("step") is None


def _x_axis(points: list[dict]) -> tuple[str | None, str]:
    def known(key):
        return all(p.get(key) is not None for p in points if not _apart(p))

    if known("tokens_seen"):
        return "tokens_seen", "training tokens seen"
    if known("step"):
        return "step", "training step"
    return None, "checkpoint (training order)"


def _positions(points: list[dict], key: str | None) -> list[float]:
    if key is None:
        return [float(i + 1) for i in range(len(points))]
    known = [float(p[key]) for p in points if p.get(key) is not None]
    last = max(known, default=1.0) or 1.0
    # main without a step: just right of the last checkpoint (a factor on a log axis).
    return [float(p[key]) if p.get(key) is not None else last * 1.25 for p in points]


def _series(ax, series, key, label, colour, dash, marker, *, band: bool, alpha: float = 0.2) -> None:
    pts = [(x, p) for x, p in series if p.get(key) is not None]
    if not pts:
        return
    xs, ys = [x for x, _ in pts], [p[key] for _, p in pts]
    ax.plot(xs, ys, color=colour, linestyle=dash, marker=marker, markersize=4, linewidth=1.4, label=label)
    if band and all(p.get(f"{key}_lo") is not None and p.get(f"{key}_hi") is not None for _, p in pts):
        lo, hi = ([p[f"{key}{end}"] for _, p in pts] for end in ("_lo", "_hi"))
        ax.fill_between(xs, lo, hi, color=colour, alpha=alpha, linewidth=0)


def _scale(ax, xs: list[float], tokens: bool, named: dict) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    positive = [x for x in xs if x > 0]
    if not positive:
        return
    if _evenly_spaced(xs):  # a training run measured every so many steps: a log axis would crowd its end
        ax.set_xlim(left=min(0.0, min(xs)))
    elif any(x <= 0 for x in xs):
        # Step 0 has no place on a log axis: a short linear stretch [0, first step] holds it.
        ax.set_xscale("symlog", linthresh=min(positive), linscale=0.4)
        ax.set_xlim(left=0)
    else:
        ax.set_xscale("log")
    distinct = sorted(set(xs))
    if len(distinct) <= 8:
        # Few checkpoints: label exactly those (a log axis over less than a decade shows no ticks at all).
        ax.xaxis.set_major_locator(FixedLocator(distinct))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(
        FuncFormatter(lambda x, _: named.get(x) or (_short_number(x) if tokens or x >= 1e4 else f"{x:g}"))
    )


def _evenly_spaced(xs: list[float]) -> bool:
    """Checkpoints a fixed number of steps or tokens apart (the last may come sooner: training can end between
    two measurements).

    >>> _evenly_spaced([0, 50, 100, 150, 170]), _evenly_spaced([0, 1, 10, 100, 1000])
    (True, False)
    """
    distinct = sorted(set(xs))
    gaps = [b - a for a, b in zip(distinct, distinct[1:])][:-1]
    return len(gaps) >= 2 and max(gaps) <= 1.01 * min(gaps)


def _short_number(x: float) -> str:
    """A tick label like people write token counts.

    >>> _short_number(2_097_152_000), _short_number(0)
    ('2.1B', '0')
    """
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:g}"


def _label_final(ax, placed) -> None:
    for x, p in placed:
        if p.get("final") and p.get("D_eff") is not None:
            ax.annotate(p["revision"], (x, p["D_eff"]), xytext=(4, 6), textcoords="offset points", fontsize=7)
