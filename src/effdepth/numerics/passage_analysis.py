"""Pooled vectors -> every view's numbers under every similarity, with bootstrap intervals (docs/method.md#passage-mode).

The pure last stage of passage mode: arrays in, plain data out; no model, no
file. For each view:

1. its pooled matrices S_0..S_L (N x d each), from the stored variant, top-k
   principal directions removed when the view asks (fitted exactly, on all N);
2. the HSIC of every pair of states and of updates ``S_l - S_{l-1}``
   (:mod:`~effdepth.numerics.sample_hsic`), under the estimate and every
   resample at once;
3. the finite-sample references (docs/method.md#calibrated-references):
   ``structural_cal``, isotropic Gaussian equal updates at the run's N, d and
   L, and ``matched_cal``, the measured initial state plus the measured
   updates with their passages permuted independently per layer, both
   through the same view and estimator;
4. the numbers of :mod:`~effdepth.numerics.passage_metrics`, the point
   estimate from row 0 and percentile intervals from the resamples.

Every view, stack and surrogate is resampled with the same unit weights, so
their intervals are paired.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import EffdepthError
from .passage_metrics import REFERENCE_NAMES, analysed, cka, kernel_numbers, plain_numbers
from .passage_views import PassageView, check_top_pcs, parse_views
from .references import reference_fl
from .sensitivity import sensitivity_numbers
from .sample_hsic import DEFAULT_BUDGET_BYTES, MIN_SAMPLES, Units, centred, resample_weights, resampled_hsic, stack_sums
from .pooling import TOKEN_SUMS
from .similarity import deff


@dataclass(frozen=True)
class SampleSimilarity:
    """A similarity across passages: its name, what it says, and which HSIC estimator (if any) it is made of."""

    name: str
    label: str  # what it is, in words (headlines, captions)
    axis_label: str  # on a figure
    estimator: str | None = None  # "biased" / "debiased" (resampled_hsic's keys); None for cosine
    references: bool = True  # the matched references (covariance norms) are defined


SIMILARITIES = {
    s.name: s
    for s in (
        SampleSimilarity("cka", "linear CKA across passages, biased HSIC: the paper's", "linear CKA across passages",
                         "biased"),
        SampleSimilarity("cka-debiased", "linear CKA across passages, unbiased HSIC (Song et al. 2012)",
                         "debiased linear CKA across passages", "debiased"),
        SampleSimilarity("cosine", "mean over passages of the cosine of pooled vectors", "mean cosine of pooled vectors",
                         None, references=False),
    )
}
#: What passage mode reports unless told otherwise: the paper's estimator and, always beside it, the debiased one.
DEFAULT_SIMILARITIES = ("cka", "cka-debiased")
ALL_SIMILARITIES = ("cka", "cka-debiased", "cosine")
#: Resampling units unless told otherwise: each a block of consecutive passages (one passage each when N is smaller).
DEFAULT_BOOTSTRAP_UNITS = 128
LEVEL = 0.95


def parse_similarities(value) -> tuple:
    """Passage-mode similarities from a comma list, ``all`` or a sequence; ``cka`` always brings
    ``cka-debiased`` beside it.

    >>> parse_similarities("cka"), parse_similarities("cosine"), parse_similarities("all")
    (('cka', 'cka-debiased'), ('cosine',), ('cka', 'cka-debiased', 'cosine'))
    """
    names = value.split(",") if isinstance(value, str) else list(value or DEFAULT_SIMILARITIES)
    out: list = []
    for name in names:
        name = str(name).strip()
        for n in ALL_SIMILARITIES if name == "all" else (name,):
            if n not in SIMILARITIES:
                token = " is token mode's (--pooling none)" if n in ("frobenius", "token", "cka-full") else ""
                raise EffdepthError(f"--similarity {n!r}{token}: passage mode measures {', '.join(SIMILARITIES)}, "
                                    "a comma list of them, or all")
            if n not in out:
                out.append(n)
            if n == "cka" and "cka-debiased" not in out:
                out.append("cka-debiased")
    if not out:
        raise EffdepthError("--similarity is empty; use e.g. --similarity cka or --similarity all")
    return tuple(out)


@dataclass(frozen=True)
class AnalysisPlan:
    """How the pooled vectors are analysed: views, similarities, the embedding state, intervals, memory."""

    views: tuple = ("default",)
    similarities: tuple = DEFAULT_SIMILARITIES
    include_embedding: bool = False
    bootstrap: int = 1000
    bootstrap_units: int = DEFAULT_BOOTSTRAP_UNITS
    seed: int = 0
    calibrated: bool = True
    max_memory: int = DEFAULT_BUDGET_BYTES
    device: str = "cpu"
    specs: tuple = field(init=False, repr=False)

    def __post_init__(self):
        object.__setattr__(self, "specs", tuple(parse_views(self.views)))
        object.__setattr__(self, "views", tuple(v.name for v in self.specs))
        object.__setattr__(self, "similarities", parse_similarities(self.similarities))


def check_samples(samples: int, width: int, num_layers: int, plan: AnalysisPlan) -> None:
    """One-line errors for pooled data too small for the plan (before anything is computed)."""
    if samples < MIN_SAMPLES:
        raise EffdepthError(f"{samples} passage(s) measured: similarity across passages needs at least {MIN_SAMPLES} "
                            "(the debiased estimator pairs four distinct passages); use more passages (--num-seqs)")
    if num_layers + plan.include_embedding < 2:
        raise EffdepthError("the model has one layer: D_eff compares at least two states; add --include-embedding "
                            "to compare S_0 with S_1, or measure a deeper model")
    check_top_pcs(plan.specs, samples, width)


def analyse_pooled(pooled: dict, plan: AnalysisPlan, *, token_sums: np.ndarray | None = None,
                   lengths: np.ndarray | None = None, progress=None) -> dict:
    """``{"similarities": {similarity: {view: summary}}, "analysis": facts}`` from pooled vectors.

    ``pooled`` maps each stored variant to an array ``(L+1, N, d)`` (S_0..S_L
    of every passage); ``token_sums`` ``(N, L, 3)`` and ``lengths`` ``(N,)``
    add block influence and the token-level update ratio to the untransformed
    views. ``progress(label)`` is called before each view.

    >>> rng = np.random.default_rng(0)
    >>> states = np.cumsum(rng.normal(size=(4, 64, 8)), axis=0)   # S_0..S_3 of 64 passages
    >>> out = analyse_pooled({"default": states}, AnalysisPlan(bootstrap=20, calibrated=False))
    >>> v = out["similarities"]["cka"]["default"]; v["num_states"], v["sequences"], sorted(v["ci"])[:2]
    (3, 64, ['correlated_updates', 'deff'])
    """
    first = next(iter(pooled.values()))
    count, samples, width = (int(x) for x in first.shape)
    num_layers = count - 1
    check_samples(samples, width, num_layers, plan)
    device = torch.device(plan.device)
    units = Units.blocks(samples, plan.bootstrap_units if plan.bootstrap > 0 else 1)
    weights = resample_weights(units.count, plan.bootstrap, plan.seed)
    context = _Context(plan, units, weights, device, samples, width, num_layers, token_sums, lengths)
    by_sim: dict = {s: {} for s in plan.similarities}
    fits: dict = {}
    for spec in plan.specs:
        if progress is not None:
            progress(spec.name)
        # a float64 copy: the saved vectors may be a read-only memory map
        states = [torch.from_numpy(np.array(pooled[spec.variant][l], dtype=np.float64)).to(device) for l in range(count)]
        if spec.top_pcs:
            states, fits[spec.name] = remove_top_directions(states, spec.top_pcs)
        for sim, summary in context.view(spec, states).items():
            by_sim[sim][spec.name] = summary
        del states
    facts = {
        "bootstrap": {"resamples": int(plan.bootstrap), "level": LEVEL, **units.describe(),
                      "how": "units (blocks of consecutive passages) drawn with replacement; every view, stack and "
                             "surrogate resampled with the same draws (paired intervals)"},
        "pc_fits": fits,
        "debiased_resamples": "the weighted U-statistic of each HSIC term over distinct original passages",
        "biased_resamples": "the V-statistic with a passage's copies never paired with each other (each tuple "
                            "weighs the counts of its distinct passages)",
        "pc_fit_resampled": False,
        "calibrated": "structural_cal: isotropic Gaussian equal updates (N, d, L as measured); matched_cal: S_0 plus "
                      "the measured updates, passages permuted independently per layer" if plan.calibrated else None,
    }
    return {"similarities": by_sim, "analysis": facts}


@dataclass
class _Context:
    plan: AnalysisPlan
    units: Units
    weights: np.ndarray
    device: torch.device
    samples: int
    width: int
    num_layers: int
    token_sums: np.ndarray | None
    lengths: np.ndarray | None
    _structural: dict = field(default_factory=dict)

    @property
    def kernel(self) -> list:
        return [SIMILARITIES[s] for s in self.plan.similarities if SIMILARITIES[s].estimator]

    def view(self, spec: PassageView, states: list) -> dict:
        """Every similarity's summary of one view."""
        draws: dict = {}
        if self.kernel:
            hs = self._hsic(states)
            hf = self._hsic([b - a for a, b in zip(states[:-1], states[1:])])
            for sim in self.kernel:
                draws[sim.name] = kernel_numbers(hs[sim.estimator], hf[sim.estimator], self.plan.include_embedding)
        if "cosine" in self.plan.similarities:
            draws["cosine"] = plain_numbers(self._cosine(states)[:, analysed(self.plan.include_embedding), analysed(self.plan.include_embedding)])
        ratio = self._norm_ratio(states)
        for d in draws.values():
            d["sensitivity"] = sensitivity_numbers(d["similarity"])
            d["update_norm_ratio"] = ratio
        if self.plan.calibrated:
            for name, values in self._calibrated(spec, states).items():
                for sim, d in values.items():
                    draws[sim][f"reference_{name}"] = d
        related = self._related() if spec.variant == "default" else {}
        return {sim: self._summary(sim, d, related) for sim, d in draws.items()}

    def _hsic(self, matrices: list) -> dict:
        sums = stack_sums(matrices, self.units, budget_bytes=self.plan.max_memory)
        return resampled_hsic(sums, self.weights)

    def _cosine(self, states: list) -> np.ndarray:
        """(R, M, M) mean over passages of the cosine of (uncentred) pooled vectors, under every resample."""
        stack = torch.stack(states)  # (M, N, d)
        unit = stack / torch.linalg.vector_norm(stack, dim=-1, keepdim=True).clamp_min(1e-300)
        index = self.units.index(self.device)
        sums = torch.zeros(self.units.count, len(states), len(states), dtype=torch.float64, device=self.device)
        for lo in range(0, self.samples, 256):
            chunk = unit[:, lo:lo + 256].transpose(0, 1)  # (n, M, d)
            sums.index_add_(0, index[lo:lo + 256], torch.bmm(chunk, chunk.transpose(1, 2)))
        w = torch.as_tensor(self.weights, dtype=torch.float64, device=self.device)
        counts = w @ torch.as_tensor(self.units.sizes, dtype=torch.float64, device=self.device)
        return (torch.einsum("rg,gij->rij", w, sums) / counts[:, None, None]).cpu().numpy()

    def _norm_ratio(self, states: list) -> np.ndarray:
        """(R, L) ``mean_b |f_l^b| / mean_b |h_{l-1}^b|`` over the passages of every resample: how large each
        update is against the state it is added to (pooled vectors, uncentred)."""
        stack = torch.stack(states)  # (L+1, N, d)
        norms = torch.linalg.vector_norm(stack, dim=-1)  # (L+1, N)
        updates = torch.linalg.vector_norm(stack[1:] - stack[:-1], dim=-1)  # (L, N)
        index = self.units.index(self.device)
        per_unit = torch.zeros(2, updates.shape[0], self.units.count, dtype=torch.float64, device=self.device)
        per_unit[0].index_add_(1, index, updates)
        per_unit[1].index_add_(1, index, norms[:-1])
        sums = torch.einsum("rg,klg->krl", torch.as_tensor(self.weights, dtype=torch.float64, device=self.device), per_unit)
        with np.errstate(invalid="ignore", divide="ignore"):
            return (sums[0] / sums[1]).cpu().numpy()

    def _calibrated(self, spec: PassageView, states: list) -> dict:
        """``{"structural_cal": {sim: D_eff draws}, "matched_cal": ...}`` of the view's surrogates."""
        out = {}
        key = spec.top_pcs  # the isotropic surrogate differs between views only by their pooled stage
        if key not in self._structural:
            self._structural[key] = self._surrogate_deff(structural_surrogate(
                self.samples, self.width, self.num_layers + self.plan.include_embedding, self.plan.seed, self.device), spec,
                analysed_all=True)
        out["structural_cal"] = self._structural[key]
        out["matched_cal"] = self._surrogate_deff(matched_surrogate(states, self.plan.seed), spec, analysed_all=False,
                                                  transformed=True)
        return out

    def _surrogate_deff(self, states: list, spec: PassageView, *, analysed_all: bool, transformed: bool = False) -> dict:
        if spec.top_pcs and not transformed:
            states, _ = remove_top_directions(states, spec.top_pcs)
        view = slice(0, None) if analysed_all else analysed(self.plan.include_embedding)
        out = {}
        if self.kernel:
            h = self._hsic(states)
            for sim in self.kernel:
                out[sim.name] = deff(cka(h[sim.estimator])[:, view, view])
        if "cosine" in self.plan.similarities:
            out["cosine"] = deff(self._cosine(states)[:, view, view])
        return out

    def _related(self) -> dict:
        """Block influence and |u_l| / |s_{l-1}| over tokens, under every resample (from the per-token sums)."""
        if self.token_sums is None or self.lengths is None:
            return {}
        index = self.units.index("cpu").numpy()
        per_unit = np.zeros((self.units.count,) + self.token_sums.shape[1:])
        np.add.at(per_unit, index, self.token_sums)
        tokens = np.bincount(index, weights=np.asarray(self.lengths, dtype=np.float64), minlength=self.units.count)
        sums = np.tensordot(self.weights, per_unit, axes=(1, 0))  # (R, L, 3)
        n = (self.weights @ tokens)[:, None]
        k = {name: i for i, name in enumerate(TOKEN_SUMS)}
        with np.errstate(invalid="ignore", divide="ignore"):
            return {"block_influence": 1.0 - sums[..., k["cos_prev"]] / n,
                    "relative_contribution": sums[..., k["update_norm"]] / sums[..., k["prev_norm"]]}

    def _summary(self, similarity: str, draws: dict, related: dict) -> dict:
        spec = SIMILARITIES[similarity]
        point, ci = split_draws({**draws, **{f"related.{k}": v for k, v in related.items()}})
        sim = point["similarity"]
        n = sim.shape[-1]
        refs = {r: float(point[f"reference_{r}"]) for r in REFERENCE_NAMES if f"reference_{r}" in point}
        for name in ("structural_cal", "matched_cal"):
            if f"reference_{name}" in point:
                refs[name] = float(point[f"reference_{name}"])
        summary = {
            "deff": float(point["deff"]),
            "reference": reference_fl(n),
            "ratio": float(point["ratio"]),
            "gap_pct": float(point["gap_pct"]),
            "num_states": n,
            "tokens": int(np.sum(self.lengths)) if self.lengths is not None else 0,
            "sequences": self.samples,
            "profile": point["profile"].tolist(),
            "similarity": sim.tolist(),
            "references": refs,
            "attribution": {k: float(point[k]) for k in ("initial_state", "size_imbalance", "correlated_updates") if k in point},
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
        if spec.estimator:
            summary.update({
                "update_similarity": point["update_similarity"].tolist(),
                "update_deff": float(point["update_deff"]),
                "update_sizes": point["update_sizes"].tolist(),
            })
        return summary


def split_draws(draws: dict) -> tuple:
    """``(point, ci)``: row 0 of every array (nested dicts of arrays too), and percentile intervals over
    the other rows (``None`` without resamples). Each quantity's interval leaves out the resamples where
    it is not finite; ``nan_resamples`` counts those of D_eff (a warning says so).

    >>> point, ci = split_draws({"deff": np.array([1.5, 1.4, 1.6, 1.5])})
    >>> float(point["deff"]), ci["deff"], ci["nan_resamples"]
    (1.5, [1.405, 1.595], 0)
    """
    flat = _flatten(draws)
    point = _unflatten({k: v[0] for k, v in flat.items()})
    rows = next(iter(flat.values())).shape[0] - 1
    if rows < 2:
        return point, None
    q = [100 * (1 - LEVEL) / 2, 100 * (1 + LEVEL) / 2]
    failed = int((~np.isfinite(flat["deff"][1:])).sum())
    ci: dict = {"level": LEVEL, "resamples": rows, "nan_resamples": failed}
    for name, value in flat.items():
        if name.startswith("reference_profiles.") or name == "update_similarity" or (
                name.startswith("sensitivity.") and name.endswith(".reference")):
            continue
        draws_ = value[1:]
        finite = np.isfinite(draws_.reshape(rows, -1)).all(axis=1)
        if finite.any():
            lo, hi = np.percentile(draws_[finite], q, axis=0)
        else:
            lo = hi = np.full(value.shape[1:], np.nan)
        ci[name.split(".", 1)[1] if name.startswith("related.") else name] = (
            [lo.tolist(), hi.tolist()] if np.ndim(lo) else [float(lo), float(hi)])
    if failed:
        warnings.warn(f"{failed} of {rows} bootstrap resamples gave no D_eff (NaN) and were left out of its "
                      "percentiles (counted in ci['nan_resamples'])", stacklevel=3)
    return point, ci


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = np.asarray(v, dtype=np.float64)
    return out


def _unflatten(flat: dict) -> dict:
    out: dict = {}
    for k, v in flat.items():
        head, _, tail = k.partition(".")
        if tail and head == "reference_profiles":
            out.setdefault(head, {})[tail] = v
        elif tail and head == "sensitivity":
            variant, _, quantity = tail.rpartition(".")
            out.setdefault(head, {}).setdefault(variant, {})[quantity] = v
        else:
            out[k] = v
    return out


def remove_top_directions(states: list, k: int) -> tuple:
    """Each matrix with its top-k principal directions (of the column-centred matrix) removed:
    ``P (I - V V^T)``; and per layer the relative eigen-gap after the k-th eigenvalue.

    >>> y = [torch.tensor([[3.0, 0.0], [-3.0, 0.0], [0.0, 1.0], [0.0, -1.0]], dtype=torch.float64)]
    >>> out, fit = remove_top_directions(y, 1)
    >>> out[0][:, 0].abs().max().item(), fit["eigengap"]
    (0.0, [0.888889])
    """
    out, gaps = [], []
    for y in states:
        v, values = top_directions(centred(y), k)
        out.append(y - (y @ v) @ v.T)
        top, nxt = float(values[k - 1]), float(values[k]) if len(values) > k else 0.0
        gaps.append(round((top - nxt) / top, 6) if top > 0 else 0.0)
    return out, {"k": k, "eigengap": gaps, "how": "exact: eigendecomposition of the smaller of Yc^T Yc and Yc Yc^T"}


def top_directions(yc: torch.Tensor, k: int) -> tuple:
    """The top-k right singular vectors ``(d, k)`` of a centred matrix, and its top k+1 squared singular values."""
    n, d = yc.shape
    if d <= n:
        values, vectors = torch.linalg.eigh(yc.T @ yc)
        order = torch.argsort(values, descending=True)
        return vectors[:, order[:k]], values[order[: k + 1]].clamp_min(0.0)
    values, left = torch.linalg.eigh(yc @ yc.T)
    order = torch.argsort(values, descending=True)
    top = values[order[:k]].clamp_min(1e-300)
    v = yc.T @ left[:, order[:k]] / torch.sqrt(top)
    return v, values[order[: k + 1]].clamp_min(0.0)


def structural_surrogate(samples: int, width: int, count: int, seed: int, device) -> list:
    """``count`` cumulative sums of isotropic Gaussian updates (samples x width): F_N's process at this size.

    >>> [tuple(s.shape) for s in structural_surrogate(5, 3, 2, 0, "cpu")]
    [(5, 3), (5, 3)]
    """
    generator = torch.Generator(device="cpu").manual_seed(int(seed) * 1_000_003 + 17)
    updates = torch.randn(count, samples, width, generator=generator, dtype=torch.float64)
    return list(torch.cumsum(updates, dim=0).to(device))


def matched_surrogate(states: list, seed: int) -> list:
    """S_0 plus the measured updates with their passages permuted independently per layer: the measured
    covariances exactly, zero cross-covariance between layers.

    >>> s = [torch.zeros(4, 2, dtype=torch.float64), torch.ones(4, 2, dtype=torch.float64)]
    >>> [t.sum().item() for t in matched_surrogate(s, 0)]
    [0.0, 8.0]
    """
    generator = torch.Generator(device="cpu").manual_seed(int(seed) * 1_000_003 + 29)
    n = int(states[0].shape[0])
    out = [states[0]]
    for a, b in zip(states[:-1], states[1:]):
        order = torch.randperm(n, generator=generator).to(b.device)
        out.append(out[-1] + (b - a)[order])
    return out
