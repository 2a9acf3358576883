"""Plain-text tables for the terminal and the README (no plotting imports).

- a result (``effdepth measure``, ``effdepth show``): :func:`result_summary_text`;
- the rows of a sweep or a trajectory: :func:`suite_summary_text`;
- an intervention: :func:`intervention_headline`, :func:`intervention_table`;
- a carry experiment: :func:`experiment_headline`, :func:`experiment_final_table`,
  :func:`experiment_step_table`.

All of them are laid out by :func:`render_table` and write numbers with
:func:`~effdepth.report.numbers.fmt`.
"""

from __future__ import annotations

from ..result import Result, ViewResult
from ..results_carry import summary_interval
from .numbers import fmt, fmt_interval

#: Columns of :func:`intervention_table`.
INTERVENTION_COLUMNS = ("lam", "D_eff", "CI", "F_L", "ratio", "R_init", "R_size", "R_matched", "loss", "perplexity")


def render_table(header: list, rows: list) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned.

    >>> print(render_table(["a", "b"], [["x", "1.0"]]))
    a    b
    -  ---
    x  1.0
    """
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(row):
        return "  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths)))

    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


# --------------------------------------------------------------------------- one result


def _interval(v: ViewResult, key: str) -> str:
    return fmt_interval((v.ci or {}).get(key))


def _sub(v: ViewResult) -> str:
    return {True: "yes", False: "no", None: "n/a"}[v.sub_reference]


def summary_table(result: Result) -> str:
    """One row per view: D_eff [interval], F_N, ratio, gap, sub-reference, attribution.

    >>> import effdepth, torch
    >>> print(summary_table(effdepth.from_states(torch.randn(3, 4, 8))).splitlines()[0].split()[:3])
    ['view', 'D_eff', '95%']
    """
    level = next((int(round(100 * v.ci["level"])) for v in result.views.values() if v.ci), 95)
    header = ["view", "D_eff", f"{level}% CI", "F_N", "ratio", "gap %", "sub-ref", "init.state", "size.imbal", "corr.upd"]
    rows = []
    for name, v in result.views.items():
        a = v.attribution
        rows.append(
            [
                name,
                fmt(v.deff),
                _interval(v, "deff"),
                fmt(v.reference),
                fmt(v.ratio),
                fmt(v.gap_pct, 1, signed=True),
                _sub(v),
                fmt(a.get("initial_state"), signed=True),
                fmt(a.get("size_imbalance"), signed=True),
                fmt(a.get("correlated_updates"), signed=True),
            ]
        )
    return render_table(header, rows)


def references_table(result: Result) -> str:
    """The matched references of each view with their intervals."""
    header = ["view", "F_N", "R_init", "R_size", "R_matched", "D_eff"]
    rows = []
    for name, v in result.views.items():
        r = v.references
        rows.append(
            [
                name,
                fmt(v.reference),
                f"{fmt(r.get('init'))} {_interval(v, 'reference_init')}".strip(),
                f"{fmt(r.get('size'))} {_interval(v, 'reference_size')}".strip(),
                f"{fmt(r.get('matched'))} {_interval(v, 'reference_matched')}".strip(),
                fmt(v.deff),
            ]
        )
    return render_table(header, rows)


def headline(result: Result) -> str:
    """One paragraph that says what was measured, on what.

    >>> import effdepth, torch
    >>> headline(effdepth.from_states(torch.randn(3, 4, 8))).splitlines()[1].startswith("D_eff = ")
    True
    """
    p = result.provenance
    model = p.get("model", {})
    corpus = p.get("corpus", {})
    c = result.config
    v = result.default
    what = f"{model.get('id', 'states')}"
    if model.get("revision") not in (None, "main"):
        what += f"@{model['revision']}"
    lines = [
        f"model {what} ({c.get('num_layers')} layers), "
        + (f"corpus {corpus.get('name')} ({v.sequences} x {c.get('seq_len')} tokens), " if corpus else "")
        + f"similarity {c.get('similarity')}, N = {v.num_states} states"
        + (" incl. embedding" if c.get("include_embedding") else ""),
    ]
    ci = _interval(v, "deff")
    lines.append(
        f"D_eff = {fmt(v.deff)} {ci}  vs  F_N = {fmt(v.reference)}: ratio {fmt(v.ratio)}, gap {fmt(v.gap_pct, 1, signed=True)}%"
        + ("  (sub-reference)" if v.sub_reference else "")
    )
    return "\n".join(lines)


def extras_table(result: Result) -> str:
    """Extra measurements (``result.extras``, e.g. the next-token loss), one line each; ``""`` when none.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 4, 8))
    >>> r.extras["loss"] = {"mean": 2.5, "perplexity": 12.18, "tokens": 90}
    >>> print(extras_table(r))
    extra             value
    ---------------  ------
    loss.mean         2.500
    loss.perplexity  12.180
    loss.tokens          90
    """
    rows = [[key, _extra_value(value)] for key, value in _flatten(result.extras or {})]
    return render_table(["extra", "value"], rows) if rows else ""


def _flatten(d: dict, prefix: str = ""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _extra_value(v) -> str:
    if v is None:
        return "n/a"  # non-finite values are saved as null
    if isinstance(v, float):
        return fmt(v) if abs(v) < 1e6 else f"{v:.4g}"
    return str(v)


def result_summary_text(result: Result) -> str:
    """Everything the terminal shows for a result: headline, views, references, extras.

    >>> import effdepth, torch
    >>> "R_matched" in result_summary_text(effdepth.from_states(torch.randn(3, 4, 8)))
    True
    """
    parts = [headline(result), summary_table(result), references_table(result)]
    extras = extras_table(result)
    if extras:
        parts.append(extras)
    return "\n\n".join(parts)


#: Deprecated: the old name of :func:`result_summary_text`, until every caller has moved.
summary_text = result_summary_text


# --------------------------------------------------------------------------- sweeps and trajectories


def suite_summary_text(rows: list[dict]) -> str:
    """The first view of each job of a sweep or trajectory (its summary rows), one line each.

    >>> print(suite_summary_text([{"model": "m", "revision": "main", "status": "ok", "D_eff": 1.2, "D_eff_lo": None,
    ...                            "F_L": 1.9, "ratio": 0.63}]))
    model  revision  D_eff [95% CI]  F_L    ratio  status
    -----  --------  --------------  -----  -----  ------
    m      main      1.200           1.900  0.630  ok
    """
    header = ("model", "revision", "D_eff [95% CI]", "F_L", "ratio", "status")
    lines, seen = [header], set()
    for r in rows:
        if (r["model"], r["revision"]) in seen:
            continue
        seen.add((r["model"], r["revision"]))
        if r.get("D_eff") is None:
            lines.append((r["model"], r["revision"], "-", "-", "-", f"{r['status']}: {r.get('error') or ''}".strip(": ")))
            continue
        ci = f" [{r['D_eff_lo']:.3f}, {r['D_eff_hi']:.3f}]" if r.get("D_eff_lo") is not None else ""
        lines.append((r["model"], r["revision"], f"{r['D_eff']:.3f}{ci}", f"{r['F_L']:.3f}", f"{r['ratio']:.3f}", r.get("note") or r["status"]))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    text = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


# --------------------------------------------------------------------------- residual carry


def intervention_table(ir, view: str | None = None) -> str:
    """The rows of an :class:`~effdepth.results_carry.InterventionResult` as a plain-text table
    (the first view unless ``view`` is given).

    >>> import effdepth, torch
    >>> from effdepth.results_carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 16))})
    >>> intervention_table(ir).split()[:3]
    ['lam', 'D_eff', 'CI']
    """
    from ..capture.intervention import format_carry

    body = [
        [format_carry(r["lam"]), fmt(r["deff"]), fmt_interval(r["deff_ci"]), fmt(r["reference"]), fmt(r["ratio"]),
         fmt(r["reference_init"]), fmt(r["reference_size"]), fmt(r["reference_matched"]), fmt(r["loss"], 4),
         fmt(r["perplexity"], 2)]
        for r in ir.rows(view)
    ]
    return render_table(list(INTERVENTION_COLUMNS), body)


def intervention_headline(ir) -> str:
    """One line about an intervention: model, layers, corpus size and view.

    >>> import effdepth, torch
    >>> from effdepth.results_carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2), {1.0: effdepth.from_states(torch.randn(4, 8, 16))})
    >>> intervention_headline(ir).split(";")[1].split(")")[0]
    ' carry on blocks 1,2'
    """
    first = ir.results[ir.carries[0]]
    model = first.provenance.get("model", {}).get("id", "model")
    v = first.default
    which = "all" if ir.config.get("all_layers") else ",".join(map(str, ir.layers))
    return (
        f"residual-carry intervention on {model} ({first.config.get('num_layers')} layers; carry on blocks {which}), "
        f"{v.sequences} sequences x {first.config.get('seq_len')} tokens, similarity {first.config.get('similarity')}, "
        f"view {v.name}, N = {v.num_states}"
    )


def experiment_final_table(result) -> str:
    """D_eff, F_L, ratio, references and losses against lam at the last step of an
    :class:`~effdepth.results_carry.ExperimentResult`.

    >>> from effdepth.results_carry import ExperimentResult
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": [1.1, 1.3], "reference": 1.6, "ratio": 0.75,
    ...        "reference_init": 1.5, "reference_size": 1.6, "reference_matched": 1.4, "loss": 2.0, "train_loss": 2.1}
    >>> experiment_final_table(ExperimentResult({}, [rec])).splitlines()[2].split()[:3]
    ['1', '1.200', '[1.100,']
    """
    from ..capture.intervention import format_carry

    last = max(r["step"] for r in result.records)
    rows = [s for s in result.summary() if s["step"] == last]
    seeds = rows[0]["seeds"] if rows else 0
    interval = "min-max over seeds" if seeds > 1 else "bootstrap CI"
    header = ["lam", "D_eff", interval, "F_L", "ratio", "R_init", "R_size", "R_matched", "eval loss", "train loss"]
    body = [
        [format_carry(s["lam"]), fmt(s["deff"]["mean"]), fmt_interval(summary_interval(s)), fmt(s["reference"]),
         fmt(s["ratio"]["mean"]), fmt(s["reference_init"]["mean"]), fmt(s["reference_size"]["mean"]),
         fmt(s["reference_matched"]["mean"]), fmt(s["loss"]["mean"], 4), fmt(s["train_loss"]["mean"], 4)]
        for s in rows
    ]
    return render_table(header, body)


def experiment_step_table(result) -> str:
    """D_eff (mean over seeds) and held-out loss against the training step, one column pair per lam.

    >>> from effdepth.results_carry import ExperimentResult
    >>> recs = [{"lam": lam, "seed": 0, "step": 3, "deff": 1.2, "reference": 1.6, "loss": 2.0} for lam in (1.0, 0.5)]
    >>> experiment_step_table(ExperimentResult({}, recs)).split()[:3]
    ['step', 'D_eff', 'lam=1']
    """
    from ..capture.intervention import format_carry

    summary = result.summary()
    carries = list(dict.fromkeys(s["lam"] for s in summary))
    steps = sorted(dict.fromkeys(s["step"] for s in summary))
    cell = {(s["lam"], s["step"]): s for s in summary}
    header = ["step"] + [f"D_eff lam={format_carry(c)}" for c in carries] + [f"loss lam={format_carry(c)}" for c in carries]
    body = [[str(step)] + [fmt(cell[c, step]["deff"]["mean"]) for c in carries]
            + [fmt(cell[c, step]["loss"]["mean"], 4) for c in carries] for step in steps]
    return render_table(header, body)


def experiment_headline(result) -> str:
    """One line about a carry experiment: the model trained, the training, what was measured.

    >>> from effdepth.results_carry import ExperimentResult
    >>> cfg = {"layers": 4, "d_model": 96, "steps": 300, "batch_size": 16, "seq_len": 128, "seed_list": [0], "eval_seqs": 32}
    >>> experiment_headline(ExperimentResult(cfg, [])).split(",")[0]
    'carry experiment: 4-layer Llama'
    """
    c = result.config
    return (f"carry experiment: {c['layers']}-layer Llama, d_model {c['d_model']}, {c['steps']} steps of {c['batch_size']} x "
            f"{c['seq_len']} tokens, seeds {', '.join(map(str, c['seed_list']))}; measured on {c['eval_seqs']} held-out "
            f"sequences with the carry applied (frobenius, N = {c['layers']})")
