"""``effdepth compare``: is B's D_eff different from A's? (docs/method.md#comparing-two-results)

Two results measured on the same passages err together, so only a paired bootstrap answers: the
passages are resampled once, and each resample gives D_eff of both (:meth:`Member.draws`, from the
saved pooled vectors, no forward pass). The difference's interval is the percentile interval of the
resampled differences. Beside it, the cross-model CKA of every state of A against every state of B.
A model given in place of a saved result is measured on the first result's passages
(:func:`measure_like`), which are checked to pair before its weights load.

>>> import effdepth, torch
>>> from effdepth.models.tiny import tiny_model
>>> ids = torch.randint(0, 256, (16, 12))
>>> a, b = (effdepth.measure(tiny_model(t), ids, bootstrap=0, progress=False) for t in ("llama", "gpt2"))
>>> c = compare(a, a, bootstrap=20, progress=False)
>>> d = c.pair().difference("ratio"); d["estimate"], d["interval"]
(0.0, [0.0, 0.0])
>>> len(compare(a, b, bootstrap=20, progress=False).pair().cross["cka"])   # S_0..S_3 of A against B's
4
"""

from __future__ import annotations

import time
from dataclasses import replace
from itertools import combinations
from pathlib import Path

import numpy as np

from effdepth.errors import EffdepthError
from effdepth.numerics.analysis import deff_draws
from effdepth.numerics.cross_cka import cross_cka
from effdepth.numerics.paired import paired_differences
from effdepth.numerics.stacks import PooledStates
from effdepth.options import AnalysisOptions
from effdepth.results.loading import load
from effdepth.results.pairing import PassagesToMeasure, check_pairing
from effdepth.results.provenance import provenance_record
from effdepth.results.result import Result
from effdepth.results.store import PooledStore
from effdepth.studies.compare.options import PAIRS, CompareOptions
from effdepth.studies.compare.result import Comparison, PairComparison

__all__ = ["compare", "compare_results", "Comparison", "CompareOptions", "PairComparison", "Member"]

#: Fewer shared passages than this cannot bound a difference (nor form the sample-size curve's subsets).
MIN_PASSAGES = 4


class Member:
    """One result of a comparison: its label, where it was read from, and its pooled vectors (opened once)."""

    def __init__(self, result: Result, label: str, path: Path | None = None):
        self.result, self.label, self.path = result, label, path
        if not result.passages:
            raise EffdepthError(
                f"{label} is an old token-mode result (statistics summed over tokens, no samples kept): a paired "
                "comparison resamples its passages; measure it again"
            )
        if result.pooled is None:
            raise EffdepthError(
                f"{label} has no pooled vectors beside its result.json (a folder pooled/, kept by measure --out; "
                "older files and results kept in memory have none): measure it again with --out DIR"
            )
        self.store = PooledStore.open(result.pooled)
        self._draws: dict = {}

    @property
    def model(self) -> dict:
        return self.result.provenance.get("model") or {}

    def record(self) -> dict:
        """What a comparison records of this member."""
        return {
            "label": self.label,
            "path": None if self.path is None else str(self.path),
            "model": self.model.get("id"),
            "revision": self.model.get("revision"),
            "num_layers": self.result.config.get("num_layers", self.result.default.num_states),
            "passages": self.store.meta["passages"],
        }

    def draws(self, analysis: AnalysisOptions, views: tuple, device: str) -> dict:
        """D_eff of ``views`` under the estimate and every resample of ``analysis`` (kept: a baseline is
        drawn once for all its pairs)."""
        key = (analysis, views)
        if key not in self._draws:
            arrays = self.store.arrays()
            offsets = {v: self.store.offsets(v) for v in arrays} if self.store.reduction == "tokens" else None
            self._draws[key] = deff_draws(
                arrays, analysis.analysis_plan(device), lengths=self.store.lengths, offsets=offsets, views=views
            )
        return self._draws[key]


def compare(
    a, b, *more, pairs: str = "baseline", progress: bool = True, device: str | None = None, **analysis
) -> Comparison:
    """Compare results (``Result`` objects with their pooled vectors, or their folders): every one against
    the first, or every pair with ``pairs="all"``. ``analysis``: ``views``, ``similarity``, ``bootstrap``,
    ``bootstrap_units``, ``max_memory`` (default: the first result's; ``bootstrap`` 1000 when it had none).
    """
    members = [as_member(x, i) for i, x in enumerate((a, b, *more))]
    return compare_results(members, pairs=pairs, progress=progress, device=device, **analysis)


def as_member(x, index: int = 0) -> Member:
    """A :class:`Member` from a result or the path of one; labelled by its folder, else A, B, C..."""
    if isinstance(x, Member):
        return x
    if isinstance(x, Result):
        return Member(x, _letter(index))
    path = Path(x)
    result = load(path, expect=Result)
    folder = path if path.is_dir() else path.parent
    return Member(result, folder.name or _letter(index), folder)


def _letter(index: int) -> str:
    return chr(ord("A") + index) if index < 26 else f"R{index + 1}"


def pair_indices(count: int, pairs: str) -> list:
    """``(a, b)`` index pairs: each result against the first, or every pair.

    >>> pair_indices(3, "baseline"), pair_indices(3, "all")
    ([(0, 1), (0, 2)], [(0, 1), (0, 2), (1, 2)])
    """
    if pairs not in PAIRS:
        raise EffdepthError(f"pairs must be one of {', '.join(PAIRS)}, got {pairs!r}")
    if count < 2:
        raise EffdepthError("a comparison needs at least two results; give two or more")
    return [(0, b) for b in range(1, count)] if pairs == "baseline" else list(combinations(range(count), 2))


def compare_results(
    members: list,
    *,
    pairs: str = "baseline",
    consecutive: bool = False,
    cross: bool = True,
    progress: bool = True,
    device=None,
    **analysis,
) -> Comparison:
    """The :class:`Comparison` of ``members`` (:class:`Member`): each pair checked to hold the same passages,
    then its paired differences and (``cross``) its cross-model CKA. ``consecutive``: each member against the
    one before (checkpoints in training order)."""
    from tqdm.auto import tqdm

    from effdepth.measurement.run import analysis_device

    started = time.perf_counter()
    device = device or analysis_device()
    indices = [(i - 1, i) for i in range(1, len(members))] if consecutive else pair_indices(len(members), pairs)
    labels = [m.label for m in members]
    if len(set(labels)) < len(labels):  # two folders of one name: tell them apart by their place in the list
        for i, m in enumerate(members):
            m.label = f"{_letter(i)}: {m.label}"
    for i, j in indices:
        check_pairing(members[i].result, members[j].result, members[i].label, members[j].label)
    base = shared_analysis(members[indices[0][0]], members[indices[0][1]], **analysis)
    out = []
    with tqdm(total=len(indices), desc="comparing pairs", unit="pair", disable=not progress, leave=False) as bar:
        for i, j in indices:
            plan = shared_analysis(members[i], members[j], **analysis)
            out.append(compare_pair(members[i], members[j], plan, (i, j), device, cross=cross))
            bar.update()
    config = {
        "pairs": "consecutive" if consecutive else pairs,
        "bootstrap": base.bootstrap,
        "bootstrap_units": base.bootstrap_units,
        "seed": base.seed,
        "level": 0.95,
        "views": list(base.views),
        "similarities": list(base.similarity),
        "include_embedding": base.include_embedding,
        "max_memory": base.max_memory,
        "how": "one paired bootstrap: the same resamples of the passages' units for both results of a pair "
        "(units and seed as measure uses them); the interval of a difference is the percentile interval of "
        "the resampled differences",
    }
    return Comparison([m.record() for m in members], out, config, provenance_record(started=started))


def shared_analysis(a: Member, b: Member, **changes) -> AnalysisOptions:
    """The analysis both results of a pair are drawn under: the views and similarities they share (or those
    asked for), A's bootstrap (1000 when it had none), units and seed; one-line errors when they cannot pair."""
    from effdepth.measurement.run import saved_analysis

    ca, cb = a.result.config, b.result.config
    for key, flag in (("seed", "--seed"), ("include_embedding", "--include-embedding"), ("pooling", "--pooling")):
        if ca.get(key) != cb.get(key):
            raise EffdepthError(
                f"{a.label} and {b.label} were measured with {flag} {ca.get(key)} and {cb.get(key)}: a paired "
                f"comparison resamples both alike; measure {b.label} again with {flag} {ca.get(key)}"
            )
    views = [v for v in a.result.config.get("views") or list(a.result.views) if v in _views(b.result)]
    sims = [s for s in a.result.similarities if s in b.result.similarities]
    asked_views, asked_sims = changes.pop("views", None), changes.pop("similarity", None)
    views = _asked("view", asked_views, views, a, b)
    sims = _asked("similarity", asked_sims, sims, a, b)
    if not changes.get("bootstrap") and changes.get("bootstrap") != 0:
        changes["bootstrap"] = ca.get("bootstrap") or AnalysisOptions().bootstrap
    analysis = saved_analysis(ca, **changes)
    return replace(analysis, views=tuple(views), similarity=tuple(sims))


def _views(result: Result) -> list:
    return [v for views in result.similarities.values() for v in views]


def _asked(what: str, asked, shared: list, a: Member, b: Member) -> list:
    if asked is None:
        if not shared:
            raise EffdepthError(f"{a.label} and {b.label} share no {what}; measure them with the same --{what}s")
        return shared
    asked = [asked] if isinstance(asked, str) else list(asked)
    missing = [x for x in asked if x not in shared]
    if missing:
        raise EffdepthError(
            f"{what} {', '.join(missing)} is not held by both {a.label} and {b.label} (they share "
            f"{', '.join(shared) or 'none'}); compare those, or run effdepth analyse on each to add it"
        )
    return asked


def compare_pair(
    a: Member, b: Member, analysis: AnalysisOptions, indices: tuple, device: str, *, cross: bool = True
) -> PairComparison:
    """B against A under one analysis: paired differences from the same resamples, and (``cross``) the
    cross-model CKA."""
    passages = a.store.meta["passages"]
    if passages < MIN_PASSAGES:
        raise EffdepthError(
            f"{a.label} and {b.label} share {passages} passage(s): a paired comparison needs at least "
            f"{MIN_PASSAGES}; measure both on more passages (--num-seqs)"
        )
    views = tuple(analysis.views)
    draws_a, draws_b = a.draws(analysis, views, device), b.draws(analysis, views, device)
    paired = paired_differences(draws_a, draws_b)
    pair = PairComparison(*indices, paired["differences"], paired["sample_size"])
    if cross:
        pair.cross, note = cross_model_cka(a, b, analysis, device)
        pair.notes += [note] if note else []
    return pair


def cross_model_cka(a: Member, b: Member, analysis: AnalysisOptions, device: str) -> tuple:
    """``({similarity: (L_A+1, L_B+1) matrix}, note)`` of the default view's states (every state, S_0 too),
    for the CKA estimators the pair is compared under; a note says why there is none."""
    kernels = [s for s in analysis.similarity if s in ("cka", "cka-debiased")]
    if not kernels:
        return {}, "no cross-model CKA: neither CKA estimator is compared"
    if a.store.reduction == "tokens":
        if not np.array_equal(a.store.offsets("default"), b.store.offsets("default")):
            return {}, "no cross-model CKA: the two results sampled different tokens of their passages"
    out = cross_cka(
        PooledStates(a.store.arrays()["default"], device),
        PooledStates(b.store.arrays()["default"], device),
        budget_bytes=analysis.max_memory,
    )
    return {s: out[s].tolist() for s in kernels} | {"memory": out.get("memory", {})}, ""


# --------------------------------------------------------------------------- what the command line names


def members_from_specs(specs, out: Path, *, model_options: dict | None = None, progress: bool = True) -> tuple:
    """``(members, consecutive)`` from what ``effdepth compare`` was given: saved results, one trajectory
    folder (its checkpoints in training order, each against the one before), or models, measured on the
    first result's passages with its options into ``out/<model>`` (a model's result is kept only once it
    pairs with the first)."""
    specs = [str(s) for s in specs]
    trajectories = [s for s in specs if (Path(s) / "trajectory.json").is_file()]
    if trajectories:
        if len(specs) > 1:
            raise EffdepthError(
                f"{trajectories[0]} is a trajectory: compare takes it alone and compares each checkpoint with "
                "the one before; give it without other results"
            )
        return trajectory_members(Path(specs[0])), True
    members: list = []
    for index, spec in enumerate(specs):
        if _is_saved(Path(spec)):
            members.append(as_member(spec, index))
        elif not members:
            raise EffdepthError(
                f"{spec} is not a saved result, and the first argument must be one: the models after it are "
                "measured on its passages; measure it first (effdepth measure MODEL --out DIR) and give DIR"
            )
        else:
            members.append(measure_like(spec, members[0], out, model_options or {}, progress=progress))
    return members, False


def _is_saved(path: Path) -> bool:
    return (path.is_dir() and (path / "result.json").is_file()) or (path.is_file() and path.suffix == ".json")


def trajectory_members(folder: Path) -> list:
    """The measured checkpoints of a trajectory folder, in training order (duplicates and failures left out)."""
    saved = load(folder)
    members, seen = [], set()
    for row in saved.rows:
        key = row.get("key")
        if row.get("status") != "ok" or not key or key in seen:
            continue
        seen.add(key)
        members.append(as_member(folder / key, len(members)))
        members[-1].label = str(row.get("revision"))
    if len(members) < 2:
        raise EffdepthError(
            f"{folder} holds {len(members)} measured checkpoint(s): a comparison needs two; measure more "
            "checkpoints (effdepth trajectory ... --revisions)"
        )
    return members


def measure_like(model, first: Member, out: Path, model_options: dict, *, progress: bool = True) -> Member:
    """``model`` measured on ``first``'s passages with its options, into ``out/<model>``.

    The model's own tokenizer cuts the corpus again (``model_options``: dtype, device...): on ``paragraphs``,
    cut on the text, any tokenizer gets the same passages; on a split cut on tokens only the same tokenizer
    does. The passages are checked to pair with ``first``'s before the weights load, and refused in one line,
    leaving nothing, when they do not.
    """
    import shutil

    from effdepth.measurement import run_measurement
    from effdepth.options import Options, RunOptions
    from effdepth.options.groups import default_out

    options = Options.build(model=model, **measure_options_of(first), **model_options)
    folder = out / default_out(model).name
    staging = out / f".measuring-{folder.name}"

    def pairs_with_first(passages) -> None:
        check_pairing(first.result, PassagesToMeasure(passages, model), first.label, folder.name)

    shutil.rmtree(staging, ignore_errors=True)
    try:
        run = RunOptions(progress=progress, checkpoint=staging / "checkpoint")
        run_measurement(options, run, check_passages=pairs_with_first).save(staging)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(staging / "checkpoint", ignore_errors=True)
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    return Member(load(folder, expect=Result), folder.name, folder)


def measure_options_of(result_member: Member) -> dict:
    """The options that measure a model on the passages of a saved result, as it was measured."""
    c = result_member.result.config
    if c.get("corpus") is None:
        raise EffdepthError(
            f"{result_member.label}'s corpus was given in Python (texts or token ids; or it was measured by an "
            "effdepth that did not record its corpus), so effdepth cannot measure another model on it from here; "
            "measure the model in Python on the same corpus (effdepth.measure(model, corpus, ...)), then compare "
            "the two results"
        )
    from dataclasses import fields

    from effdepth.measurement.run import saved_analysis

    analysis = saved_analysis(c)
    values = {
        "corpus": c["corpus"],
        "seq_len": c.get("seq_len"),
        "num_seqs": c.get("num_seqs"),
        "bos": c.get("bos"),
        "passage_split": c.get("passage_split"),
        **{f.name: getattr(analysis, f.name) for f in fields(analysis)},
    }
    return {k: v for k, v in values.items() if v is not None}
