"""What a report and the terminal say of a carry experiment.

>>> from effdepth.studies.experiment.result import ExperimentResult
>>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": [1.1, 1.3], "reference": 1.6, "ratio": 0.75,
...        "reference_init": 1.5, "reference_size": 1.6, "reference_matched": 1.4, "loss": 2.0, "train_loss": 2.1}
>>> experiment_final_table(ExperimentResult({}, [rec])).splitlines()[2].split()[:3]
['1', '1.200', '[1.100,']
"""

from __future__ import annotations

from effdepth.report.content.model import Cell, Section, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.report.plain import table_text
from effdepth.results.loading import StudyKind, register
from effdepth.studies.experiment.result import SCHEMA, ExperimentResult, summary_interval
from effdepth.studies.intervene.hooks import format_carry
from effdepth.studies.intervene.report import carry_panel

_LAM_STYLES = (
    ("blue", "-", "o"),
    ("vermillion", "--", "s"),
    ("bluish_green", "-.", "D"),
    ("orange", ":", "^"),
    ("reddish_purple", (0, (6, 2)), "v"),
    ("sky_blue", (0, (3, 1, 1, 1)), "P"),
    ("black", "-", "x"),
)


def experiment_figure(result: ExperimentResult):
    """Three panels: D_eff and loss against lam at the last step; D_eff and held-out loss against step.
    Bands span the seeds (min to max) with several seeds, the bootstrap interval with one.

    >>> recs = [{"lam": lam, "seed": 0, "step": step, "deff": 1.2, "deff_ci": None, "reference": 1.6, "reference_matched": 1.4,
    ...          "loss": 2.0} for lam in (1.0, 0.5) for step in (0, 4)]
    >>> len(experiment_figure(ExperimentResult({"layers": 2, "d_model": 16}, recs)).axes)
    4
    """
    from effdepth.report.figures_common import num
    from effdepth.report.style import OKABE_ITO, new_figure, style

    summary = result.summary()
    last = max(s["step"] for s in summary)
    with style():
        fig = new_figure(11.0, 3.8)
        ax_lam, ax_step, ax_loss = fig.subplots(1, 3)
        handles, labels = carry_panel(ax_lam, _carry_rows(s for s in summary if s["step"] == last), "held-out loss")
        ax_lam.legend(handles, labels, frameon=False, fontsize=7)
        ax_lam.set_title(f"after {last} steps", fontsize=9)
        for i, lam in enumerate(dict.fromkeys(s["lam"] for s in summary)):
            colour, ls, marker = _LAM_STYLES[i % len(_LAM_STYLES)]
            rows = sorted((s for s in summary if s["lam"] == lam), key=lambda s: s["step"])
            steps = [s["step"] for s in rows]
            deff = [summary_interval(s) or [None, None] for s in rows]
            for ax, key, (lo, hi) in (
                (ax_step, "deff", zip(*deff)),
                (ax_loss, "loss", ([s["loss"]["min"] for s in rows], [s["loss"]["max"] for s in rows])),
            ):
                line = dict(color=OKABE_ITO[colour], linestyle=ls, marker=marker, markersize=4)
                ax.plot(steps, [num(s[key]["mean"]) for s in rows], **line, label=f"$\\lambda$ = {format_carry(lam)}")
                ax.fill_between(
                    steps, list(map(num, lo)), list(map(num, hi)), color=OKABE_ITO[colour], alpha=0.2, linewidth=0
                )
        ax_step.axhline(summary[0]["reference"], color="#666666", linestyle="--", linewidth=1, label="$F_L$")
        ax_step.set_xlabel("training step")
        ax_step.set_ylabel(r"$D_\mathrm{eff}$ (held out)")
        ax_step.legend(frameon=False)
        ax_loss.set_xlabel("training step")
        ax_loss.set_ylabel("held-out next-token loss (nats)")
        ax_loss.legend(frameon=False)
        seeds = summary[0]["seeds"]
        band = f"bands: min-max over {seeds} seeds" if seeds > 1 else "bands: bootstrap interval (one seed)"
        c = result.config
        fig.suptitle(
            f"Trained residual-carry control \u2014 {c['layers']} layers, d_model {c['d_model']}; {band}", fontsize=10
        )
    return fig


def _carry_rows(summary) -> list:
    """Summary entries as the carry panel's rows: the mean over seeds, with the seeds' interval."""
    return [
        {
            "lam": s["lam"],
            "deff": s["deff"]["mean"],
            "deff_ci": summary_interval(s),
            "reference": s["reference"],
            "reference_matched": (s.get("reference_matched") or {}).get("mean"),
            "loss": s["loss"]["mean"],
        }
        for s in summary
    ]


def experiment_sections(result: ExperimentResult) -> list:
    """The last step, the paper's Table S14 beside ours for a ``--paper`` run, and D_eff and loss per
    step; the last note says how the run differs from the paper's S17 (as ``experiment.json`` records it)."""
    if not result.records:
        return [Section("", Table(["carry experiment"], [[Cell("no checkpoint was measured")]], [False]))]
    last = max(r["step"] for r in result.records)
    sections = [Section(f"after {last} steps", experiment_final_content(result))]
    if result.config.get("paper"):
        sections.append(Section("beside the paper's Table S14", experiment_paper_content(result)))
    steps = experiment_step_content(result)
    differences = result.config.get("paper_differences")
    if differences:
        steps.note = "differs from the paper's S17 run: " + "; ".join(differences)
    return sections + [Section("per training step", steps)]


def experiment_final_content(result: ExperimentResult) -> Table:
    """D_eff, F_L, ratio, references and losses against lam at the last step."""
    last = max(r["step"] for r in result.records)
    rows = [s for s in result.summary() if s["step"] == last]
    interval = "min-max over seeds" if rows and rows[0]["seeds"] > 1 else "bootstrap CI"
    header = ["lam", "D_eff", interval, "F_L", "ratio", "R_init", "R_size", "R_matched", "eval loss", "train loss"]
    means = ("ratio", "reference_init", "reference_size", "reference_matched")
    body = [
        [Cell(format_carry(s["lam"])), Cell(fmt(s["deff"]["mean"])), Cell(fmt_interval(summary_interval(s)))]
        + [Cell(fmt(s["reference"]))]
        + [Cell(fmt(s[k]["mean"])) for k in means]
        + [Cell(fmt(s["loss"]["mean"], 4)), Cell(fmt(s["train_loss"]["mean"], 4))]
        for s in rows
    ]
    return Table(header, body, [False] + [True] * 9)


def experiment_paper_content(result: ExperimentResult) -> Table:
    """The last step beside the paper's Table S14: D_eff/L, the held-out loss and the mean update-to-state
    norm ratio per carry value, ours (mean and min-max over seeds) and the paper's.

    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": None, "reference": 1.6, "loss": 2.0,
    ...        "norm_ratio": 0.3, "num_states": 12}
    >>> [c.text for c in experiment_paper_content(ExperimentResult({"layers": 12}, [rec])).rows[0][:3]]
    ['1', '0.100', '0.094 [0.093, 0.095]']
    """
    from effdepth.data.paper import table_s14, table_s14_source

    paper = {row.gamma: row for row in table_s14()}
    last = max(r["step"] for r in result.records)
    layers = int(result.config.get("layers") or 1)
    body = []
    for s in (s for s in result.summary() if s["step"] == last):
        p, spread = paper.get(float(s["lam"])), s["deff"]
        ours = fmt(spread["mean"] / layers)
        if s["seeds"] > 1:
            ours += f" [{fmt(spread['min'] / layers)}, {fmt(spread['max'] / layers)}]"
        theirs = "-"
        if p is not None:
            theirs = fmt(p.deff_per_layer) + (f" {fmt_interval(p.deff_per_layer_ci)}" if p.deff_per_layer_ci else "")
        body.append(
            [Cell(format_carry(s["lam"])), Cell(ours), Cell(theirs), Cell(fmt((s.get("loss") or {}).get("mean"), 2))]
            + [Cell("-" if p is None else fmt(p.loss, 2) + ("" if p.loss_ci else " (about)"))]
            + [Cell(fmt((s.get("norm_ratio") or {}).get("mean"), 2)), Cell("-" if p is None else fmt(p.norm_ratio, 2))]
        )
    header = ["gamma", "D_eff/L", "paper D_eff/L", "val loss", "paper val loss", "|f|/|h|", "paper |f|/|h|"]
    note = (
        f"ours: mean [min, max] over seeds at step {last}; |f|/|h|: mean over layers of |f_l|/|h_l-1| (pooled "
        f"passages). paper: {table_s14_source()}"
    )
    return Table(header, body, [False] + [True] * 6, note=note)


def experiment_step_content(result: ExperimentResult) -> Table:
    """D_eff (mean over seeds) and held-out loss against the training step, one column pair per lam.

    >>> recs = [{"lam": lam, "seed": 0, "step": 3, "deff": 1.2, "reference": 1.6, "loss": 2.0} for lam in (1.0, 0.5)]
    >>> experiment_step_table(ExperimentResult({}, recs)).split()[:3]
    ['step', 'D_eff', 'lam=1']
    """
    summary = result.summary()
    carries = list(dict.fromkeys(s["lam"] for s in summary))
    cell = {(s["lam"], s["step"]): s for s in summary}
    header = ["step"] + [f"{q} lam={format_carry(c)}" for q in ("D_eff", "loss") for c in carries]
    body = [
        [Cell(str(step))]
        + [Cell(fmt(cell[c, step]["deff"]["mean"])) for c in carries]
        + [Cell(fmt(cell[c, step]["loss"]["mean"], 4)) for c in carries]
        for step in sorted(dict.fromkeys(s["step"] for s in summary))
    ]
    return Table(header, body, [False] + [True] * (len(header) - 1))


def experiment_final_table(result: ExperimentResult) -> str:
    """:func:`experiment_final_content` as terminal text."""
    return table_text(experiment_final_content(result))


def experiment_paper_table(result: ExperimentResult) -> str:
    """:func:`experiment_paper_content` as terminal text, with where the paper's numbers come from."""
    return table_text(experiment_paper_content(result))


def experiment_step_table(result: ExperimentResult) -> str:
    """:func:`experiment_step_content` as terminal text."""
    return table_text(experiment_step_content(result))


def experiment_headline(result: ExperimentResult) -> str:
    """One line about a carry experiment: the model trained, the training, what was measured.

    >>> cfg = {"layers": 4, "d_model": 96, "steps": 300, "batch_size": 16, "seq_len": 128, "seed_list": [0], "eval_seqs": 32,
    ...        "similarity": "cka"}
    >>> experiment_headline(ExperimentResult(cfg, [])).split(",")[0]
    'carry experiment: 4-layer Llama'
    """
    c = result.config
    return (
        f"carry experiment: {c['layers']}-layer Llama, d_model {c['d_model']}, {c['steps']} steps of {c['batch_size']} x "
        f"{c['seq_len']} tokens, seeds {', '.join(map(str, c['seed_list']))}; measured on {c['eval_seqs']} held-out "
        f"sequences with the carry applied ({c['similarity']}, N = {c['layers']})"
    )


def subject(result: ExperimentResult) -> str:
    c = result.config
    carries = ", ".join(f"{x:g}" for x in c.get("carries") or [])
    return f"a {c.get('layers')}-layer Llama (d_model {c.get('d_model')}), carries {carries}"


KIND = register(
    StudyKind(
        2,
        "experiment",
        SCHEMA,
        ExperimentResult,
        lambda data, path: ExperimentResult.from_dict(data),
        "carry experiment",
        "D_eff and the held-out loss against lam at the last step, and against the training step per lam; bands "
        "span the seeds (the bootstrap interval with one seed).",
        subject,
        experiment_sections,
        experiment_figure,
        experiment_headline,
    )
)
