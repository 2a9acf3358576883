"""Pooled vectors -> every view's numbers under every similarity, with bootstrap intervals (docs/method.md#passage-mode).

For each view: its pooled matrices S_0..S_L (top-k principal directions removed when asked); the HSIC of
every pair of states and of updates under the estimate and every resample at once; the calibrated
references (docs/method.md#calibrated-references); and the numbers of :mod:`~effdepth.numerics.metrics`
(row 0 the estimate, percentile intervals from the resamples). Every view, stack and surrogate is
resampled with the same unit weights, so their intervals are paired; :func:`analysis_memory` says what
is kept within ``plan.max_memory``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import torch

from effdepth.errors import EffdepthError
from effdepth.numerics.confounds import SUBSAMPLE_ROWS, Subsamples, confound_table, subsample_curve
from effdepth.numerics.hsic_plan import (
    DEFAULT_BUDGET_BYTES,
    F64,
    byte_size,
    hsic_route,
    least_stack_bytes,
    output_bytes,
    stack_plan,
)
from effdepth.numerics.hsic_resample import Units, resample_weights, resampled_hsic
from effdepth.numerics.intervals import LEVEL, percentile_interval, split_draws
from effdepth.numerics.metrics import REFERENCE_NAMES, analysed, cka, kernel_numbers, plain_numbers
from effdepth.numerics.pooling import TOKEN_SUMS
from effdepth.numerics.references import reference_fl
from effdepth.numerics.sample_hsic import LayerStack, stack_sums
from effdepth.numerics.sampling import sample_units
from effdepth.numerics.sensitivity import sensitivity_numbers
from effdepth.numerics.similarities import SIMILARITIES, fewest_samples, parse_similarities
from effdepth.numerics.similarity import deff
from effdepth.numerics.stacks import IsotropicSurrogate, Kept, MatchedSurrogate, PooledStates, Updates
from effdepth.numerics.views import CONTROLS, PassageView, check_top_pcs, parse_view, parse_views

#: Resampling units unless told otherwise: each a block of consecutive passages (one passage each when N is smaller).
DEFAULT_BOOTSTRAP_UNITS = 128
#: (rows, M, M) float64 arrays a similarity's numbers hold at once: both stacks' HSIC (both estimators),
#: its similarity and update similarity, and their transients (measured: tests/integration/test_passage_memory.py).
NUMBER_ARRAYS = 12


@dataclass(frozen=True)
class AnalysisPlan:
    """How the pooled vectors are analysed: views, similarities, the embedding state, intervals, memory."""

    views: tuple = ("default",)
    similarities: tuple | None = None  # None: the default (cka, with cka-debiased beside it)
    include_embedding: bool = False
    bootstrap: int = 1000
    bootstrap_units: int = DEFAULT_BOOTSTRAP_UNITS
    seed: int = 0
    calibrated: bool = True
    max_memory: int = DEFAULT_BUDGET_BYTES
    device: str = "cpu"
    #: The confound controls and the sample-size curve (every measurement has them; False is the baseline
    #: that benchmarks/passages.py times them against).
    controls: bool = True
    specs: tuple = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "specs", tuple(parse_views(self.views)))
        object.__setattr__(self, "views", tuple(v.name for v in self.specs))
        object.__setattr__(self, "similarities", parse_similarities(self.similarities))


def check_samples(samples: int, width: int, num_layers: int, plan: AnalysisPlan) -> None:
    """One-line errors for pooled data too small for the plan (before anything is computed)."""
    least = fewest_samples()  # any passage-mode similarity: effdepth analyse may ask for another
    if samples < least.min_samples:
        raise EffdepthError(
            f"{samples} passage(s) measured: similarity across passages needs at least {least.min_samples} "
            f"({least.min_reason}); use more passages (--num-seqs)"
        )
    if num_layers + plan.include_embedding < 2:
        raise EffdepthError(
            "the model has one layer: D_eff compares at least two states; add --include-embedding "
            "to compare S_0 with S_1, or measure a deeper model"
        )
    check_top_pcs(plan.specs, samples, width)


def bootstrap_unit_count(samples: int, plan: AnalysisPlan) -> int:
    """The resampling units of a plan: blocks of consecutive passages (also without resamples: the
    sample-size curve draws subsets of them)."""
    return Units.blocks(samples, plan.bootstrap_units).count


def analysis_units(passages: int, plan: AnalysisPlan, offsets: dict | None = None) -> Units:
    """The bootstrap's units of the largest stack the analysis forms: blocks of consecutive passages, or
    under the token reduction (``offsets``) the same blocks in sample space, of the variant holding the
    most samples (:func:`~effdepth.numerics.sampling.sample_units`)."""
    units = Units.blocks(passages, bootstrap_unit_count(passages, plan))
    if not offsets:
        return units
    return max((sample_units(units, o) for o in offsets.values()), key=lambda u: (u.samples, int(u.sizes.max())))


def analysis_memory(samples: int, num_layers: int, width: int, plan: AnalysisPlan, units: Units | None = None) -> dict:
    """How the analysis of N = ``samples`` pooled vectors of L+1 states (width d) uses ``plan.max_memory``
    (``units``: the bootstrap's units in sample space, :func:`analysis_units`; default blocks).

    ``kept``: a view's float64 matrices fit a quarter of the budget (else they are read again);
    ``draws_bytes``: the states' HSIC under every weight row; ``stack``: the largest stack's
    :func:`~.hsic_plan.stack_plan` within the rest; ``eigen_bytes``, ``numbers_bytes``: a top-k view's
    eigendecomposition and a similarity's numbers; ``least_bytes``, ``peak_bytes``: least and most.

    >>> m = analysis_memory(10_000, 64, 5120, AnalysisPlan(views="paper", max_memory=4 << 30))
    >>> m["kept"], m["stack"]["route"], m["peak_bytes"] <= 4 << 30, round(m["least_bytes"] / 2**30, 2)
    (False, 'gram', True, 3.64)
    """
    units = units if units is not None else Units.blocks(samples, plan.bootstrap_units)
    count = num_layers + 1
    budget = int(plan.max_memory)
    rows = weight_rows(plan)
    view_bytes = F64 * count * samples * width
    draws = output_bytes(count, rows)
    numbers = NUMBER_ARRAYS * F64 * rows * count * count
    eigen = 3 * F64 * min(samples, width) ** 2 if any(v.top_pcs for v in plan.specs) else 0
    least = max(
        least_stack_bytes(count, samples, width, units, "gram", rows) + draws, eigen + F64 * samples * width, numbers
    )
    kept = view_bytes <= budget // 4 and budget - view_bytes >= least
    stack_budget = budget - view_bytes * kept - draws
    stack = stack_plan(count, samples, width, units, stack_budget, rows=rows)
    return {
        "budget_bytes": budget,
        "kept": kept,
        "stack_budget_bytes": int(stack_budget),
        "stack": stack,
        "draws_bytes": int(draws),
        "eigen_bytes": eigen,
        "numbers_bytes": int(numbers),
        "least_bytes": int(least),
        "peak_bytes": int(view_bytes * kept + max(stack["peak_bytes"] + draws, eigen, numbers)),
    }


def weight_rows(plan: AnalysisPlan) -> int:
    """The weight rows a stack is resampled under at most: the estimate, the resamples and the subsamples."""
    return 1 + int(plan.bootstrap) + (SUBSAMPLE_ROWS if plan.controls else 0)


def one_pass_bytes(samples: int, num_layers: int, width: int, plan: AnalysisPlan, units: Units | None = None) -> int:
    """The least budget (to 0.1 GiB) in which every stack reads its layers once.

    >>> round(one_pass_bytes(10_000, 64, 5120, AnalysisPlan()) / 2**30, 1)
    52.9
    """
    step = 2**30 // 10
    low, high = 1, 1
    while (
        analysis_memory(samples, num_layers, width, replace(plan, max_memory=high * step), units)["stack"]["passes"] > 1
    ):
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        passes = analysis_memory(samples, num_layers, width, replace(plan, max_memory=middle * step), units)["stack"][
            "passes"
        ]
        low, high = (low, middle) if passes == 1 else (middle, high)
    return high * step


@dataclass(frozen=True)
class SizedPlan:
    """An :class:`AnalysisPlan` sized for its samples (:func:`sized_plan`): made once per measurement, before
    the forward passes, and handed on to the analysis."""

    plan: AnalysisPlan
    passages: int
    num_layers: int
    width: int
    offsets: dict | None  # the token reduction's: where each passage's samples start, per variant
    units: Units  # the bootstrap's units of the largest stack (:func:`analysis_units`)
    memory: dict  # :func:`analysis_memory` of that stack


def sized_plan(
    plan: AnalysisPlan, passages: int, num_layers: int, width: int, offsets: dict | None = None
) -> SizedPlan:
    """``plan`` for the samples of ``passages`` passages (``offsets``: the token reduction's), L+1 states of
    width d; one-line errors, before any forward pass, when they are too few for it or ``--max-memory`` is
    below the analysis's least working set.

    >>> sized_plan(AnalysisPlan(max_memory=1 << 30), 10_000, 64, 5120)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --max-memory 1.0 GiB is below the 3.7 GiB the analysis needs at least for 10,000 samples, 65 states of width 5120 and 128 bootstrap units; use --max-memory 3.7GiB or more, or fewer --bootstrap-units
    """
    check_samples(passages, width, num_layers, plan)
    units = analysis_units(passages, plan, offsets)
    memory = analysis_memory(units.samples, num_layers, width, plan, units)
    if plan.max_memory < memory["least_bytes"]:
        need = byte_size(memory["least_bytes"], round_up=True)
        raise EffdepthError(
            f"--max-memory {byte_size(plan.max_memory)} is below the {need} the analysis needs at least for "
            f"{units.samples:,} samples, {num_layers + 1} states of width {width} and {units.count} "
            f"bootstrap units; use --max-memory {need.replace(' ', '')} or more, or fewer --bootstrap-units"
        )
    return SizedPlan(plan, passages, num_layers, width, offsets, units, memory)


def analyse_pooled(
    pooled: dict,
    plan: AnalysisPlan | SizedPlan,
    *,
    token_sums: np.ndarray | None = None,
    lengths: np.ndarray | None = None,
    progress=None,
    offsets: dict | None = None,
) -> dict:
    """``{"similarities": {similarity: {view: summary}}, "analysis": facts}`` from pooled vectors.

    ``pooled`` maps each stored variant to ``(L+1, N, d)``; ``lengths`` ``(N,)``, the passages' token
    counts, feed the ``length`` view, and with ``token_sums`` ``(N, L, 3)`` block influence and the
    token-level update ratio. ``progress(label)`` is called before each view. ``analysis`` adds
    ``confounds`` and ``sample_size``. ``offsets`` (the token reduction): per variant, where each
    passage's samples start (N+1); its confound controls are left out.

    >>> rng = np.random.default_rng(0)
    >>> states = np.cumsum(rng.normal(size=(4, 64, 8)), axis=0)   # S_0..S_3 of 64 passages
    >>> out = analyse_pooled({"default": states}, AnalysisPlan(bootstrap=20, calibrated=False))
    >>> v = out["similarities"]["cka"]["default"]; v["num_states"], v["sequences"], sorted(v["ci"])[:2]
    (3, 64, ['correlated_updates', 'deff'])
    >>> sorted(out["confounds"]["cka"]), out["confounds"]["notes"]["length"]
    (['default'], 'no passage lengths given')
    """
    context, sized = _analysis_context(pooled, plan, token_sums, lengths, offsets)
    plan, units, memory = sized.plan, context.passage_units, sized.memory
    if lengths is None and any(v.has("length") for v in plan.specs):
        raise EffdepthError(
            "the length view regresses each passage's token count out, and no lengths were given; "
            "give lengths=, or leave out length views"
        )
    controls = plan.controls and offsets is None
    by_sim: dict = {s: {} for s in plan.similarities}
    fits: dict = {}
    for spec in plan.specs:
        if progress is not None:
            progress(spec.name)
        states = context.view_states(spec, pooled)
        if hasattr(states, "fit"):
            fits[spec.name] = states.fit
        if memory["kept"]:
            states = Kept(states)
        for sim, summary in context.view(spec, states).items():
            by_sim[sim][spec.name] = summary
        del states
    notes = context.controls(pooled) if controls else {}
    facts = {
        "bootstrap": {
            "resamples": int(plan.bootstrap),
            "level": LEVEL,
            **units.describe(),
            "how": "units (blocks of consecutive passages) drawn with replacement; every view, stack and "
            "surrogate resampled with the same draws (paired intervals)",
        },
        "pc_fits": fits,
        "debiased_resamples": "the weighted U-statistic of each HSIC term over distinct original passages",
        "biased_resamples": "the V-statistic with a passage's copies never paired with each other (each tuple "
        "weighs the counts of its distinct passages)",
        "pc_fit_resampled": False,
        "calibrated": "structural_cal: isotropic Gaussian equal updates (N, d, L as measured); matched_cal: S_0 plus "
        "the measured updates, passages permuted independently per layer"
        if plan.calibrated
        else None,
        "hsic_routes": sorted(context.routes),
        "memory": {
            "budget": byte_size(memory["budget_bytes"]),
            "peak": byte_size(memory["peak_bytes"]),
            "view_kept": memory["kept"],
            "resident_layers": memory["stack"]["resident"],
            "passes": memory["stack"]["passes"],
        },
    }
    reference = reference_fl(sized.num_layers + plan.include_embedding)
    confounds: dict = (
        {sim: confound_table(views, reference, LEVEL) for sim, views in context.deff_draws.items()} if controls else {}
    )
    confounds["notes"] = notes
    if context.equal_lengths:
        confounds["length_is_default"] = (
            f"every passage has {int(lengths[0])} tokens: nothing to regress out, the length view is the default view"
        )
    return {"similarities": by_sim, "analysis": facts, "confounds": confounds, "sample_size": context.sample_size()}


def _analysis_context(pooled: dict, plan, token_sums, lengths, offsets) -> tuple:
    """``(context, sized plan)`` of an analysis of ``pooled``: the bootstrap's units and weights, the
    subsamples, the budget of the stacks (what :func:`analyse_pooled` and :func:`deff_draws` share)."""
    if not isinstance(plan, SizedPlan):
        count, samples, width = (int(x) for x in next(iter(pooled.values())).shape)
        passages = samples if offsets is None else len(next(iter(offsets.values()))) - 1
        plan = sized_plan(plan, passages, count - 1, width, offsets)
    sized, plan = plan, plan.plan
    units = Units.blocks(sized.passages, bootstrap_unit_count(sized.passages, plan))
    weights = resample_weights(units.count, plan.bootstrap, plan.seed)
    subsamples = Subsamples.draw(units, plan.seed) if plan.controls else Subsamples.none(units)
    device, budget = torch.device(plan.device), sized.memory["stack_budget_bytes"]
    shape = (sized.passages, sized.width, sized.num_layers)
    context = _Context(plan, units, weights, device, *shape, token_sums, lengths, budget, subsamples)
    context.units_by_variant = {v: sample_units(units, o) for v, o in (sized.offsets or {}).items()}
    return context, sized


def deff_draws(
    pooled: dict,
    plan: AnalysisPlan | SizedPlan,
    *,
    lengths: np.ndarray | None = None,
    offsets: dict | None = None,
    views=None,
) -> dict:
    """D_eff of each view under the estimate and every resample, as :func:`analyse_pooled` makes them (the
    same units, weights and view stages; row 0 its ``deff``, the percentiles of the rest its ``ci["deff"]``),
    and nothing else: the states' HSIC per view, no references, no update stack (docs/method.md#comparing-two-results).

    Same inputs as :func:`analyse_pooled`; ``views`` (default ``plan.views``) may name any view whose
    variant ``pooled`` holds. Returns ``deff`` ``{similarity: {view: (1 + R,)}}``; for the default view
    ``subsamples`` ``{similarity: (S,)}``, D_eff under the rows of ``subsample_draws``
    (:class:`~.confounds.Subsamples`); ``states``, the analysed states (F_L's L); ``units``, the
    bootstrap's units of passages, and ``weights``, their counts ``(1 + R, G)``: two draw sets pair when
    both are equal (:mod:`~effdepth.numerics.paired`).

    >>> states = np.cumsum(np.random.default_rng(0).normal(size=(4, 64, 8)), axis=0)
    >>> plan = AnalysisPlan(bootstrap=20, calibrated=False)
    >>> d = deff_draws({"default": states}, plan); whole = analyse_pooled({"default": states}, plan)["similarities"]
    >>> d["deff"]["cka"]["default"].shape, d["subsamples"]["cka"].shape, d["states"]
    ((21,), (60,), 3)
    >>> float(d["deff"]["cka"]["default"][0]) == whole["cka"]["default"]["deff"]
    True
    """
    context, sized = _analysis_context(pooled, plan, None, lengths, offsets)
    specs = context.plan.specs if views is None else tuple(parse_views(views))
    check_top_pcs(specs, sized.passages, sized.width)
    for spec in specs:
        why = context._unmeasurable(spec, pooled)
        if why:
            raise EffdepthError(f"view {spec.name} cannot be measured on these pooled vectors: {why}")
    out: dict = {s: {} for s in context.plan.similarities}
    for spec in specs:
        for sim, values in context.view_deff(spec, pooled, keep=sized.memory["kept"]).items():
            out[sim][spec.name] = values
    return {
        "deff": out,
        "subsamples": dict(context.subsample_deff),
        "subsample_draws": context.subsamples,
        "states": sized.num_layers + context.plan.include_embedding,
        "units": context.passage_units,
        "weights": context.weights,
    }


@dataclass
class _Context:
    plan: AnalysisPlan
    passage_units: Units  # blocks of consecutive passages: the bootstrap's units
    weights: np.ndarray
    device: torch.device
    passages: int
    width: int
    num_layers: int
    token_sums: np.ndarray | None
    lengths: np.ndarray | None
    budget: int  # bytes for the stacks, besides a view kept in memory and the states' HSIC
    subsamples: Subsamples
    _structural: dict = field(default_factory=dict)
    routes: set = field(default_factory=set)
    #: ``{similarity: {view: (R,) D_eff draws}}`` of default and the controls (the confounds table).
    deff_draws: dict = field(default_factory=dict)
    #: ``{similarity: (S,) D_eff on the subsamples}`` of the default view (CKA estimators).
    subsample_deff: dict = field(default_factory=dict)
    #: The token reduction: each variant's units in sample space (the same passages as ``passage_units``).
    units_by_variant: dict = field(default_factory=dict)
    #: The units of the view being analysed (its samples: passages, or the tokens of whole passages).
    units: Units | None = None

    def __post_init__(self):
        self.units = self.passage_units

    def view_states(self, spec: PassageView, pooled: dict) -> LayerStack:
        """The view's S_0..S_L: its variant's pooled vectors through its stage after pooling (a fitted stage
        keeps its ``fit``); its units become the context's."""
        self.units = self.units_by_variant.get(spec.variant, self.passage_units)
        return spec.after_pooling(PooledStates(pooled[spec.variant], self.device), self.lengths)

    @property
    def kernel(self) -> list:
        """The similarities made of an HSIC estimator."""
        return [SIMILARITIES[s] for s in self.plan.similarities if SIMILARITIES[s].kernel]

    @property
    def direct(self) -> list:
        """The similarities computed from the pooled vectors directly."""
        return [SIMILARITIES[s] for s in self.plan.similarities if not SIMILARITIES[s].kernel]

    def _matrix(self, sim, stack: LayerStack) -> np.ndarray:
        """(R, M, M) a direct similarity's matrix of a stack under every resample."""
        return sim.matrix(stack, self.units, self.weights, self.budget, self.device)

    def view(self, spec: PassageView, states: LayerStack) -> dict:
        """Every similarity's summary of one view (``states``: its S_0..S_L, the view applied).

        The references' D_eff draws come first, and each similarity is summarised as soon as its draws
        are made: no stack is computed while a similarity's (R, M, M) draws are held (what is held is
        what :func:`analysis_memory` counts)."""
        ratio = self._norm_ratio(states)
        references = self._calibrated(spec, states) if self.plan.calibrated else {}
        related = self._related() if spec.variant == "default" else {}
        out = {}
        for sim, draws in self._similarity_draws(spec, states):
            if spec.name in ("default", *CONTROLS):
                self.deff_draws.setdefault(sim, {})[spec.name] = draws["deff"]
            draws["sensitivity"] = sensitivity_numbers(draws["similarity"])
            draws["update_norm_ratio"] = ratio
            for name, values in references.items():
                draws[f"reference_{name}"] = values[sim]
            out[sim] = self._summary(sim, draws, related)
            del draws  # before the next similarity's draws are made
        return out

    def _similarity_draws(self, spec: PassageView, states: LayerStack):
        """``(similarity, its draws)`` one similarity at a time: the HSIC estimators' from the states' and the
        updates' HSIC (both estimators of one stack at once), then the direct ones'."""
        if self.kernel:
            hs = self._state_hsic(spec, states)
            hf = self._hsic(Updates(states))
            for sim in self.kernel:
                yield sim.name, kernel_numbers(hs[sim.estimator], hf[sim.estimator], self.plan.include_embedding)
            del hs, hf
        kept = analysed(self.plan.include_embedding)
        for sim in self.direct:
            yield sim.name, plain_numbers(self._matrix(sim, states)[:, kept, kept])

    def _hsic(self, stack: LayerStack, weights: np.ndarray | None = None) -> dict:
        """Both HSIC estimators of every pair of the stack, under the estimate and every resample (or
        under ``weights``)."""
        weights = self.weights if weights is None else weights
        rows = len(weights)
        route = hsic_route(stack.count, stack.samples, self.width, self.units, self.budget, rows)
        plan = stack_plan(stack.count, stack.samples, self.width, self.units, self.budget, route, rows)
        self.routes.add(plan["route"])
        sums = stack_sums(stack, self.units, budget_bytes=self.budget, route=plan["route"])
        return resampled_hsic(sums, weights, chunk=plan["chunk"])

    def _state_hsic(self, spec: PassageView, states: LayerStack) -> dict:
        """The states' HSIC under the estimate and every resample; for the default view, also under the
        subsamples' weights, whose D_eff goes to :attr:`subsample_deff`."""
        if spec.name != "default" or not len(self.subsamples.weights):
            return self._hsic(states)
        rows = len(self.weights)
        both = self._hsic(states, np.concatenate([self.weights, self.subsamples.weights]))
        kept = analysed(self.plan.include_embedding)
        for sim in self.kernel:
            self.subsample_deff[sim.name] = deff(cka(both[sim.estimator][rows:])[:, kept, kept])
        return {key: value[:rows] for key, value in both.items()}

    def view_deff(self, spec: PassageView, pooled: dict, keep: bool = False) -> dict:
        """``{similarity: (R,) D_eff draws}`` of a view from its states' HSIC alone (the default view's with the
        subsamples); ``keep``: its states held in memory after a first pass."""
        states = self.view_states(spec, pooled)
        states = Kept(states) if keep else states
        hsic = self._state_hsic(spec, states) if self.kernel else None
        return self._deff(states, analysed(self.plan.include_embedding), hsic)

    def controls(self, pooled: dict) -> dict:
        """D_eff draws of default and each control the views did not hold (its states' HSIC alone; the
        default view's with the subsamples; with equal lengths, length's are default's); ``{control: why}``
        for those that cannot be measured."""
        notes = {}
        for name in ("default", *CONTROLS):
            if all(name in self.deff_draws.get(s, {}) for s in self.plan.similarities):
                continue
            spec = parse_view(name)
            why = self._unmeasurable(spec, pooled)
            if why:
                notes[name] = why
                continue
            if spec.has("length") and self.equal_lengths:
                for sim in self.plan.similarities:  # nothing to regress out: the length view is default itself
                    self.deff_draws[sim][name] = self.deff_draws[sim]["default"]
                continue
            for sim, draws in self.view_deff(spec, pooled).items():
                self.deff_draws.setdefault(sim, {})[name] = draws
        return notes

    @property
    def equal_lengths(self) -> bool:
        """Every passage of one length: the length view regresses nothing out (it is the default view)."""
        return self.lengths is not None and len(np.unique(np.asarray(self.lengths))) == 1

    def _unmeasurable(self, spec: PassageView, pooled: dict) -> str:
        """Why a control cannot be measured on these pooled vectors ('' when it can)."""
        if spec.variant not in pooled:
            return (
                f"the pooled vectors hold no {spec.variant} variant (pooled before effdepth measured this control); "
                "measure again to have it"
            )
        if spec.has("length") and self.lengths is None:
            return "no passage lengths given"
        if spec.has("drop-pos0") and self.lengths is not None and (np.asarray(self.lengths) < 2).any():
            return "passage(s) of one token have nothing to pool without position 0"
        return ""

    def sample_size(self) -> dict:
        """Per CKA estimator, D_eff on the subsamples beside the full estimate (:func:`subsample_curve`)."""
        out: dict = {
            "draws": self.subsamples.draws,
            "seed": int(self.plan.seed),
            "notes": list(self.subsamples.notes),
            "how": "nested random subsets of the bootstrap's units (N/8 within N/4 within N/2, draw by draw), "
            "each estimated as on its passages alone",
        }
        for sim, rows in self.subsample_deff.items():
            full = self.deff_draws[sim]["default"]
            out[sim] = subsample_curve(
                self.subsamples, rows, float(full[0]), percentile_interval(full[1:]), self.passages
            )
        return out

    def _norm_ratio(self, stack: LayerStack) -> np.ndarray:
        """(R, L) ``mean_b |f_l^b| / mean_b |h_{l-1}^b|`` over the passages of every resample: how large each
        update is against the state it is added to (pooled vectors, uncentred); one pass over the stack."""
        norms, updates, previous = [], [], None
        for y in stack.layers():
            norms.append(torch.linalg.vector_norm(y, dim=-1))
            if previous is not None:
                updates.append(torch.linalg.vector_norm(y - previous, dim=-1))
            previous = y
        index = self.units.index(self.device)
        per_unit = torch.zeros(2, len(updates), self.units.count, dtype=torch.float64, device=self.device)
        per_unit[0].index_add_(1, index, torch.stack(updates))
        per_unit[1].index_add_(1, index, torch.stack(norms[:-1]))
        sums = torch.einsum(
            "rg,klg->krl", torch.as_tensor(self.weights, dtype=torch.float64, device=self.device), per_unit
        )
        with np.errstate(invalid="ignore", divide="ignore"):
            return (sums[0] / sums[1]).cpu().numpy()

    def _calibrated(self, spec: PassageView, states: LayerStack) -> dict:
        """``{"structural_cal": {sim: D_eff draws}, "matched_cal": ...}`` of the view's surrogates."""
        # the isotropic surrogate differs between views only by their pooled stage (and, for tokens, their samples)
        key = (spec.pooled_stage, states.samples)
        if key not in self._structural:
            surrogate = IsotropicSurrogate(
                states.samples, self.width, self.num_layers + self.plan.include_embedding, self.plan.seed, self.device
            )
            self._structural[key] = self._deff(spec.after_pooling(surrogate, self.lengths), slice(0, None))
        # the matched surrogate is made of the view's own states: already through its pooled stage
        matched = self._deff(MatchedSurrogate(states, self.plan.seed), analysed(self.plan.include_embedding))
        return {"structural_cal": self._structural[key], "matched_cal": matched}

    def _deff(self, stack: LayerStack, view: slice, hsic: dict | None = None) -> dict:
        """``{similarity: (R,) D_eff draws}`` of the stack's states in ``view`` (``hsic``: its HSIC, when made)."""
        out = {}
        if self.kernel:
            h = self._hsic(stack) if hsic is None else hsic
            for sim in self.kernel:
                out[sim.name] = deff(cka(h[sim.estimator])[:, view, view])
        for sim in self.direct:
            out[sim.name] = deff(self._matrix(sim, stack)[:, view, view])
        return out

    def _related(self) -> dict:
        """Block influence and |u_l| / |s_{l-1}| over tokens, under every resample (from the per-token sums)."""
        if self.token_sums is None or self.lengths is None:
            return {}
        index = self.passage_units.index("cpu").numpy()
        per_unit = np.zeros((self.passage_units.count,) + self.token_sums.shape[1:])
        np.add.at(per_unit, index, self.token_sums)
        tokens = np.bincount(
            index, weights=np.asarray(self.lengths, dtype=np.float64), minlength=self.passage_units.count
        )
        sums = np.tensordot(self.weights, per_unit, axes=(1, 0))  # (R, L, 3)
        n = (self.weights @ tokens)[:, None]
        k = {name: i for i, name in enumerate(TOKEN_SUMS)}
        with np.errstate(invalid="ignore", divide="ignore"):
            return {
                "block_influence": 1.0 - sums[..., k["cos_prev"]] / n,
                "relative_contribution": sums[..., k["update_norm"]] / sums[..., k["prev_norm"]],
            }

    def _summary(self, similarity: str, draws: dict, related: dict) -> dict:
        spec = SIMILARITIES[similarity]
        point, ci = split_draws({**draws, **{f"related.{k}": v for k, v in related.items()}})
        sim = point["similarity"]
        n = sim.shape[-1]
        names = (*REFERENCE_NAMES, "structural_cal", "matched_cal")
        refs = {r: float(point[f"reference_{r}"]) for r in names if f"reference_{r}" in point}
        summary = {
            "deff": float(point["deff"]),
            "reference": reference_fl(n),
            "ratio": float(point["ratio"]),
            "gap_pct": float(point["gap_pct"]),
            "num_states": n,
            "tokens": int(np.sum(self.lengths)) if self.lengths is not None else 0,
            "sequences": self.passages,
            "profile": point["profile"].tolist(),
            "similarity": sim.tolist(),
            "references": refs,
            "attribution": {
                k: float(point[k]) for k in ("initial_state", "size_imbalance", "correlated_updates") if k in point
            },
            "update_cosine": [],
            "update_state_cosine": [],
            "update_energy": [],
            "related": {k.split(".", 1)[1]: v.tolist() for k, v in point.items() if k.startswith("related.")},
            "reference_profiles": {k: v.tolist() for k, v in point["reference_profiles"].items()},
            "update_norm_ratio": point["update_norm_ratio"].tolist(),
            "sensitivity": {k: {q: float(x) for q, x in v.items()} for k, v in point["sensitivity"].items()},
            "ci": ci,
            "definition": similarity,
        }
        if spec.kernel:
            summary.update(
                {
                    "update_similarity": point["update_similarity"].tolist(),
                    "update_deff": float(point["update_deff"]),
                    "update_sizes": point["update_sizes"].tolist(),
                }
            )
        return summary
