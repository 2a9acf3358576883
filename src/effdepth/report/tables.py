"""What the terminal prints (no plotting imports): report content (:mod:`.content`, :mod:`.studies`)
written by :mod:`.plain`, so the terminal, HTML and Markdown carry the same numbers.

- a result (``effdepth measure``, ``effdepth show``): :func:`result_summary_text`;
- the rows of a sweep or a trajectory: :func:`suite_summary_text`;
- an intervention: :func:`intervention_headline`, :func:`intervention_table`;
- a carry experiment: :func:`experiment_headline`, :func:`experiment_final_table`,
  :func:`experiment_step_table`;
- the paper's claims (``effdepth claims``): :func:`claims_text`, :func:`claims_sweep_text`.
"""

from __future__ import annotations

from effdepth.report.content import result_content
from effdepth.report.content.facts import extras_table
from effdepth.report.plain import content_text, section_text, table_text
from effdepth.report.wording import carry_text
from effdepth.results.result import Result

# --------------------------------------------------------------------------- one result


def result_summary_text(result: Result) -> str:
    """Everything the terminal shows for a result, in either mode: headline, its mode's sections (token
    mode: views, references, the similarities side by side when several), extras. Each table says its
    similarity (and carry).

    >>> import effdepth, torch
    >>> "R_matched" in result_summary_text(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    True
    """
    return content_text(result_content(result), extras_table(result))


# --------------------------------------------------------------------------- sweeps and trajectories


def suite_summary_text(rows: list[dict]) -> str:
    """One line per job of a sweep or trajectory and similarity (:func:`~effdepth.report.studies.suite_table`):
    its first view with a value (the summary rows come one per view and similarity), N and F_N = 2N/(N+1).

    >>> print(suite_summary_text([{"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok",
    ...                            "N": 3, "D_eff": 1.2, "D_eff_lo": None, "F_N": 1.5, "ratio": 0.8}]))
    model  revision  similarity  view     N  D_eff [95% CI]    F_N  ratio  status
    -----  --------  ----------  -------  -  --------------  -----  -----  ------
    m      main      cka         default  3           1.200  1.500  0.800      ok

    Passage-mode rows add the update diagnostic: D_eff of the updates f_l, and over L.

    >>> row = {"model": "m", "revision": "main", "similarity": "cka", "view": "default", "status": "ok", "N": 4, "L": 4,
    ...        "D_eff": 1.2, "D_eff_lo": None, "F_N": 1.6, "ratio": 0.75, "updates_D_eff": 2.0, "updates_D_eff_lo": 1.8,
    ...        "updates_D_eff_hi": 2.2}
    >>> suite_summary_text([row]).splitlines()[2].split()[-5:]
    ['2.000', '[1.800,', '2.200]', '0.500', 'ok']
    """
    from effdepth.report.studies import suite_table

    return table_text(suite_table(rows))


# --------------------------------------------------------------------------- residual carry


def intervention_table(ir, view: str | None = None) -> str:
    """The rows of an :class:`~effdepth.results.carry.InterventionResult` as a plain-text table
    (the first view unless ``view`` is given; :func:`~effdepth.report.studies.intervention_content`).

    >>> import effdepth, torch
    >>> from effdepth.results.carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
    >>> intervention_table(ir).split()[:3]
    ['lam', 'D_eff', 'CI']
    """
    from effdepth.report.studies import intervention_content

    return table_text(intervention_content(ir, view))


def intervention_headline(ir) -> str:
    """One line about an intervention: model, the blocks carried, corpus size, similarity, view and N.

    >>> import effdepth, torch
    >>> from effdepth.results.carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
    >>> intervention_headline(ir).split(";")[1].split(")")[0]
    ' carry on blocks 1,2'
    """
    first = ir.results[ir.carries[0]]
    model = first.provenance.get("model", {}).get("id", "model")
    v = first.default
    which = "all" if ir.config.get("all_layers") else ",".join(map(str, ir.layers))
    sublayers = ", in every attention and MLP sublayer" if ir.config.get("carry_on") == "sublayers" else ""
    return (
        f"residual-carry intervention on {model} ({first.config.get('num_layers')} layers; carry on blocks {which}"
        f"{sublayers}), "
        + (
            f"{v.sequences} passages of at most {first.config.get('seq_len')} tokens (mean "
            f"{first.config.get('mean_passage_tokens')}), "
            if first.passages
            else f"{v.sequences} sequences x {first.config.get('seq_len')} tokens, "
        )
        + f"similarity {first.config.get('similarity')}, "
        f"view {v.name}, N = {v.num_states}"
    )


def experiment_final_table(result) -> str:
    """D_eff, F_N, ratio, references and losses against lam at the last step of an
    :class:`~effdepth.results.carry.ExperimentResult` (:func:`~effdepth.report.studies.experiment_final_content`).

    >>> from effdepth.results.carry import ExperimentResult
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": [1.1, 1.3], "reference": 1.6, "ratio": 0.75,
    ...        "reference_init": 1.5, "reference_size": 1.6, "reference_matched": 1.4, "loss": 2.0, "train_loss": 2.1}
    >>> experiment_final_table(ExperimentResult({}, [rec])).splitlines()[2].split()[:3]
    ['1', '1.200', '[1.100,']
    """
    from effdepth.report.studies import experiment_final_content

    return table_text(experiment_final_content(result))


def experiment_paper_table(result) -> str:
    """The last step of a carry experiment beside the paper's Table S14
    (:func:`~effdepth.report.studies.experiment_paper_content`), with where the paper's numbers come from.

    >>> from effdepth.results.carry import ExperimentResult
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": None, "reference": 1.6, "loss": 2.0,
    ...        "norm_ratio": 0.3, "num_states": 12}
    >>> experiment_paper_table(ExperimentResult({"layers": 12}, [rec])).splitlines()[2].split()[:3]
    ['1', '0.100', '0.094']
    """
    from effdepth.report.studies import experiment_paper_content

    return table_text(experiment_paper_content(result))


def experiment_step_table(result) -> str:
    """D_eff (mean over seeds) and held-out loss against the training step, one column pair per lam.

    >>> from effdepth.results.carry import ExperimentResult
    >>> recs = [{"lam": lam, "seed": 0, "step": 3, "deff": 1.2, "reference": 1.6, "loss": 2.0} for lam in (1.0, 0.5)]
    >>> experiment_step_table(ExperimentResult({}, recs)).split()[:3]
    ['step', 'D_eff', 'lam=1']
    """
    from effdepth.report.studies import experiment_step_content

    return table_text(experiment_step_content(result))


def experiment_headline(result) -> str:
    """One line about a carry experiment: the model trained, the training, what was measured.

    >>> from effdepth.results.carry import ExperimentResult
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


# --------------------------------------------------------------------------- effdepth show


def intervention_text(ir) -> str:
    """An intervention as ``effdepth show`` prints it: the headline, then the table of each view.

    >>> import effdepth, torch
    >>> from effdepth.results.carry import InterventionResult
    >>> ir = InterventionResult((1.0,), (1, 2, 3), {1.0: effdepth.from_states(torch.randn(4, 8, 8, 16))})
    >>> intervention_text(ir).splitlines()[2]
    'view default:'
    """
    from effdepth.report.studies import intervention_sections

    return "\n\n".join([intervention_headline(ir)] + [section_text(s) for s in intervention_sections(ir)])


def experiment_text(result) -> str:
    """A carry experiment as ``effdepth show`` prints it: headline, the last step, the steps.

    >>> from effdepth.results.carry import ExperimentResult
    >>> cfg = {"layers": 2, "d_model": 8, "steps": 3, "batch_size": 2, "seq_len": 8, "seed_list": [0], "eval_seqs": 2,
    ...        "similarity": "cka"}
    >>> rec = {"lam": 1.0, "seed": 0, "step": 3, "deff": 1.2, "deff_ci": None, "reference": 1.33, "ratio": 0.9, "loss": 2.0,
    ...        "reference_init": 1.3, "reference_size": 1.3, "reference_matched": 1.2, "train_loss": 2.1}
    >>> experiment_text(ExperimentResult(cfg, [rec])).splitlines()[0].split(",")[0]
    'carry experiment: 2-layer Llama'
    """
    from effdepth.report.studies import experiment_sections

    if not result.records:
        return experiment_headline(result) + "\n\nno checkpoint was measured"
    return "\n\n".join([experiment_headline(result)] + [section_text(s) for s in experiment_sections(result)])


def trajectory_text(saved) -> str:
    """A saved trajectory (:class:`~effdepth.results.loading.SavedTrajectory`) as ``effdepth show`` prints it.

    >>> from effdepth.results.loading import SavedTrajectory
    >>> print(trajectory_text(SavedTrajectory("m", [], duplicates={"step2": "step1"})).splitlines()[-1])
    step2: same weights as step1 (flagged, not measured again)
    """
    from effdepth.report.studies import trajectory_content

    lines = [f"trajectory of {saved.model}: {len({r['revision'] for r in saved.rows})} checkpoints"]
    if saved.rows:  # the table's note names the preset and the duplicates
        lines += ["", table_text(trajectory_content(saved.rows, saved.duplicates, saved.preset))]
    elif saved.duplicates:
        lines += [""] + [
            f"{dup}: same weights as {original} (flagged, not measured again)"
            for dup, original in saved.duplicates.items()
        ]
    return "\n".join(lines)


def study_text(kind: str, record: dict) -> str:
    """The table of a saved study (``null`` or ``prune``: what its JSON holds), as terminal text."""
    from effdepth.report.studies import null_table, prune_table

    return table_text(null_table(record) if kind == "null" else prune_table(record))


def show_text(obj) -> str:
    """What ``effdepth show`` prints for anything :func:`effdepth.load` returns.

    >>> import effdepth, torch
    >>> show_text(effdepth.from_states(torch.randn(3, 8, 4, 8))).startswith("model states")
    True
    """
    from effdepth.results.carry import ExperimentResult, InterventionResult
    from effdepth.results.loading import SavedStudy, SavedTrajectory

    if isinstance(obj, SavedStudy):
        from effdepth.report.studies import Study

        return f"{Study(obj.kind, obj.record, obj.path).title}\n{study_text(obj.kind, obj.record)}"
    if isinstance(obj, InterventionResult):
        return intervention_text(obj)
    if isinstance(obj, ExperimentResult):
        return experiment_text(obj)
    if isinstance(obj, SavedTrajectory):
        return trajectory_text(obj)
    return result_summary_text(obj)


# --------------------------------------------------------------------------- effdepth claims


def claims_text(result: Result, label: str | None = None) -> str:
    """``effdepth claims`` of one result: what was measured, the verdicts, the numbers behind each, the paper.

    >>> import effdepth, torch
    >>> claims_text(effdepth.from_states(torch.randn(4, 8, 8, 16))).splitlines()[0][:30]
    'Does states reproduce the pape'
    """
    from effdepth.report.content.claims import claims_evidence, claims_table
    from effdepth.report.sources import result_label
    from effdepth.report.wording import PAPER_NOTE
    from effdepth.results.verdicts import claim_tests

    c = result.config
    carry = carry_text(result.extras)
    what = [f"similarities {', '.join(result.similarities)}"]
    if c.get("seq_len"):
        what.append(f"{c.get('num_seqs')} x {c['seq_len']} tokens")
    if carry:
        what.append(carry)
    lines = [
        f"Does {label or result_label(result)} reproduce the paper? ({'; '.join(what)}; docs/method.md#claims)",
        "",
        table_text(claims_table(result), note=False),
        "",
        "what each claim checks:",
    ]
    lines += [f"({i}) {name}: {test}" for i, (name, test) in enumerate(claim_tests(result), start=1)]
    lines += ["", "the numbers behind each verdict (an inequality holds when the whole interval is on its side):"]
    lines += claims_evidence(result)
    lines += ["", PAPER_NOTE]
    return "\n".join(lines)


def claims_sweep_text(entries: list, failed: list = ()) -> str:
    """``effdepth claims`` of several results (a sweep): one row per model and similarity with the five
    verdicts, then per similarity how many models each claim holds for, next to the paper's abstract.

    ``entries`` are ``(label, Result)``; ``failed`` are ``(model, error)`` of models a sweep could not measure.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(4, 8, 8, 16), bootstrap=20)
    >>> claims_sweep_text([("a", r), ("b", r)]).splitlines()[0].split()[:4]
    ['model', 'similarity', '(1)', '(2)']
    """
    from effdepth.report.content.claims import tally_table, verdicts_table
    from effdepth.report.wording import PAPER_NOTE
    from effdepth.results.verdicts import CLAIMS

    lines = [
        table_text(verdicts_table(entries)),
        "",
        "claims: " + "; ".join(f"({i}) {claim}" for i, (_, claim, _) in enumerate(CLAIMS, start=1)),
        "",
        f"models for which each claim holds ({len(entries)} result{'' if len(entries) == 1 else 's'}; n.m. = not measured):",
        table_text(tally_table(entries)),
        "",
        PAPER_NOTE,
    ]
    if failed:
        lines += ["", f"not checked: {len(failed)} model(s) the sweep could not measure:"]
        lines += [f"  {model}: {error}" for model, error in failed]
    lines += ["", "effdepth claims RESULT (one result.json) prints the numbers behind each verdict."]
    return "\n".join(lines)


def passage_comparison_text(entries: list) -> str:
    """The passage-mode results among ``entries`` (``(label, Result)``) in the layout of the paper's Table 2,
    the paper's row beside ours, under its heading; ``""`` when none is in passage mode."""
    from effdepth.report.content.compare import table2_section
    from effdepth.report.content.confounds import confound_warnings, confounds_comparison_table

    section = table2_section(entries)
    if section is None:
        return ""
    parts = [f"{section.heading}:\n{table_text(section.table)}"]
    controls = confounds_comparison_table(entries)
    if controls is not None:
        parts.append(f"Confounds, position 0 and passage length (D_eff / F_L):\n{table_text(controls)}")
    warnings = [f"{label}: {line}" for label, result in entries for line in confound_warnings(result)]
    return "\n\n".join(parts + (["\n".join(warnings)] if warnings else []))
