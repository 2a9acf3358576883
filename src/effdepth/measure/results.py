"""A token-mode measurement's statistics -> metrics, intervals and the :class:`~effdepth.result.Result`.

:func:`summarise` turns every similarity's view statistics into summaries;
:func:`token_result` builds the result of a measurement, whether its states
came from a corpus run (:func:`result_from_accumulator`) or from a user
(:func:`states_result`): the same summaries and analysis config, with what
the states came from around them.
"""

from __future__ import annotations

from ..errors import EffdepthError
from ..numerics.similarities import COSINE_SIMILARITIES, get_similarity, keeps_cosine_sums
from ..numerics.streams import ViewAccumulator
from ..numerics.summary import view_summaries
from ..options import AnalysisOptions
from ..provenance import provenance_record
from ..result import Result, view_results
from .prepare import Prepared
from .state import MeasurementState

SIZE_REFERENCE_EMBEDDING = "S_0 counted as one mean-size update"


def token_result(
    state: MeasurementState, analysis: AnalysisOptions, *, provenance: dict, stack: dict, sequences: dict | None = None
) -> Result:
    """The :class:`Result` of token-mode statistics: the summaries of every similarity and view
    (:func:`summarise`), the config (``sequences``: the corpus's shape, when there was one; the
    analysis, :func:`analysis_config`; ``stack``: how the states were made), ``provenance``, and
    the loss when it was measured.

    >>> import torch
    >>> st = MeasurementState.new(AnalysisOptions(bootstrap=0, surrogate_seqs=0, pooling="none"))
    >>> st.update(torch.randn(4, 2, 6, 8).cumsum(0), None)
    >>> r = token_result(st, AnalysisOptions(bootstrap=0, surrogate_seqs=0, pooling="none"), provenance={}, stack={"num_layers": 3})
    >>> r.config["num_layers"], r.default.num_states
    (3, 3)
    """
    views, others, unavailable = summarise(state, analysis)
    config = {**(sequences or {}), **analysis_config(analysis, state.views), **stack}
    extras = {"loss": state.loss.compute()} if state.loss is not None else {}
    return Result(
        views=views, config=config, provenance=provenance, extras=extras, others=others, unavailable=unavailable
    )


def result_from_accumulator(
    prepared: Prepared,
    state: MeasurementState,
    analysis: AnalysisOptions,
    *,
    started: float | None = None,
    run: dict | None = None,
) -> Result:
    """Metrics, intervals, config and provenance of a corpus run's accumulated statistics."""
    lm, arch, tokens = prepared.lm, prepared.arch, prepared.tokens
    acc = state.views
    sequences = {"seq_len": int(tokens.input_ids.shape[1]), "num_seqs": int(tokens.input_ids.shape[0])}
    stack = {
        "add_bos": prepared.add_bos,
        "num_layers": arch.num_layers,
        "blocks_path": arch.paths.get("blocks"),
        "embedding_path": arch.paths.get("embedding"),
        "architecture_source": arch.paths.get("source"),
    }
    provenance = provenance_record(
        model=lm.info,
        corpus={"name": tokens.name, "sha256": tokens.sha256, **tokens.info},
        started=started,
        tokens_measured=acc.tokens,
        padding_rows_skipped=acc.padding_rows,
        run=run or {},
    )
    return token_result(state, analysis, provenance=provenance, stack=stack, sequences=sequences)


def states_result(
    state: MeasurementState, analysis: AnalysisOptions, *, num_layers: int, model: dict | None = None
) -> Result:
    """The :class:`Result` of statistics accumulated from states a user brought (``from_states``,
    ``effdepth.Accumulator``); ``model`` is the provenance of the states."""
    provenance = provenance_record(model=model or {"source": "states"}, padding_rows_skipped=state.views.padding_rows)
    return token_result(state, analysis, provenance=provenance, stack={"num_layers": num_layers})


def summarise(state: MeasurementState, analysis: AnalysisOptions) -> tuple:
    """``(primary views, {other similarity: views}, {similarity: {view: reason}})`` of a measurement."""
    by_similarity, unavailable = {}, {}
    for sim in analysis.similarity:
        done, missing = view_summaries(
            state.views,
            similarity=sim,
            include_embedding=analysis.include_embedding,
            bootstrap=analysis.bootstrap,
            seed=analysis.seed,
            calibrated=state.calibrated,
        )
        by_similarity[sim] = view_results(done)
        if missing:
            unavailable[sim] = missing
    primary, *rest = analysis.similarity
    if not by_similarity[primary]:
        spec = get_similarity(primary)
        other = "" if spec.additive else f", or put {' or '.join(COSINE_SIMILARITIES)} first in --similarity"
        if spec.unit == "pair" and state.views.bootstrap_units(primary) == 0:  # no pair at all: every view says so
            raise EffdepthError(
                f"token-mode {primary} compares the sequences of a pair, and fewer than two sequences "
                f"were measured; measure at least two sequences{other}"
            )
        reasons = "; ".join(f"{v}: {r}" for v, r in unavailable.get(primary, {}).items())
        raise EffdepthError(
            f"no view has a {primary} value ({reasons}); use longer sequences (--seq-len) "
            f"or a view that keeps position 0{other}"
        )
    return by_similarity[primary], {s: by_similarity[s] for s in rest}, unavailable


def analysis_config(analysis: AnalysisOptions, acc: ViewAccumulator) -> dict:
    """The analysis part of a result's config: every analysis option (``similarity`` is the
    primary one, ``similarities`` all of them; ``pc_estimate`` what was fitted, on which
    sequences), and the choices behind the numbers."""
    options = analysis.to_dict()
    return {
        **options,
        "similarity": analysis.primary_similarity,
        "similarities": options["similarity"],
        "bootstrap_fits": "fixed: means and principal directions are not refitted per resample (fit uncertainty is not in the view intervals)",
        "pc_estimate": acc.fit_info,
        "size_reference_embedding": SIZE_REFERENCE_EMBEDDING if analysis.include_embedding else None,
        "cka": CKA_CHOICES if any(not get_similarity(s).additive for s in analysis.similarity) else None,
        "max_memory": analysis.max_memory if any(get_similarity(s).memory_check for s in analysis.similarity) else None,
        "zero_states": "a zero state is orthogonal to every other state (similarity 0) and identical to itself",
        "cosine_summaries": cosine_summaries(analysis.similarity),
    }


def cosine_summaries(similarities) -> str:
    """Which views carry the update summaries and related measures (docs/method.md#no-cosine-summaries).

    >>> cosine_summaries(("cka",))[:24], cosine_summaries(("cka", "frobenius"))
    ('untransformed views only', 'every view')
    """
    if keeps_cosine_sums(similarities):
        return "every view"
    return (
        "untransformed views only (default, drop-pos0, pos0-only): under kernel similarities alone the "
        "transformed views keep no cosine sums"
    )


CKA_CHOICES = {
    "hsic": "cross-sequence: <Y_p Y_q^T, Y_p Y_q^T> / (T_p T_q) over pairs of consecutive sequences, summed over pairs",
    "pairs": "(0, 1), (2, 3), ... in sequence order; an odd last sequence is left out",
    "precision": "centred states multiplied in float32 (float64 states: float64), inner products summed in float64",
    "min_tokens": 4,
    "energies": "covariance norms: square roots of the summed update cross-HSIC diagonal",
    "center_view": "a no-op: per-sequence centring removes any constant shift",
}
