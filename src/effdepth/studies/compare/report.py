"""What a report and the terminal say of a comparison: the verdict of each pair in words, the table of
its paired differences, and its figure (the cross-model CKA heatmap beside a forest plot of the
differences).
"""

from __future__ import annotations

import math

from effdepth.report.content.model import Cell, Section, Table
from effdepth.report.numbers import fmt, fmt_interval
from effdepth.results.loading import StudyKind, register
from effdepth.studies.compare.result import QUANTITIES, SCHEMA, Comparison, PairComparison

#: How many pairs a comparison figure draws (one row each); the tables hold them all.
FIGURE_PAIRS = 4


def primary(comparison: Comparison) -> str:
    """The similarity a verdict is given under: the first compared."""
    return (comparison.config.get("similarities") or ["cka"])[0]


def verdict(comparison: Comparison, pair: PairComparison, view: str = "default", similarity: str | None = None) -> str:
    """B against A in words, on D_eff/F_L: "B is lower by 0.08 F_L [0.05, 0.11]", or that no difference is
    resolved at this N, with the passages that would resolve one of this size.

    >>> d = {"estimate": -0.08, "interval": [-0.11, -0.05], "a": 0.9, "b": 0.82, "resolved": True}
    >>> c = Comparison([{"label": "base"}, {"label": "tuned"}], [], {"similarities": ["cka"]})
    >>> verdict(c, PairComparison(0, 1, {"cka": {"default": {"ratio": d}}}))
    'tuned is lower than base by 0.080 F_L [0.050, 0.110] (D_eff/F_L 0.820 against 0.900; cka, default view)'
    """
    similarity = similarity or primary(comparison)
    similarity = similarity if similarity in pair.differences else next(iter(pair.differences))
    d = pair.difference("ratio", view, similarity)
    a, b = comparison.label(pair.a), comparison.label(pair.b)
    where = f"(D_eff/F_L {fmt(d['b'])} against {fmt(d['a'])}; {similarity}, {view} view)"
    interval = d.get("interval")
    if interval is None:
        return f"{b} - {a}: {fmt(d['estimate'], signed=True)} F_L, no interval (compared without resamples) {where}"
    if not d.get("resolved"):
        more = passages_to_resolve(d, comparison.members[pair.a].get("passages"))
        hint = f"; about {more:,} passages would resolve a difference of this size" if more else ""
        return (
            f"no difference resolved at this N between {b} and {a}: {fmt(d['estimate'], signed=True)} F_L "
            f"{fmt_interval(interval)}{hint} {where}"
        )
    direction = "lower" if d["estimate"] < 0 else "higher"
    size = fmt_interval(sorted(abs(x) for x in interval))
    return f"{b} is {direction} than {a} by {fmt(abs(d['estimate']))} F_L {size} {where}"


def passages_to_resolve(d: dict, passages) -> int | None:
    """The passages at which an interval of this width, narrowing as 1/sqrt(N), would exclude 0 around this
    estimate (None for an estimate of 0).

    >>> passages_to_resolve({"estimate": 0.01, "interval": [-0.01, 0.03]}, 100)
    400
    """
    half = (d["interval"][1] - d["interval"][0]) / 2
    if not passages or not d["estimate"] or not math.isfinite(half):
        return None
    return int(math.ceil(passages * (half / abs(d["estimate"])) ** 2))


def pair_content(comparison: Comparison, pair: PairComparison) -> Table:
    """Every similarity and view of a pair: A, B, B - A and its paired interval, for each quantity."""
    header = ["similarity", "view"]
    for _, label, _ in QUANTITIES:
        header += [f"{label} A", f"{label} B", "B - A", "interval"]
    header.append("resolved")
    rows = []
    for similarity, views in pair.differences.items():
        for view, quantities in views.items():
            row = [Cell(similarity), Cell(view)]
            for key, _, _ in QUANTITIES:
                d = quantities[key]
                row += [
                    Cell(fmt(d["a"])),
                    Cell(fmt(d["b"])),
                    Cell(fmt(d["estimate"], signed=True)),
                    Cell(fmt_interval(d.get("interval"))),
                ]
            resolved = quantities["ratio"].get("resolved")
            row.append(Cell("n/a" if quantities["ratio"].get("interval") is None else "yes" if resolved else "no"))
            rows.append(row)
    return Table(header, rows, [False, False] + [True] * (len(header) - 2))


def curve_content(pair: PairComparison, similarity: str) -> Table | None:
    """The sample-size curve of the difference of D_eff: whether more passages would resolve it."""
    curve = (pair.sample_size or {}).get(similarity)
    if not curve:
        return None
    rows = [
        [Cell(p["fraction"]), Cell(fmt(p["passages"], 0)), Cell(fmt(p["deff"], signed=True)), Cell(fmt(p.get("sd")))]
        for p in curve["points"]
    ]
    return Table(["subset", "passages", "B - A (D_eff)", "sd over draws"], rows, [False, True, True, True])


def cross_content(comparison: Comparison, pair: PairComparison) -> Table | None:
    """The diagonal of the cross-model CKA (layers of equal depth: where a fine-tune changed its layers)."""
    sims = [s for s in pair.cross if s != "memory"]
    if not sims:
        return None
    matrices = {s: pair.cross[s] for s in sims}
    first = matrices[sims[0]]
    if len(first) != len(first[0]):
        return None
    rows = [[Cell(f"S_{i}")] + [Cell(fmt(matrices[s][i][i])) for s in sims] for i in range(len(first))]
    return Table(["state"] + [f"{s} (A_l, B_l)" for s in sims], rows, [False] + [True] * len(sims))


def comparison_sections(comparison: Comparison) -> list:
    """The verdict of every pair, then per pair: its table of differences, the curve and the cross-model diagonal."""
    sim = primary(comparison)
    verdicts = [
        [
            Cell(f"{comparison.label(p.b)} against {comparison.label(p.a)}"),
            Cell(verdict(comparison, p, _view(p, sim), sim)),
        ]
        for p in comparison.pairs
    ]
    sections = [Section("verdicts", Table(["pair", "verdict (paired bootstrap)"], verdicts, [False, False]))]
    for pair in comparison.pairs:
        title = f"{comparison.label(pair.b)} against {comparison.label(pair.a)}"
        table = pair_content(comparison, pair)
        table.note = " ".join(pair.notes)
        sections.append(Section(title, table))
        curve = curve_content(pair, sim)
        if curve is not None:
            sections.append(Section(f"{title}: the difference on fewer passages ({sim})", curve))
        cross = cross_content(comparison, pair)
        if cross is not None:
            sections.append(Section(f"{title}: CKA of each state with the same state of the other", cross))
    return sections


def _view(pair: PairComparison, similarity: str) -> str:
    """The view a verdict is given on: default when compared, else the first."""
    views = pair.differences.get(similarity) or next(iter(pair.differences.values()))
    return "default" if "default" in views else next(iter(views))


def comparison_headline(comparison: Comparison) -> str:
    """One line: what was compared, on how many passages, under which bootstrap.

    >>> comparison_headline(Comparison([{"label": "a", "passages": 64}, {"label": "b"}], [], {"bootstrap": 200, "pairs": "baseline"}))
    'paired comparison of b against a on the same 64 passages (200 paired resamples)'
    """
    c = comparison.config
    labels = [m["label"] for m in comparison.members]
    if c.get("pairs") == "consecutive":
        what = f"each of {', '.join(labels)} against the one before"
    elif c.get("pairs") == "all":
        what = f"every pair of {', '.join(labels)}"
    else:
        what = f"{', '.join(labels[1:])} against {labels[0]}"
    resamples = f"{c['bootstrap']} paired resamples" if c.get("bootstrap") else "no resamples"
    return f"paired comparison of {what} on the same {comparison.members[0].get('passages')} passages ({resamples})"


def comparison_figure(comparison: Comparison):
    """Per pair (the first :data:`FIGURE_PAIRS`): the cross-model CKA heatmap and the differences of D_eff/F_L
    (every view and similarity) with their paired intervals."""
    from effdepth.report.figures import layer_heatmap
    from effdepth.report.figures_ratios import dot_rows
    from effdepth.report.style import new_figure, style

    pairs = comparison.pairs[:FIGURE_PAIRS]
    sim = primary(comparison)
    with style():
        fig = new_figure(10.0, 0.6 + 3.8 * len(pairs))
        grid = fig.add_gridspec(len(pairs), 2, width_ratios=(1.0, 1.2))
        for row, pair in enumerate(pairs):
            a, b = comparison.label(pair.a), comparison.label(pair.b)
            matrix = pair.cross.get(sim)
            ax = fig.add_subplot(grid[row, 0])
            if matrix is not None:
                image = layer_heatmap(ax, matrix, 0, 0, xlabel=f"state of {b}", ylabel=f"state of {a}")
                fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03).set_label(f"cross-model {sim}")
                ax.set_title(f"{sim}: {a} (rows) against {b} (columns)", fontsize=9)
            else:
                ax.set_axis_off()
                ax.text(0.5, 0.5, "\n".join(pair.notes) or "no cross-model CKA", ha="center", va="center", wrap=True)
            labels, values, intervals = [], [], []
            for s, views in pair.differences.items():
                for view, quantities in views.items():
                    labels.append(f"{view} ({s})")
                    values.append(quantities["ratio"]["estimate"])
                    intervals.append(quantities["ratio"].get("interval"))
            dots = fig.add_subplot(grid[row, 1])
            dot_rows(dots, labels, values, intervals, reference=0.0, filled=_excludes_zero)
            dots.set_xlabel(f"D_eff/F_L of {b} minus {a}")
            dots.set_title(f"{b} - {a}, paired 95% intervals (filled: resolved)", fontsize=9)
    return fig


def _excludes_zero(interval) -> bool:
    return interval is not None and (interval[0] > 0 or interval[1] < 0)


def subject(comparison: Comparison) -> str:
    return ", ".join(m["label"] for m in comparison.members)


KIND = register(
    StudyKind(
        6,
        "comparison",
        SCHEMA,
        Comparison,
        lambda data, path: Comparison.from_dict(data),
        "paired comparison",
        "Left: the linear CKA of every state of A (rows) with every state of B (columns) over the same passages. "
        "Right: B minus A of D_eff/F_L for each view and similarity, with the 95% interval of one paired bootstrap "
        "(the same resampled passages for both); filled where the interval excludes 0.",
        subject,
        comparison_sections,
        comparison_figure,
        comparison_headline,
    )
)
