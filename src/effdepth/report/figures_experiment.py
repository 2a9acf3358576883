"""The figure of a carry experiment: D_eff and loss against lam, and against the training step.

Takes an :class:`~effdepth.results.carry.ExperimentResult` (read through its
``config`` and ``summary()``); :func:`effdepth.studies.experiment.carry.save_experiment`
saves it as ``DIR/experiment.{png,pdf}``.
"""

from __future__ import annotations

import numpy as np

from effdepth.report.style import OKABE_ITO, new_figure, style
from effdepth.results.carry import summary_interval

_LAM_STYLES = (
    ("blue", "-", "o"),
    ("vermillion", "--", "s"),
    ("bluish_green", "-.", "D"),
    ("orange", ":", "^"),
    ("reddish_purple", (0, (6, 2)), "v"),
    ("sky_blue", (0, (3, 1, 1, 1)), "P"),
    ("black", "-", "x"),
)


def experiment_figure(result):
    """Three panels: D_eff and loss against lam at the last step; D_eff and held-out loss against step.

    Bands and error bars span the seeds (min to max) with several seeds, the
    bootstrap interval with one.

    >>> from effdepth.results.carry import ExperimentResult
    >>> recs = [{"lam": lam, "seed": 0, "step": step, "deff": 1.2, "deff_ci": None, "reference": 1.6, "reference_matched": 1.4,
    ...          "loss": 2.0} for lam in (1.0, 0.5) for step in (0, 4)]
    >>> len(experiment_figure(ExperimentResult({"layers": 2, "d_model": 16}, recs)).axes)
    4
    """
    from effdepth.results.carry import format_carry

    summary = result.summary()
    carries = list(dict.fromkeys(s["lam"] for s in summary))
    last = max(s["step"] for s in summary)
    with style():
        fig = new_figure(11.0, 3.8)
        ax_lam, ax_step, ax_loss = fig.subplots(1, 3)
        _lam_panel(ax_lam, [s for s in summary if s["step"] == last], OKABE_ITO)
        ax_lam.set_title(f"after {last} steps", fontsize=9)
        for i, lam in enumerate(carries):
            colour, ls, marker = _LAM_STYLES[i % len(_LAM_STYLES)]
            rows = sorted((s for s in summary if s["lam"] == lam), key=lambda s: s["step"])
            steps = [s["step"] for s in rows]
            lo_hi = [summary_interval(s) or [None, None] for s in rows]
            ax_step.plot(
                steps,
                [_num(s["deff"]["mean"]) for s in rows],
                color=OKABE_ITO[colour],
                linestyle=ls,
                marker=marker,
                markersize=4,
                label=f"$\\lambda$ = {format_carry(lam)}",
            )
            ax_step.fill_between(
                steps,
                [_num(a) for a, _ in lo_hi],
                [_num(b) for _, b in lo_hi],
                color=OKABE_ITO[colour],
                alpha=0.2,
                linewidth=0,
            )
            ax_loss.plot(
                steps,
                [_num(s["loss"]["mean"]) for s in rows],
                color=OKABE_ITO[colour],
                linestyle=ls,
                marker=marker,
                markersize=4,
                label=f"$\\lambda$ = {format_carry(lam)}",
            )
            ax_loss.fill_between(
                steps,
                [_num(s["loss"]["min"]) for s in rows],
                [_num(s["loss"]["max"]) for s in rows],
                color=OKABE_ITO[colour],
                alpha=0.2,
                linewidth=0,
            )
        ax_step.axhline(summary[0]["reference"], color="#666666", linestyle="--", linewidth=1, label="$F_N$")
        ax_step.set_xlabel("training step")
        ax_step.set_ylabel(r"$D_\mathrm{eff}$ (held out)")
        ax_step.legend(frameon=False)
        ax_loss.set_xlabel("training step")
        ax_loss.set_ylabel("held-out next-token loss (nats)")
        ax_loss.legend(frameon=False)
        seeds = summary[0]["seeds"]
        band = f"bands: min-max over {seeds} seeds" if seeds > 1 else "bands: bootstrap interval (one seed)"
        fig.suptitle(
            f"Trained residual-carry control \u2014 {result.config['layers']} layers, d_model {result.config['d_model']}; {band}",
            fontsize=10,
        )
    return fig


def _lam_panel(ax, rows: list, colours: dict) -> None:
    rows = sorted(rows, key=lambda s: s["lam"])
    lam = [s["lam"] for s in rows]
    ax.plot(
        lam,
        [s["reference"] for s in rows],
        color=colours["orange"],
        linestyle="--",
        marker="^",
        markersize=4,
        label="$F_N$",
    )
    ax.plot(
        lam,
        [_num(s["reference_matched"]["mean"]) for s in rows],
        color=colours["vermillion"],
        linestyle=(0, (6, 2)),
        marker="s",
        markersize=4,
        label=r"$R_\mathrm{matched}$",
    )
    centre = np.array([_num(s["deff"]["mean"]) for s in rows])
    bounds = [summary_interval(s) for s in rows]
    err = None
    if any(bounds):
        err = np.clip(
            np.vstack(
                [
                    [c - b[0] if b else 0.0 for c, b in zip(centre, bounds)],
                    [b[1] - c if b else 0.0 for c, b in zip(centre, bounds)],
                ]
            ),
            0.0,
            None,
        )
    ax.errorbar(
        lam,
        centre,
        yerr=err,
        color=colours["blue"],
        marker="o",
        markersize=5,
        linewidth=2,
        capsize=3,
        label=r"$D_\mathrm{eff}$",
    )
    ax.set_xlabel(r"carry $\lambda$")
    ax.set_ylabel("effective depth (states)")
    twin = ax.twinx()
    twin.grid(False)
    twin.spines["right"].set_visible(True)  # the house style hides right spines; a twin axis keeps its own
    twin.plot(
        lam,
        [_num(s["loss"]["mean"]) for s in rows],
        color=colours["reddish_purple"],
        linestyle=(0, (1, 1.5)),
        marker="x",
        label="held-out loss (right)",
    )
    twin.set_ylabel("loss (nats)")
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = twin.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, frameon=False, fontsize=7)


def _num(x) -> float:
    return float("nan") if x is None else float(x)
