"""``effdepth recompose``: the offline carry sweep and decorrelation of a saved result (docs/method.md#recomposition).

No model runs: mean pooling is linear in the token states, so rebuilding a saved result's pooled
vectors from their increments is exactly pooling the rebuilt token stream
(:mod:`effdepth.numerics.recompose`). Each rebuilt stack is analysed as the result was, so ``lam = 1``
gives the measured D_eff back.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tqdm.auto import tqdm

from effdepth.errors import EffdepthError
from effdepth.numerics.recompose import carried, decorrelated_increments, increments
from effdepth.numerics.views import PassageView, parse_view
from effdepth.options import option
from effdepth.report.content.model import Cell, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.results.result import Result
from effdepth.studies.intervene import DEFAULT_CARRY
from effdepth.studies.intervene.hooks import format_carry, parse_carry
from effdepth.studies.intervene.options import carries_option


@dataclass(frozen=True)
class RecomposeOptions:
    """``effdepth recompose``: the saved result, the carries and the view; the bootstrap is off by default."""

    result: str = option(
        None, "result.json (or its folder) of a passage-mode measurement, its pooled/ beside it", flags=()
    )
    carry: str = carries_option()
    view: str | None = option(None, "which view of the result (default: its first)")
    bootstrap: int = option(
        0, "bootstrap resamples per recomposed stream, for intervals (default {default}: none)", kind="int"
    )


__all__ = ["DEFAULT_CARRY", "SCHEMA", "recompose_report", "recompose_rows", "recomposable_view"]

SCHEMA = "effdepth.recompose/2"
#: Why the decorrelated recomposition at lam = 1 is compared with R_matched, not equated with it.
DECORRELATED_NOTE = (
    "not an identity under CKA: the increments are orthogonal as N x d matrices (Frobenius), but CKA "
    "compares covariances, which such increments may still share, where R_matched assumes updates that "
    "share none (matched_cal, when measured, is that process at this sample size)"
)


def recomposable_view(name: str) -> PassageView:
    """The view ``name`` when its numbers follow from recomposed pooled vectors exactly (a linear selection
    of tokens, at most the ``length`` control after pooling); otherwise a one-line error.

    >>> recomposable_view("drop-bos+length").variant
    'drop-bos'
    >>> recomposable_view("top1pc")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: view top1pc cannot be recomposed: it removes the top principal directions fitted to each layer's own pooled matrix, which is not linear in the states, so the recomposed stream's view is not the recomposition of the measured one; use --view with default, drop-bos, drop-pos0 or length (and their compositions)
    """
    spec = parse_view(name)
    if spec.weighs_by_norm:
        why = "it pools each token state divided by its own norm, which is not linear in the states"
    elif spec.top_pcs:
        why = (
            "it removes the top principal directions fitted to each layer's own pooled matrix, which is not "
            "linear in the states"
        )
    else:
        return spec
    raise EffdepthError(
        f"view {spec.name} cannot be recomposed: {why}, so the recomposed stream's view is not the "
        "recomposition of the measured one; use --view with default, drop-bos, drop-pos0 or length (and "
        "their compositions)"
    )


def recompose_rows(
    pooled,
    carries,
    *,
    view: str = "default",
    lengths=None,
    similarity=None,
    include_embedding: bool = False,
    bootstrap: int = 0,
    seed: int = 0,
    bootstrap_units: int | None = None,
    progress: bool = False,
) -> tuple:
    """``(rows, decorrelated)`` for pooled vectors ``(L+1, N, d)`` of one variant: per carry a row with
    ``lam``, ``deff``, ``reference`` (F_N), ``ratio``, ``deff_decorrelated`` and ``similarities`` (``ci``
    with a bootstrap), and the decorrelated stream at lam = 1 (``deff``, ``reference_matched``,
    ``similarities``). ``view``'s ``length`` stage (with ``lengths``) is applied to each recomposed stack.

    >>> walk = np.cumsum(np.random.default_rng(0).normal(size=(4, 32, 8)), axis=0)
    >>> rows, decorrelated = recompose_rows(walk, (1.0, 0.0))
    >>> import effdepth
    >>> abs(rows[0]["deff"] - effdepth.from_pooled(walk, bootstrap=0).default.deff) < 1e-9
    True
    """
    from effdepth.measurement.notebook import from_pooled

    spec = recomposable_view(view)
    analysed_view = "length" if spec.has("length") else "default"
    options = {
        "views": (analysed_view,),
        "lengths": lengths if spec.has("length") else None,
        "similarity": similarity,
        "include_embedding": include_embedding,
        "bootstrap": bootstrap,
        "seed": seed,
        "bootstrap_units": bootstrap_units,
    }
    x = increments(pooled)
    z = decorrelated_increments(x)
    lams = parse_carry(carries)
    todo = [(lam, False) for lam in lams] + [(lam, True) for lam in dict.fromkeys((*lams, 1.0))]
    analysed = {}
    for lam, decorrelate in tqdm(todo, desc="recomposing", unit="stream", disable=not progress, leave=False):
        result = from_pooled(carried(z if decorrelate else x, lam), **options)
        analysed[lam, decorrelate] = result
    rows = []
    for lam in lams:
        plain, decor = analysed[lam, False], analysed[lam, True]
        v = plain.default
        row = {
            "lam": lam,
            "deff": v.deff,
            "reference": v.reference,
            "ratio": v.ratio,
            "deff_decorrelated": decor.default.deff,
            "similarities": _by_similarity(plain, decor),
        }
        if v.ci and "deff" in v.ci:
            row["ci"] = {"deff": v.ci["deff"], "deff_decorrelated": (decor.default.ci or {}).get("deff")}
        rows.append(row)
    at_one = analysed[1.0, True]
    decorrelated = {
        "lam": 1.0,
        "deff": at_one.default.deff,
        "reference_matched": at_one.default.references.get("matched"),
        "similarities": {
            sim: {
                "deff": views[analysed_view].deff,
                "reference_matched": views[analysed_view].references.get("matched"),
            }
            for sim, views in at_one.similarities.items()
        },
    }
    return rows, decorrelated


def _by_similarity(plain: Result, decor: Result) -> dict:
    out = {}
    for sim, views in plain.similarities.items():
        v, d = next(iter(views.values())), next(iter(decor.similarities[sim].values()))
        out[sim] = {"deff": v.deff, "ratio": v.ratio, "deff_decorrelated": d.deff}
    return out


def recompose_report(
    result: Result, carries=DEFAULT_CARRY, view: str | None = None, *, bootstrap: int = 0, progress: bool = False
) -> tuple:
    """Offline carry sweep and decorrelation of a saved passage-mode result: ``(data, table text)``.

    ``data`` (schema :data:`SCHEMA`) is JSON-ready; the analysis is the result's but for ``bootstrap``
    (0: no intervals, the quick default).

    >>> import effdepth, tempfile
    >>> from effdepth.models.tiny import tiny_model
    >>> import torch
    >>> folder = tempfile.mkdtemp()
    >>> _ = effdepth.measure(tiny_model("llama"), torch.randint(0, 256, (8, 12)), bootstrap=0, progress=False).save(folder)
    >>> data, text = recompose_report(effdepth.load(folder), (1, 0.5))
    >>> [row["lam"] for row in data["rows"]], abs(data["measured"]["difference"]) < 1e-9
    ([1.0, 0.5], True)
    """
    from effdepth.report.plain import table_text
    from effdepth.results.store import PooledStore

    carries = parse_carry(carries)
    v, spec = _measured_view(result, view)
    store = PooledStore.open(result.pooled)
    if store.reduction == "tokens":
        raise EffdepthError(_TOKEN_SAMPLES)
    arrays = store.arrays()
    if spec.variant not in arrays:
        raise EffdepthError(
            f"view {spec.name} pools tokens as {spec.variant}, but this result stored only "
            f"{', '.join(arrays)}; measure again with --views {spec.name} to store it"
        )
    c = result.config
    rows, decorrelated = recompose_rows(
        np.asarray(arrays[spec.variant], dtype=np.float64),
        carries,
        view=spec.name,
        lengths=store.lengths,
        similarity=c.get("similarities") or c.get("similarity"),
        include_embedding=bool(c.get("include_embedding", False)),
        bootstrap=bootstrap,
        seed=int(c.get("seed", 0)),
        bootstrap_units=c.get("bootstrap_units"),
        progress=progress,
    )
    at_one = next((r["deff"] for r in rows if r["lam"] == 1.0), None)
    matched = v.references.get("matched")
    decorrelated.update(
        {
            "measured_reference_matched": matched,
            "measured_reference_matched_cal": v.references.get("matched_cal"),
            "difference": None if matched is None else decorrelated["deff"] - matched,
            "note": DECORRELATED_NOTE,
        }
    )
    data = {
        "schema": SCHEMA,
        "view": v.name,
        "variant": spec.variant,
        "similarity": result.primary_similarity,
        "similarities": list(result.similarities),
        "include_embedding": bool(c.get("include_embedding", False)),
        "num_states": v.num_states,
        "passages": int(arrays[spec.variant].shape[1]),
        "bootstrap": int(bootstrap),
        "measured": {
            "deff": v.deff,
            "reference_matched": matched,
            "recomposed_at_1": at_one,
            "difference": None if at_one is None else at_one - v.deff,
        },
        "decorrelated": decorrelated,
        "rows": rows,
        "model": result.provenance.get("model", {}),
    }
    return data, _note(data) + "\n\n" + table_text(recompose_table(rows))


_TOKEN_SAMPLES = (
    "this result takes each passage's tokens as samples (--pooling none), not one mean pooled vector per "
    "passage, and effdepth recompose rebuilds pooled vectors; measure again in passage mode (the default, "
    "--pooling mean) with --out DIR"
)


def _measured_view(result: Result, view: str | None) -> tuple:
    """The view's measured numbers and its spec, or a one-line error: a token-mode result, a view the
    result lacks or that does not recompose, no pooled vectors."""
    if not result.passages:
        raise EffdepthError(
            "this is a token-mode result (--pooling none, written by an older effdepth): it has no pooled "
            "vectors to rebuild, only statistics summed over tokens; measure again in passage mode (the "
            "default) with --out DIR, then recompose that result"
        )
    if "reduction" in result.config:
        raise EffdepthError(_TOKEN_SAMPLES)
    name = view or result.default.name
    if name not in result.views:
        raise EffdepthError(f"no view {name!r} in this result; it has: {', '.join(result.views)}")
    spec = recomposable_view(name)
    if result.pooled is None:
        raise EffdepthError(
            "this result has no pooled vectors beside its result.json (a folder pooled/, which effdepth "
            "measure --out DIR writes), and recompose rebuilds them; measure again in passage mode with --out "
            "DIR and keep the pooled/ folder beside result.json"
        )
    return result.views[name], spec


def _note(data: dict) -> str:
    m, d = data["measured"], data["decorrelated"]
    head = (
        f"offline recomposition of view {data['view']} ({data['similarity']}, N = {data['num_states']} states, "
        f"{data['passages']} passages): measured D_eff {fmt(m['deff'])}"
    )
    if m["recomposed_at_1"] is not None:
        head += f", recomposed at lam 1 {fmt(m['recomposed_at_1'])} (difference {m['difference']:.1e})"
    if d["measured_reference_matched"] is None:
        tail = f"decorrelated at lam 1 {fmt(d['deff'])}; {data['similarity']} has no R_matched to compare it with"
    else:
        cal = d.get("measured_reference_matched_cal")
        tail = (
            f"decorrelated at lam 1 {fmt(d['deff'])} beside R_matched {fmt(d['measured_reference_matched'])} "
            f"(difference {fmt(d['difference'], signed=True)}"
            + ("" if cal is None else f"; matched_cal {fmt(cal)}")
            + f"): {DECORRELATED_NOTE}"
        )
    return head + ".\n" + tail + "."


def recompose_table(rows: list[dict]) -> Table:
    """The offline recomposition of a view (:func:`recompose_rows`' rows): D_eff
    recomposed and decorrelated (with their intervals when bootstrapped), F_L and the ratio per carry.

    >>> recompose_table([{"lam": 1.0, "deff": 1.2, "deff_decorrelated": 1.3, "reference": 1.5, "ratio": 0.8}]).rows[0][0].text
    '1'
    """
    header = ["lam", "D_eff recomposed", "D_eff decorrelated", "F_L", "ratio"]
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
