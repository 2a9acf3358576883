"""What a report says about the studies saved beside results, whatever its format: one :class:`Study`
each, with its tables and figure.

- ``null.json`` (``effdepth null``) and ``prune.json`` (``effdepth prune-check``);
- ``intervention.json`` (``effdepth intervene``): D_eff, references and loss against the carry, per view;
- ``experiment.json`` (``effdepth experiment carry``): the last step per carry value, beside the paper's
  Table S14 for a ``--paper`` run, and how the run differs from the paper's;
- ``trajectory.json`` (``effdepth trajectory``): one row per checkpoint with the update diagnostic.

Beside them, the summary of a sweep's or trajectory's rows (:func:`suite_table`) and the offline
recomposition of a result (:func:`recompose_table`). All are :mod:`.content` tables and sections: the
terminal (the commands themselves, ``effdepth show``), the HTML and the Markdown reports render the
same objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from effdepth.report.content.model import Cell, Section, Table
from effdepth.report.numbers import fmt, fmt_interval, format_params
from effdepth.report.rows import lead_rows

STUDY_FILES = {
    "null.json": "null",
    "prune.json": "prune",
    "intervention.json": "intervention",
    "experiment.json": "experiment",
    "trajectory.json": "trajectory",
}
TITLES = {
    "null": "random-weight null",
    "prune": "pruning boundary check",
    "intervention": "residual-carry intervention",
    "experiment": "carry experiment",
    "trajectory": "trajectory",
}
CAPTIONS = {
    "null": "D_eff/L of the default view: each random initialisation (open), their mean (bar) and the trained "
    "model (filled), per similarity.",
    "prune": "Held-out perplexity after skipping the first k blocks of each order (log scale), and each "
    "block's position in the two orders; the line is agreement.",
    "intervention": "D_eff (95% CI), F_N and the matched references against the carry lam of the first view; "
    "the held-out loss on the right axis.",
    "experiment": "D_eff and the held-out loss against lam at the last step, and against the training step per "
    "lam; bands span the seeds (the bootstrap interval with one seed).",
    "trajectory": "D_eff (95% CI), F_N and the matched references against training tokens; below, when measured "
    "(passage mode), the update diagnostic: D_eff/L of the updates f_l beside the states', with "
    "intervals. Grey crosses: checkpoints with the weights of an earlier one.",
}
#: Columns of an intervention's table (:func:`intervention_content`).
INTERVENTION_COLUMNS = ("lam", "D_eff", "CI", "F_N", "ratio", "R_init", "R_size", "R_matched", "loss", "perplexity")


@dataclass
class Study:
    """A saved study: its kind, what it recorded (the JSON of a null or pruning study; the loaded
    intervention, experiment or trajectory), and where."""

    kind: str
    record: object
    path: Path

    @property
    def title(self) -> str:
        return f"{TITLES[self.kind]} of {study_subject(self.kind, self.record)}"

    @property
    def caption(self) -> str:
        return CAPTIONS[self.kind]

    def sections(self) -> list:
        """The study's :class:`~.content.model.Section` objects in order (a title may be empty).

        >>> Study("null", {"summary": {}, "seeds": [0], "config_sha256": "0" * 64}, Path("null.json")).sections()[0].title
        ''
        """
        if self.kind == "null":
            return [Section("", null_table(self.record))]
        if self.kind == "prune":
            return [Section("", prune_table(self.record))]
        if self.kind == "intervention":
            return intervention_sections(self.record)
        if self.kind == "experiment":
            return experiment_sections(self.record)
        return [Section("", trajectory_content(self.record.rows, self.record.duplicates, self.record.preset))]

    def figure(self):
        if self.kind == "null":
            from effdepth.report.figures_null import null_figure

            return null_figure(self.record)
        if self.kind == "prune":
            from effdepth.report.figures_prune import prune_figure

            return prune_figure(self.record)
        if self.kind == "intervention":
            from effdepth.report.figures_intervention import intervention_figure

            return intervention_figure(self.record)
        if self.kind == "experiment":
            from effdepth.report.figures_experiment import experiment_figure

            return experiment_figure(self.record)
        from effdepth.report.figures_trajectory import trajectory_figure

        return trajectory_figure(self.record.rows, title=study_subject("trajectory", self.record))


def study_subject(kind: str, record) -> str:
    """What a study is of: the model (with a trajectory's preset), or the trained model of an experiment.

    >>> study_subject("null", {"model": {"id": "acme/m"}})
    'acme/m'
    """
    if kind in ("null", "prune"):
        return (record.get("model") or {}).get("id", "model")
    if kind == "intervention":
        return record.results[record.carries[0]].provenance.get("model", {}).get("id", "model")
    if kind == "experiment":
        c = record.config
        return f"a {c.get('layers')}-layer Llama (d_model {c.get('d_model')}), carries {', '.join(f'{x:g}' for x in c.get('carries') or [])}"
    preset = record.preset
    return f"{record.model} (preset {preset['name']})" if preset else record.model


def study_kind(obj) -> str | None:
    """The study kind of anything :func:`effdepth.load` returns, ``None`` for a result.

    >>> from effdepth.results.loading import SavedTrajectory
    >>> study_kind(SavedTrajectory("m", [])), study_kind(object())
    ('trajectory', None)
    """
    from effdepth.results.carry import ExperimentResult, InterventionResult
    from effdepth.results.loading import SavedStudy, SavedTrajectory

    if isinstance(obj, SavedStudy):
        return obj.kind
    for kind, cls in (
        ("intervention", InterventionResult),
        ("experiment", ExperimentResult),
        ("trajectory", SavedTrajectory),
    ):
        if isinstance(obj, cls):
            return kind
    return None


def find_studies(paths) -> list:
    """Every study file in ``paths`` (files, or folders searched below), in path order."""
    from effdepth.results.loading import SavedStudy, load

    found = []
    for p in map(Path, paths):
        files = [p] if p.is_file() else sorted(f for name in STUDY_FILES for f in p.rglob(name)) if p.is_dir() else []
        for f in files:
            if f.name in STUDY_FILES:
                obj = load(f)
                kind = study_kind(obj)
                if kind is not None:
                    found.append(Study(kind, obj.record if isinstance(obj, SavedStudy) else obj, f))
    return found


def null_table(record: dict) -> Table:
    """The trained model's D_eff/L and D_eff/F_L against its random-weight null, one row per similarity."""
    rows = []
    for sim, s in record["summary"].items():
        rows.append(
            [
                Cell(sim),
                Cell(fmt(s["trained_deff_per_layer"])),
                Cell(f"{fmt(s['null_deff_per_layer_mean'])} ± {fmt(s['null_deff_per_layer_sd'])}"),
                Cell(fmt(s["trained_ratio"])),
                Cell(f"{fmt(s['null_ratio_mean'])} ± {fmt(s['null_ratio_sd'])}"),
            ]
        )
    seeds = record["seeds"]
    note = (
        f"random init: mean ± sample sd over {len(seeds)} seed(s) ({', '.join(map(str, seeds))}), the same "
        f"architecture (config sha256 {record['config_sha256'][:12]}) and options; default view"
    )
    return Table(
        ["similarity", "trained D_eff/L", "random init D_eff/L", "trained D_eff/F_L", "random init D_eff/F_L"],
        rows,
        [False, True, True, True, True],
        note=note,
    )


def prune_table(record: dict) -> Table:
    """Held-out perplexity per k under each skip order, and the blocks each skips."""
    base = fmt(record["baseline"]["perplexity"])
    rows = [[Cell("0"), Cell("-"), Cell(base), Cell("-"), Cell(base)]]
    for row in record["rows"]:
        rows.append(
            [
                Cell(str(row["k"])),
                Cell(",".join(map(str, row["block_influence_skipped"]))),
                Cell(fmt(row["block_influence_perplexity"])),
                Cell(",".join(map(str, row["local_deff_skipped"]))),
                Cell(fmt(row["local_deff_perplexity"])),
            ]
        )
    note = (
        f"held-out perplexity over {record['heldout'].get('num_passages')} passages "
        f"({record['baseline']['tokens']:,} predicted tokens); Spearman correlation of the two rankings: "
        f"{fmt(record['spearman_of_rankings'])}"
    )
    return Table(
        ["k", "block influence skips", "perplexity", "local D_eff skips", "perplexity"],
        rows,
        [True, False, True, False, True],
        note=note,
    )


# --------------------------------------------------------------------------- residual carry


def intervention_content(ir, view: str | None = None) -> Table:
    """D_eff with its interval, F_N, ratio, references and loss per carry value of an
    :class:`~effdepth.results.carry.InterventionResult` (the first view unless ``view`` is given).

    >>> import effdepth, torch
    >>> from effdepth.results.carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
    >>> intervention_content(ir).header[:3]
    ['lam', 'D_eff', 'CI']
    """
    from effdepth.results.carry import format_carry

    rows = [
        [
            Cell(format_carry(r["lam"])),
            Cell(fmt(r["deff"])),
            Cell(fmt_interval(r["deff_ci"])),
            Cell(fmt(r["reference"])),
            Cell(fmt(r["ratio"])),
            Cell(fmt(r["reference_init"])),
            Cell(fmt(r["reference_size"])),
            Cell(fmt(r["reference_matched"])),
            Cell(fmt(r["loss"], 4)),
            Cell(fmt(r["perplexity"], 2)),
        ]
        for r in ir.rows(view)
    ]
    first = ir.results[ir.carries[0]]
    # The paper's F_L over the L block outputs; with S_0 included, N = L+1 states and F_N.
    paper = first.passages and not first.config.get("include_embedding")
    header = [("F_L" if paper and c == "F_N" else c) for c in INTERVENTION_COLUMNS]
    return Table(header, rows, [False] + [True] * (len(INTERVENTION_COLUMNS) - 1))


def intervention_sections(ir) -> list:
    """One section per view of an :class:`~effdepth.results.carry.InterventionResult`: its table against the carry."""
    first = ir.results[ir.carries[0]]
    return [Section(f"view {name}", intervention_content(ir, name)) for name in first.views]


def experiment_sections(result) -> list:
    """The sections of a carry experiment: the last step, the paper's Table S14 beside ours for a
    ``--paper`` run, and D_eff and loss per step; the last note says how the run differs from the
    paper's S17 (as ``experiment.json`` records it)."""
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


def experiment_final_content(result) -> Table:
    """D_eff, F_N, ratio, references and losses against lam at the last step of an
    :class:`~effdepth.results.carry.ExperimentResult`.

    >>> from effdepth.results.carry import ExperimentResult
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": [1.1, 1.3], "reference": 1.6, "ratio": 0.75,
    ...        "reference_init": 1.5, "reference_size": 1.6, "reference_matched": 1.4, "loss": 2.0, "train_loss": 2.1}
    >>> [c.text for c in experiment_final_content(ExperimentResult({}, [rec])).rows[0][:3]]
    ['1', '1.200', '[1.100, 1.300]']
    """
    from effdepth.results.carry import format_carry, summary_interval

    last = max(r["step"] for r in result.records)
    rows = [s for s in result.summary() if s["step"] == last]
    seeds = rows[0]["seeds"] if rows else 0
    interval = "min-max over seeds" if seeds > 1 else "bootstrap CI"
    header = ["lam", "D_eff", interval, "F_N", "ratio", "R_init", "R_size", "R_matched", "eval loss", "train loss"]
    body = [
        [
            Cell(format_carry(s["lam"])),
            Cell(fmt(s["deff"]["mean"])),
            Cell(fmt_interval(summary_interval(s))),
            Cell(fmt(s["reference"])),
            Cell(fmt(s["ratio"]["mean"])),
            Cell(fmt(s["reference_init"]["mean"])),
            Cell(fmt(s["reference_size"]["mean"])),
            Cell(fmt(s["reference_matched"]["mean"])),
            Cell(fmt(s["loss"]["mean"], 4)),
            Cell(fmt(s["train_loss"]["mean"], 4)),
        ]
        for s in rows
    ]
    return Table(header, body, [False] + [True] * 9)


def experiment_paper_content(result) -> Table:
    """The last step of a carry experiment beside the paper's Table S14: D_eff/L, the held-out loss and
    the mean update-to-state norm ratio per carry value, ours (mean and min-max over seeds) and the paper's.

    >>> from effdepth.results.carry import ExperimentResult
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": None, "reference": 1.6, "loss": 2.0,
    ...        "norm_ratio": 0.3, "num_states": 12}
    >>> [c.text for c in experiment_paper_content(ExperimentResult({"layers": 12}, [rec])).rows[0][:3]]
    ['1', '0.100', '0.094 [0.093, 0.095]']
    """
    from effdepth.data.paper import table_s14, table_s14_source
    from effdepth.results.carry import format_carry

    paper = {row.gamma: row for row in table_s14()}
    last = max(r["step"] for r in result.records)
    layers = int(result.config.get("layers") or 1)
    body = []
    for s in (s for s in result.summary() if s["step"] == last):
        p = paper.get(float(s["lam"]))
        spread = s["deff"]
        ours = f"{fmt(spread['mean'] / layers)}" + (
            f" [{fmt(spread['min'] / layers)}, {fmt(spread['max'] / layers)}]" if s["seeds"] > 1 else ""
        )
        ratio = (s.get("norm_ratio") or {}).get("mean")
        body.append(
            [
                Cell(format_carry(s["lam"])),
                Cell(ours),
                Cell(
                    "-"
                    if p is None
                    else fmt(p.deff_per_layer)
                    + (f" {fmt_interval(p.deff_per_layer_ci)}" if p.deff_per_layer_ci else "")
                ),
                Cell(fmt((s.get("loss") or {}).get("mean"), 2)),
                Cell("-" if p is None else fmt(p.loss, 2) + ("" if p.loss_ci else " (about)")),
                Cell(fmt(ratio, 2)),
                Cell("-" if p is None else fmt(p.norm_ratio, 2)),
            ]
        )
    header = ["gamma", "D_eff/L", "paper D_eff/L", "val loss", "paper val loss", "|f|/|h|", "paper |f|/|h|"]
    note = (
        f"ours: mean [min, max] over seeds at step {last}; |f|/|h|: mean over layers of |f_l|/|h_l-1| (pooled "
        f"passages). paper: {table_s14_source()}"
    )
    return Table(header, body, [False] + [True] * 6, note=note)


def experiment_step_content(result) -> Table:
    """D_eff (mean over seeds) and held-out loss against the training step, one column pair per lam.

    >>> from effdepth.results.carry import ExperimentResult
    >>> recs = [{"lam": lam, "seed": 0, "step": 3, "deff": 1.2, "reference": 1.6, "loss": 2.0} for lam in (1.0, 0.5)]
    >>> experiment_step_content(ExperimentResult({}, recs)).header[:2]
    ['step', 'D_eff lam=1']
    """
    from effdepth.results.carry import format_carry

    summary = result.summary()
    carries = list(dict.fromkeys(s["lam"] for s in summary))
    steps = sorted(dict.fromkeys(s["step"] for s in summary))
    cell = {(s["lam"], s["step"]): s for s in summary}
    header = (
        ["step"] + [f"D_eff lam={format_carry(c)}" for c in carries] + [f"loss lam={format_carry(c)}" for c in carries]
    )
    body = [
        [Cell(str(step))]
        + [Cell(fmt(cell[c, step]["deff"]["mean"])) for c in carries]
        + [Cell(fmt(cell[c, step]["loss"]["mean"], 4)) for c in carries]
        for step in steps
    ]
    return Table(header, body, [False] + [True] * (len(header) - 1))


# --------------------------------------------------------------------------- sweeps and trajectories


def suite_table(rows: list[dict]) -> Table:
    """One row per job of a sweep or trajectory and similarity: its first view with a value (the
    summary rows come one per view and similarity), N, D_eff with its interval, F_N = 2N/(N+1) and the
    ratio; passage-mode rows add the update diagnostic (D_eff of the updates f_l, whole and over L).
    A job without a value says its status and error in the last column.

    >>> t = suite_table([{"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok",
    ...                   "N": 3, "D_eff": 1.2, "D_eff_lo": 1.1, "D_eff_hi": 1.3, "F_N": 1.5, "ratio": 0.8}])
    >>> t.header[-1], [f"{c.text} {c.ci}".strip() for c in t.rows[0]][5]
    ('status', '1.200 [1.100, 1.300]')
    """
    leads = lead_rows(rows, lambda r: (r["model"], r["revision"], r.get("similarity")))
    # The update diagnostic (passage mode): D_eff of the updates f_l, whole and over L, when measured.
    updates = any(r.get("updates_D_eff") is not None for r in leads)
    header = ["model", "revision", "similarity", "view", "N", "D_eff [95% CI]", "F_N", "ratio"]
    header += ["updates D_eff [95% CI]", "updates/L"] if updates else []
    body = []
    for r in leads:
        who = [Cell(str(r["model"])), Cell(str(r["revision"])), Cell(str(r.get("similarity") or "-"))]
        if r.get("D_eff") is None:
            failed = Cell(f"{r['status']}: {r.get('error') or ''}".strip(": "))
            body.append(who + [Cell("-") for _ in header[3:]] + [failed])
            continue
        extra = []
        if updates:
            u, layers = r.get("updates_D_eff"), r.get("L")
            extra = [_value(r, "updates_D_eff"), Cell(fmt(u / layers if u is not None and layers else None))]
        body.append(
            who
            + [
                Cell(str(r.get("view") or "-")),
                Cell(str(r.get("N") or "-")),
                _value(r, "D_eff"),
                Cell(fmt(r["F_N"])),
                Cell(fmt(r["ratio"])),
            ]
            + extra
            + [Cell(r.get("note") or r["status"])]
        )
    return Table(header + ["status"], body, [False] * 4 + [True] * (len(header) - 3))


def recompose_table(rows: list[dict]) -> Table:
    """The offline recomposition of a view (:func:`effdepth.studies.recompose.recompose_rows`' rows): D_eff
    recomposed and decorrelated (with their intervals when bootstrapped), F_N and the ratio per carry.

    >>> recompose_table([{"lam": 1.0, "deff": 1.2, "deff_decorrelated": 1.3, "reference": 1.5, "ratio": 0.8}]).rows[0][0].text
    '1'
    """
    from effdepth.results.carry import format_carry

    header = ["lam", "D_eff recomposed", "D_eff decorrelated", "F_N", "ratio"]
    body = []
    for r in rows:
        ci = r.get("ci") or {}
        body.append(
            [
                Cell(format_carry(r["lam"])),
                Cell(fmt(r["deff"]), fmt_interval(ci.get("deff"))),
                Cell(fmt(r["deff_decorrelated"]), fmt_interval(ci.get("deff_decorrelated"))),
                Cell(fmt(r["reference"])),
                Cell(fmt(r["ratio"])),
            ]
        )
    return Table(header, body, [False] + [True] * 4)


def trajectory_content(rows: list, duplicates: dict | None = None, preset: dict | None = None) -> Table:
    """One row per checkpoint and similarity (its first view with a value): tokens seen, D_eff with its
    interval, F_N, D_eff/F_N, and D_eff/L of the states beside the updates' (the update diagnostic,
    passage mode) with their intervals.

    >>> rows = [{"revision": "step1", "tokens_seen": 2_097_152, "similarity": "cka", "view": "default", "status": "ok",
    ...          "L": 4, "N": 4, "D_eff": 1.2, "D_eff_lo": 1.1, "D_eff_hi": 1.3, "F_N": 1.6, "ratio": 0.75,
    ...          "updates_D_eff": 2.0, "updates_D_eff_lo": 1.8, "updates_D_eff_hi": 2.2}]
    >>> t = trajectory_content(rows)
    >>> [f"{c.text} {c.ci}".strip() for c in t.rows[0]][:2], [f"{c.text} {c.ci}".strip() for c in t.rows[0]][7:9]
    (['step1', '2.1M'], ['0.300 [0.275, 0.325]', '0.500 [0.450, 0.550]'])
    """
    header = [
        "checkpoint",
        "tokens seen",
        "similarity",
        "view",
        "N",
        "D_eff",
        "F_N",
        "D_eff/L",
        "updates D_eff/L",
        "D_eff/F_N",
        "status",
    ]
    body = []
    for r in lead_rows(rows, lambda r: (r["revision"], r.get("similarity"))):
        who = [
            Cell(str(r["revision"])),
            Cell(
                format_params(r.get("tokens_seen"))
                if r.get("tokens_seen") is not None
                else f"step {r['step']}"
                if r.get("step") is not None
                else "-"
            ),
            Cell(str(r.get("similarity") or "-")),
        ]
        if r.get("D_eff") is None:
            body.append(who + [Cell("-")] * 7 + [Cell(f"{r['status']}: {r.get('error') or ''}".strip(": "))])
            continue
        layers = r.get("L")
        body.append(
            who
            + [
                Cell(str(r.get("view") or "-")),
                Cell(str(r.get("N") or "-")),
                _value(r, "D_eff"),
                Cell(fmt(r.get("F_N"))),
                _value(r, "D_eff", layers),
                _value(r, "updates_D_eff", layers),
                Cell(fmt(r.get("ratio"))),
                Cell(r.get("note") or r["status"]),
            ]
        )
    notes = []
    if preset:
        notes.append(f"preset {preset['name']}: {preset['model']}, {preset['revisions']}; {preset['source']}")
    notes.append(
        "D_eff/L and updates D_eff/L: D_eff of the states and of the updates f_l = h_l - h_l-1 over the number "
        "of layers L, with 95% intervals (the update diagnostic; passage mode, CKA estimators; n/a otherwise)"
    )
    notes += [
        f"{dup}: same weights as {original} (flagged, not measured again)"
        for dup, original in (duplicates or {}).items()
    ]
    return Table(header, body, [False, True, False, False] + [True] * 6 + [False], note="\n".join(notes))


def _value(row: dict, key: str, scale=None) -> Cell:
    """A value and its interval from a summary row, divided by ``scale`` when given (n/a without one)."""
    value = row.get(key)
    if value is None or (scale is not None and not scale):
        return Cell("n/a")
    div = float(scale) if scale is not None else 1.0
    lo, hi = row.get(f"{key}_lo"), row.get(f"{key}_hi")
    ci = fmt_interval([lo / div, hi / div]) if lo is not None and hi is not None else ""
    return Cell(fmt(value / div), ci)
