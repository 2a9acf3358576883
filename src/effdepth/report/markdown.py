"""A Markdown report (GitHub-flavoured tables), with its figures as PNG files beside it."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from effdepth.report.content import Folded, Section, Table, result_content
from effdepth.report.content.captions import comparison_png, figure_text, render_figures
from effdepth.report.content.claims import claims_evidence, claims_table
from effdepth.report.content.compare import comparison_table, passage_sections
from effdepth.report.content.facts import extras_rows, page_title, provenance_groups
from effdepth.report.sources import Source
from effdepth.results.version import __version__

#: The characters a line of a table may take before the comparison lists its options under it.
LINE_WIDTH = 160

# Intraword "_" (D_eff) and brackets not followed by "(", "[" or ":" never form Markdown syntax;
# leaving them bare keeps the source readable when pasted.
_SPECIAL = re.compile(r"([\\`*<>|]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|\](?=[(\[:]))")


def render_markdown(
    sources: list, files_dir: str = "report_files", *, sort: bool = True, failed=(), studies=()
) -> tuple:
    """``(markdown text, {relative image path: PNG bytes})`` for one result or a comparison; ``failed`` and
    ``studies`` as :func:`~effdepth.report.html.render_html`'s.

    >>> import effdepth, torch, pathlib
    >>> from effdepth.report.sources import Source
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0))
    >>> text, images = render_markdown([Source(pathlib.Path("result.json"), r, "0" * 64, "demo")])
    >>> sorted(images)[0], text.startswith("# Effective depth")
    ('report_files/attribution.png', True)
    """
    from effdepth.report.sources import sort_by_ratio

    if sort:
        sources = sort_by_ratio(sources)
    several = len(sources) > 1
    images: dict = {}
    title = page_title(sources, studies)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    out = [
        f"# {esc(title)}",
        "",
        f"_Written by effdepth {esc(__version__)} on {esc(when)} from {len(sources)} result(s)._",
        "",
    ]
    if failed:
        out += [
            "## Not measured",
            "",
            f"{len(failed)} model(s) the sweep could not measure; they are in no table below:",
            "",
        ]
        out += [f"- {esc(model)}: {esc(error)}" for model, error in failed] + [""]
    if several:
        name = f"{files_dir}/comparison.png"
        images[name] = comparison_png(sources)
        out += ["## Comparison", "", table(comparison_table(sources, LINE_WIDTH)), ""]
        for section in passage_sections([(s.label, s.result) for s in sources]):
            out += _section(section)
        figure, caption = figure_text("comparison", all(s.result.passages for s in sources))
        out += [_image(name, "comparison"), "", f"_{esc(figure)}._ {esc(caption)}", ""]
    for k, study in enumerate(studies, start=1):
        from effdepth.report.style import figure_png

        name = f"{files_dir}/study-{k}-{study.kind}.png"
        images[name] = figure_png(study.figure())
        out += [f"## {esc(study.heading)}", ""]
        for section in study.sections():
            out += _section(section)
        out += [_image(name, study.kind), "", f"_{esc(study.caption)}_", ""]
    for i, s in enumerate(sources, start=1):
        prefix = f"{i:02d}-{_slug(s.label)}-" if several else ""
        out += _result(s, i, several, files_dir, prefix, images)
    return "\n".join(out).rstrip() + "\n", images


def esc(text) -> str:
    r"""Escape Markdown syntax so names and values print literally.

    >>> print(esc("a|b_c *x* [1, 2] _y"))
    a\|b_c \*x\* [1, 2] \_y
    """
    return _SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def table(t: Table) -> str:
    """A GitHub-flavoured pipe table, intervals after the values, the legend as a list, the note in italics."""
    numeric = t.numeric or [False] * len(t.header)
    lines = [
        "| " + " | ".join(esc(h) for h in t.header) + " |",
        "|" + "|".join("---:" if n else ":---" for n in numeric) + "|",
    ]
    for row in t.rows:
        cells = [esc(f"{c.text}: {c.reason}" if c.reason else f"{c.text} {c.ci}".strip()) for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    if t.legend:
        lines += [""] + [f"- {esc(line)}" for line in t.legend]
    if t.note:
        lines += ["", f"_{esc(t.note)}_"]
    return "\n".join(lines)


def _result(s: Source, index: int, several: bool, files_dir: str, prefix: str, images: dict) -> list:
    r = s.result
    out = [f"## {index}. {esc(s.label)}", ""] if several else []
    said = result_content(r)
    out += ["\n>\n".join(f"> {esc(line)}" for line in said.headline), "", "### Summary", "", _kv(said.summary), ""]
    for section in said.sections:
        out += _section(section)
    out += ["### Does it reproduce the paper?", "", table(claims_table(r)), ""]
    out += [f"- {esc(line)}" for line in claims_evidence(r)] + [""]
    extras = extras_rows(r)
    if extras:
        out += ["### Extra measurements", "", _kv(extras), ""]
    out += [f"### Figures (view {esc(r.default.name)})", ""]
    for f in render_figures(r):
        name = f"{files_dir}/{prefix}{f.stem}.png"
        images[name] = f.png
        out += [_image(name, f.title), "", f"_{esc(f.title)}._ {esc(f.caption)}", ""]
    out += ["### Provenance", ""]
    for group, rows in provenance_groups(s):
        out += [f"**{esc(group)}**", "", _kv(rows, path=str(s.path)), ""]
    return out


def _section(section: Section) -> list:
    """A section's lines: its heading (none without a title), its table, a blank line."""
    return ([f"### {esc(section.heading)}", ""] if section.title else []) + [table(section.table), ""]


def _kv(rows: list, path: str = "result.json") -> str:
    lines = ["| field | value |", "|:---|:---|"]
    for k, v in rows:
        if isinstance(v, Folded):
            v = f"{v.preview} ({v.count} values; all in {path})"
        lines.append(f"| {esc(k)} | {esc(v)} |")
    return "\n".join(lines)


def _image(path: str, alt: str) -> str:
    return f"![{esc(alt)}]({path})"


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", label).strip(".-")[:60] or "result"
