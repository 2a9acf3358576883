"""The residual-carry intervention in a model (docs/method.md#residual-carry): D_eff and loss against the carry lam.

The model and the corpus are loaded once and every lam is measured on the same tokens, with the
next-token loss; lam = 1 is the unmodified model.
"""

from __future__ import annotations

import time

from tqdm.auto import tqdm

from effdepth.measurement import prepare
from effdepth.options import AnalysisOptions, Options, RunOptions
from effdepth.results.provenance import provenance_record
from effdepth.results.result import Result
from effdepth.studies.intervene.hooks import (
    carry_hooks,
    check_carry_on,
    check_layer_spec,
    format_carry,
    parse_carry,
    parse_layers,
)
from effdepth.studies.intervene.result import InterventionResult, intervention_row

__all__ = [
    "DEFAULT_CARRY",
    "InterventionResult",
    "intervene",
    "intervention_row",
    "measure_with_carry",
]

DEFAULT_CARRY = (1.0, 0.9, 0.75, 0.5)


def intervene(
    model=None,
    corpus=None,
    *,
    carry=DEFAULT_CARRY,
    layers="all",
    carry_on: str = "blocks",
    progress: bool = True,
    **options,
) -> InterventionResult:
    """Measure D_eff and the next-token loss with the residual carry set to each lam.

    ``carry``: values in [0, 1] (a sequence or ``"1,0.9,0.5"``); ``layers``: ``"all"``, ``"A-B"``,
    ``"1,3,5"`` or a list of 1-based block numbers; ``carry_on``: ``"blocks"`` or ``"sublayers"`` (the
    paper's). ``options`` are :func:`effdepth.measure`'s, so carry 1 gives its number exactly.

    >>> import effdepth, torch
    >>> from effdepth.models.tiny import tiny_model
    >>> ir = effdepth.intervene(tiny_model("llama"), torch.randint(0, 256, (4, 12)), carry=(1, 0.5),
    ...                         bootstrap=0, progress=False)
    >>> [row["lam"] for row in ir.rows()]
    [1.0, 0.5]
    """
    carries = parse_carry(carry)
    check_layer_spec(layers)
    check_carry_on(carry_on)
    # Every option fails here, before minutes of loading weights.
    opts = Options.build(model=model, corpus=corpus, **options)
    started = time.perf_counter()
    prepared = prepare(opts.load, progress=progress)
    blocks = parse_layers(layers, prepared.arch.num_layers)
    results = {}
    for lam in tqdm(carries, desc="carry", unit="value", disable=not progress or len(carries) < 2, leave=False):
        results[lam] = measure_with_carry(prepared, lam, blocks, opts.analysis, progress=progress, on=carry_on)
    paired = paired_to_carry_one(results, opts.analysis.bootstrap)
    config = {
        "carries": list(carries),
        "layers": list(blocks),
        "carry_on": carry_on,
        "all_layers": len(blocks) == prepared.arch.num_layers,
        "layer_spec": layers if isinstance(layers, str) else list(layers),
        **results[carries[0]].config,
    }
    return InterventionResult(carries, blocks, results, config, provenance_record(started=started), paired)


def paired_to_carry_one(results: dict, bootstrap: int) -> dict:
    """``{lam: differences}``: each carry against carry 1 on the same passages, from one paired bootstrap
    (:mod:`effdepth.studies.compare`; ``{}`` without carry 1)."""
    from effdepth.studies.compare import Member, compare_results

    others = [lam for lam in results if lam != 1.0]
    if 1.0 not in results or not others:
        return {}
    members = [Member(results[lam], f"carry {format_carry(lam)}") for lam in (1.0, *others)]
    comparison = compare_results(members, progress=False, cross=False, bootstrap=bootstrap)
    return {lam: pair.differences for lam, pair in zip(others, comparison.pairs)}


def measure_with_carry(
    prepared, lam: float, layers, analysis: AnalysisOptions | None = None, *, progress: bool = True, on: str = "blocks"
) -> Result:
    """One measurement, with the next-token loss over the same passages, inside the carry ``on`` blocks or
    sublayers: :func:`~effdepth.measurement.run.measure_passages` as :func:`effdepth.measure` runs it;
    the carry is recorded in ``result.extras["intervention"]``.
    """
    from effdepth.measurement.run import measure_passages, passage_loss

    analysis = analysis or AnalysisOptions()
    blocks = parse_layers(layers, prepared.arch.num_layers)
    with carry_hooks(prepared.arch, lam, blocks, on=on):
        result = measure_passages(prepared, analysis, run=RunOptions(progress=progress))
        result.extras["loss"] = passage_loss(prepared, prepared.tokens, analysis.batch_size)
    result.extras["intervention"] = {
        "carry": float(lam),
        "layers": list(blocks),
        "carry_on": on,
        "all_layers": len(blocks) == prepared.arch.num_layers,
    }
    return result
