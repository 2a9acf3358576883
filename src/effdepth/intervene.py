"""The residual-carry intervention in a model (METHOD 7): D_eff and loss against the carry lam.

For each carry value lam the chosen blocks output ``lam * s_{l-1} + (s_l - s_{l-1})``
(see :class:`~effdepth.capture.intervention.ResidualCarry`); the model and the
corpus are loaded once and every lam is measured on the same tokens, with the
next-token loss. lam = 1 is the unmodified model.

Saved as ``DIR/intervention.json`` (every per-lam result inside),
``DIR/carry-<lam>/result.json`` and the figure ``DIR/intervention.{png,pdf}``.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from .capture.intervention import ResidualCarry, check_layer_spec, format_carry, parse_carry, parse_layers
from .errors import EffdepthError
from .files import read_json
from .measure import measure_prepared, prepare, validate_options
from .numerics.views import parse_views
from .provenance import code_version, library_versions, machine, now
from .result import Result, write_json_atomic

SCHEMA = "effdepth.intervention/1"
DEFAULT_CARRY = (1.0, 0.9, 0.75, 0.5)

TABLE_COLUMNS = ("lam", "D_eff", "CI", "F_L", "ratio", "R_init", "R_size", "R_matched", "loss", "perplexity")


@dataclass
class InterventionResult:
    """One full :class:`~effdepth.Result` per carry value, and the table across them.

    ``results`` maps each lam (float, in the order given) to its result;
    ``layers`` are the 1-based blocks the carry was applied to.
    """

    carries: tuple
    layers: tuple
    results: dict
    config: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)

    def rows(self, view: str | None = None) -> list:
        """One dict per lam: D_eff, its interval, F_L, ratio, references, loss, perplexity.

        >>> import effdepth, torch
        >>> r = effdepth.from_states(torch.randn(4, 8, 16))
        >>> InterventionResult((1.0,), (1, 2, 3), {1.0: r}).rows()[0]["lam"]
        1.0
        """
        return [intervention_row(lam, self.results[lam], view) for lam in self.carries]

    def table(self, view: str | None = None) -> str:
        """The rows as a plain-text table (the first view unless ``view`` is given)."""
        from .experiment.tables import fmt, fmt_interval, render_table

        body = [
            [format_carry(r["lam"]), fmt(r["deff"]), fmt_interval(r["deff_ci"]), fmt(r["reference"]), fmt(r["ratio"]),
             fmt(r["reference_init"]), fmt(r["reference_size"]), fmt(r["reference_matched"]), fmt(r["loss"], 4),
             fmt(r["perplexity"], 2)]
            for r in self.rows(view)
        ]
        return render_table(list(TABLE_COLUMNS), body)

    def headline(self) -> str:
        """One line: model, layers, corpus size and view."""
        first = self.results[self.carries[0]]
        model = first.provenance.get("model", {}).get("id", "model")
        v = first.default
        which = "all" if self.config.get("all_layers") else ",".join(map(str, self.layers))
        return (
            f"residual-carry intervention on {model} ({first.config.get('num_layers')} layers; carry on blocks {which}), "
            f"{v.sequences} sequences x {first.config.get('seq_len')} tokens, similarity {first.config.get('similarity')}, "
            f"view {v.name}, N = {v.num_states}"
        )

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "carries": list(self.carries),
            "layers": list(self.layers),
            "config": self.config,
            "provenance": self.provenance,
            "table": {name: self.rows(name) for name in self._view_names()},
            "results": [{"lam": lam, "path": f"{carry_folder(lam)}/result.json", "result": self.results[lam].to_dict()}
                        for lam in self.carries],
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InterventionResult":
        if data.get("schema") != SCHEMA:
            raise EffdepthError(f"not an effdepth intervention (schema {data.get('schema')!r}, expected {SCHEMA!r})")
        results = {float(r["lam"]): Result.from_dict(r["result"]) for r in data["results"]}
        return cls(tuple(float(c) for c in data["carries"]), tuple(data["layers"]), results, data.get("config", {}),
                   data.get("provenance", {}))

    def save(self, folder, figure: bool = True) -> Path:
        """Write ``carry-<lam>/result.json`` for each lam, then ``intervention.json`` and the figure.

        Every file is written atomically; the summary comes last, so its
        presence means the whole set is there.
        """
        folder = Path(folder)
        for lam in self.carries:
            self.results[lam].save(folder / carry_folder(lam) / "result.json")
        path = folder / "intervention.json"
        write_json_atomic(path, self.to_dict())
        if figure:
            from .experiment.common import save_figure

            save_figure(intervention_figure(self), folder / "intervention")
        return path

    def _view_names(self) -> list:
        return list(self.results[self.carries[0]].views)


def carry_folder(lam: float) -> str:
    """``carry-<lam>``, e.g. ``carry-0.75``.

    >>> carry_folder(1.0)
    'carry-1'
    """
    return f"carry-{format_carry(lam)}"


def intervention_row(lam: float, result: Result, view: str | None = None) -> dict:
    """The table row of one measured carry value."""
    v = result.default if view is None else result.views[view]
    loss = (result.extras or {}).get("loss") or {}
    return {
        "lam": float(lam),
        "view": v.name,
        "deff": v.deff,
        "deff_ci": (v.ci or {}).get("deff"),
        "reference": v.reference,
        "ratio": v.ratio,
        "ratio_ci": (v.ci or {}).get("ratio"),
        **{f"reference_{k}": v.references[k] for k in ("init", "size", "matched")},
        "loss": loss.get("mean"),
        "perplexity": loss.get("perplexity"),
    }


def intervene(model=None, corpus=None, *, carry=DEFAULT_CARRY, layers="all", views=("default",), **options) -> InterventionResult:
    """Measure D_eff and the next-token loss with the residual carry set to each lam.

    ``carry``: values in [0, 1] (a sequence or ``"1,0.9,0.5"``); ``layers``:
    ``"all"``, ``"A-B"``, ``"1,3,5"`` or a list of 1-based block numbers.
    ``options`` are :func:`effdepth.measure`'s (``seq_len``, ``num_seqs``,
    ``batch_size``, ``bootstrap``, ``similarity``, ``include_embedding``,
    ``dtype``, ``device``, ``progress``...). The model and corpus are loaded
    once; each lam gets a full :class:`~effdepth.Result` (all views).

    >>> import effdepth, torch
    >>> from effdepth.tiny import tiny_model
    >>> ir = effdepth.intervene(tiny_model("llama"), torch.randint(0, 256, (4, 12)), carry=(1, 0.5),
    ...                         bootstrap=0, progress=False)
    >>> [row["lam"] for row in ir.rows()]
    [1.0, 0.5]
    """
    carries = parse_carry(carry)
    check_layer_spec(layers)
    parse_views(views)
    load_options, measure_options = split_options(options)
    # Measurement options fail here, before minutes of loading weights.
    validate_options(**{k: measure_options[k] for k in ("batch_size", "bootstrap", "similarity", "pc_estimate") if k in measure_options})
    started = time.perf_counter()
    prepared = prepare(model, corpus, **load_options)
    blocks = parse_layers(layers, prepared.arch.num_layers)
    progress = options.get("progress", True)
    results = {}
    for lam in tqdm(carries, desc="carry", unit="value", disable=not progress or len(carries) < 2, leave=False):
        results[lam] = measure_with_carry(prepared, lam, blocks, views=views, **measure_options)
    config = {"carries": list(carries), "layers": list(blocks), "all_layers": len(blocks) == prepared.arch.num_layers,
              "layer_spec": layers if isinstance(layers, str) else list(layers), **results[carries[0]].config}
    provenance = {"code": code_version(), "libraries": library_versions(), "machine": machine(), "created": now(),
                  "elapsed_s": round(time.perf_counter() - started, 3)}
    return InterventionResult(carries, blocks, results, config, provenance)


# measure_prepared's own plumbing, not a measurement option.
_NOT_OPTIONS = {"prepared", "with_loss", "checkpoint", "resume", "checkpoint_every_s", "started", "model", "corpus"}


def split_options(options: dict) -> tuple:
    """Split :func:`effdepth.measure` options into ``prepare``'s and ``measure_prepared``'s.

    Read from their signatures, so options added there pass through here too.
    ``seed`` and ``progress`` go to both.

    >>> split_options({"seq_len": 16, "bootstrap": 0, "seed": 1})
    ({'seq_len': 16, 'seed': 1}, {'bootstrap': 0, 'seed': 1})
    """
    load_names = set(inspect.signature(prepare).parameters) - _NOT_OPTIONS
    measure_names = set(inspect.signature(measure_prepared).parameters) - _NOT_OPTIONS
    unknown = set(options) - load_names - measure_names
    if unknown:
        raise TypeError(f"unexpected measurement option(s): {', '.join(sorted(unknown))}")
    return ({k: v for k, v in options.items() if k in load_names}, {k: v for k, v in options.items() if k in measure_names})


def measure_with_carry(prepared, lam: float, layers, **options) -> Result:
    """One :func:`~effdepth.measure.measure_prepared` (with loss) inside a :class:`ResidualCarry`.

    The carry is recorded in ``result.extras["intervention"]``.
    """
    blocks = parse_layers(layers, prepared.arch.num_layers)
    with ResidualCarry(prepared.arch, lam, blocks):
        result = measure_prepared(prepared, with_loss=True, **options)
    result.extras["intervention"] = {"carry": float(lam), "layers": list(blocks),
                                     "all_layers": len(blocks) == prepared.arch.num_layers}
    return result


def recompose_report(result: Result, carries=DEFAULT_CARRY, view: str | None = None) -> tuple:
    """Offline carry sweep and decorrelation of a saved result: ``(data, table text)``.

    ``data`` is JSON-ready (rows of :func:`~effdepth.numerics.recompose.recompose_carry`
    plus the measured D_eff and R_matched for comparison); the table puts
    them side by side. Always the frobenius similarity.

    >>> import effdepth, torch
    >>> data, text = recompose_report(effdepth.from_states(torch.randn(5, 8, 16).cumsum(0)), (1, 0.5))
    >>> [row["lam"] for row in data["rows"]]
    [1.0, 0.5]
    """
    from .experiment.tables import fmt, render_table
    from .numerics.recompose import recompose_carry, recompose_decorrelated

    if view is not None and view not in result.views:
        raise EffdepthError(f"no view {view!r} in this result; it has: {', '.join(result.views)}")
    v = result.default if view is None else result.views[view]
    include = bool(result.config.get("include_embedding", False))
    rows = recompose_carry(v, parse_carry(carries), include_embedding=include)
    decorrelated = recompose_decorrelated(v, include_embedding=include)
    measured_with = result.config.get("similarity", "frobenius")
    data = {
        "schema": "effdepth.recompose/1",
        "view": v.name,
        "include_embedding": include,
        "similarity": "frobenius",
        "measured": {"deff": v.deff, "similarity": measured_with, "reference_matched": v.references.get("matched")},
        "decorrelated": decorrelated,
        "rows": rows,
        "model": result.provenance.get("model", {}),
    }
    header = ["lam", "D_eff recomposed", "D_eff decorrelated", "F_N", "ratio"]
    body = [[format_carry(r["lam"]), fmt(r["deff"]), fmt(r["deff_decorrelated"]), fmt(r["reference"]), fmt(r["ratio"])] for r in rows]
    note = (f"offline recomposition of view {v.name} (frobenius, N = {v.num_states}): measured D_eff {fmt(v.deff)}"
            + ("" if measured_with == "frobenius" else f" ({measured_with} similarity, not comparable)")
            + f", R_matched {fmt(v.references.get('matched'))} = decorrelated at lam 1 ({fmt(decorrelated['deff'])})")
    return data, note + "\n\n" + render_table(header, body)


def load_intervention(path) -> InterventionResult:
    """Load a saved intervention (``intervention.json`` or the folder holding it).

    >>> import effdepth, torch, tempfile
    >>> r = effdepth.from_states(torch.randn(4, 8, 16))
    >>> p = InterventionResult((1.0,), (1, 2, 3), {1.0: r}).save(tempfile.mkdtemp(), figure=False)
    >>> load_intervention(p).carries
    (1.0,)
    """
    return InterventionResult.from_dict(read_json(path, "intervention", "intervention.json"))


def intervention_figure(ir: InterventionResult, view: str | None = None):
    """D_eff (with its interval), F_L and the matched references against lam; loss on a second axis.

    >>> import effdepth, torch
    >>> rs = {lam: effdepth.from_states(torch.randn(4, 8, 16)) for lam in (1.0, 0.5)}
    >>> intervention_figure(InterventionResult((1.0, 0.5), (1, 2, 3), rs)).axes[0].get_xlabel()
    'carry $\\\\lambda$'
    """
    from .experiment.common import OKABE_ITO, new_figure, style

    rows = sorted(ir.rows(view), key=lambda r: r["lam"])
    lam = np.array([r["lam"] for r in rows])
    col = {k: np.array([_nan(r[k]) for r in rows]) for k in rows[0] if k not in ("view", "deff_ci", "ratio_ci")}
    with style():
        fig = new_figure(5.6, 4.0)
        ax = fig.add_subplot()
        ax.plot(lam, col["reference"], color=OKABE_ITO["orange"], linestyle="--", marker="^", markersize=4, label="$F_L$")
        for key, label, colour, ls, marker in (
            ("reference_init", r"$R_\mathrm{init}$", OKABE_ITO["sky_blue"], "-.", "v"),
            ("reference_size", r"$R_\mathrm{size}$", OKABE_ITO["bluish_green"], ":", "D"),
            ("reference_matched", r"$R_\mathrm{matched}$", OKABE_ITO["vermillion"], (0, (6, 2)), "s"),
        ):
            ax.plot(lam, col[key], color=colour, linestyle=ls, marker=marker, markersize=4, label=label)
        err = _errorbars(col["deff"], [r["deff_ci"] for r in rows])
        ax.errorbar(lam, col["deff"], yerr=err, color=OKABE_ITO["blue"], marker="o", markersize=5, linewidth=2, capsize=3,
                    label=r"$D_\mathrm{eff}$" + (" (bootstrap interval)" if err is not None else ""))
        ax.set_xlabel(r"carry $\lambda$")
        ax.set_ylabel("effective depth (states)")
        loss_ax = ax.twinx()
        loss_ax.grid(False)
        loss_ax.plot(lam, col["loss"], color=OKABE_ITO["reddish_purple"], linestyle=(0, (1, 1.5)), marker="x", markersize=5,
                     label="next-token loss (right)")
        loss_ax.set_ylabel("next-token loss (nats)")
        handles = ax.get_legend_handles_labels()
        more = loss_ax.get_legend_handles_labels()
        fig.legend(handles[0] + more[0], handles[1] + more[1], loc="outside lower center", ncol=3, frameon=False)
        ax.set_title(_figure_title(ir), fontsize=9)
    return fig


def _figure_title(ir: InterventionResult) -> str:
    first = ir.results[ir.carries[0]]
    model = str(first.provenance.get("model", {}).get("id", "model"))
    which = "all blocks" if ir.config.get("all_layers", True) else "blocks " + ",".join(map(str, ir.layers))
    return f"Residual carry \u2014 {model}, {which}"


def _errorbars(centre: np.ndarray, intervals: list):
    if not any(intervals):
        return None
    lo = np.array([c - i[0] if i else 0.0 for c, i in zip(centre, intervals)])
    hi = np.array([i[1] - c if i else 0.0 for c, i in zip(centre, intervals)])
    return np.clip(np.vstack([lo, hi]), 0.0, None)


def _nan(x) -> float:
    return float("nan") if x is None else float(x)
