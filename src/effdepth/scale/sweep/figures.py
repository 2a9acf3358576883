"""The figure of a sweep: D_eff, F_L and their ratio per model, grouped by family."""

from __future__ import annotations

import re

from effdepth.report.numbers import format_params
from effdepth.report.rows import lead_rows
from effdepth.report.style import OKABE_ITO, new_figure, style

#: Okabe-Ito colours in the order families get them (yellow left out: too light on white).
#: F_L and the ratio-1 line are black, so no family is.
FAMILY_COLOURS = ("blue", "vermillion", "bluish_green", "reddish_purple", "sky_blue", "orange")
FAMILY_MARKERS = ("o", "s", "D", "^", "v", "P", "X")
#: F_L's mark, beside each model's dot and in the legend.
F_L_MARK = {"marker": "|", "markeredgewidth": 2, "color": OKABE_ITO["black"], "linestyle": "none"}


def suite_figure(rows: list[dict]):
    """D_eff and F_L (left) and D_eff / F_L (right) per model, grouped by family, with intervals: each
    model's first view with a value under its primary similarity (named in the title); failures listed.

    >>> r = {"key": "k", "model": "a/m", "family": "f", "params": 1, "revision": "main", "status": "ok", "D_eff": 1.2,
    ...      "D_eff_lo": 1.1, "D_eff_hi": 1.3, "F_L": 1.9, "ratio": 0.63, "ratio_lo": 0.6, "ratio_hi": 0.7}
    >>> len(suite_figure([r]).axes)
    2
    """
    entries = _figure_entries(rows)
    families = list(dict.fromkeys(e["family"] or "other" for e in entries))
    looks = {
        f: (OKABE_ITO[FAMILY_COLOURS[i % len(FAMILY_COLOURS)]], FAMILY_MARKERS[i % len(FAMILY_MARKERS)])
        for i, f in enumerate(families)
    }
    with style():
        fig = new_figure(7.4, 1.5 + 0.3 * len(entries))
        left, right = fig.subplots(1, 2, sharey=True, gridspec_kw={"width_ratios": [1, 1]})
        y = list(range(len(entries)))[::-1]
        for yi, e in zip(y, entries):
            colour, marker = looks[e["family"] or "other"]
            if e["status"] != "ok":
                left.text(
                    0.02,
                    yi,
                    f"failed: {(e.get('error') or '')[:40]}",
                    transform=left.get_yaxis_transform(),
                    va="center",
                    fontsize=7,
                    color=OKABE_ITO["vermillion"],
                )
                continue
            _dot(left, e["D_eff"], yi, (e.get("D_eff_lo"), e.get("D_eff_hi")), colour, marker)
            left.plot([e["F_L"]], [yi], markersize=11, **F_L_MARK)
            _dot(right, e["ratio"], yi, (e.get("ratio_lo"), e.get("ratio_hi")), colour, marker)
        _family_separators((left, right), entries, y)
        right.axvline(1.0, color=OKABE_ITO["black"], linestyle="--", linewidth=1.0)
        left.set_yticks(y, [_entry_label(e) for e in entries])
        left.set_ylim(-0.7, len(entries) - 0.3)
        left.set_xlabel(r"$D_\mathrm{eff}$ (dot, 95% CI) and $F_L$ (|)")
        right.set_xlabel(r"$D_\mathrm{eff} / F_L$ (1 = reference)")
        for f in families:
            colour, marker = looks[f]
            right.plot([], [], marker=marker, color=colour, linestyle="none", label=f)
        left.plot([], [], markersize=9, label=r"$F_L$", **F_L_MARK)
        fig.legend(loc="outside lower center", ncol=min(6, len(families) + 1), frameon=False)
        fig.suptitle("Effective depth across the suite" + similarity_note(entries))
    return fig


def _figure_entries(rows: list[dict]) -> list[dict]:
    first = {r["key"]: r for r in lead_rows(rows, lambda r: r["key"])}
    order = list(dict.fromkeys(r["family"] or "other" for r in first.values()))

    def place(r):  # families in order of appearance, then by size
        return order.index(r["family"] or "other"), r["params"] is None, r["params"] or 0, r["model"], r["revision"]

    return sorted(first.values(), key=place)


def similarity_note(entries: list[dict]) -> str:
    """`` (similarity cka, ...)`` for a figure's title: the similarities of the rows it draws."""
    sims = list(dict.fromkeys(e.get("similarity") for e in entries if e.get("similarity")))
    return f" (similarity {', '.join(sims)})" if sims else ""


def _entry_label(e: dict) -> str:
    name = str(e["model"]).rstrip("/").rsplit("/", 1)[-1]
    rev = "" if e["revision"] in (None, "main") else f" @{e['revision']}"
    says_size = re.search(r"\d(\.\d+)?[mbkt]\b", name.lower()) is not None
    size = f" ({format_params(e['params'])})" if e.get("params") and not says_size else ""
    return f"{name}{size}{rev}"


def _dot(ax, x, y, ci, colour, marker) -> None:
    lo, hi = ci
    if lo is not None and hi is not None:
        ax.plot([lo, hi], [y, y], color=colour, linewidth=2, solid_capstyle="butt")
    ax.plot([x], [y], marker=marker, markersize=6, color=colour, linestyle="none")


def _family_separators(axes, entries, y) -> None:
    for i in range(1, len(entries)):
        if (entries[i]["family"] or "other") != (entries[i - 1]["family"] or "other"):
            for ax in axes:
                ax.axhline((y[i] + y[i - 1]) / 2, color="#999999", linewidth=0.6)
