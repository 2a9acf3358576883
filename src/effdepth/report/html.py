"""A self-contained HTML report: one file, figures inlined, nothing fetched.

A Content Security Policy forbids every network request, so the file opens the same offline, from an
e-mail attachment, or years later.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime, timezone
from html import escape

from effdepth.report.content import Cell, Folded, Section, Table, result_content
from effdepth.report.content.captions import comparison_png, figure_text, render_figures
from effdepth.report.content.claims import claims_evidence, claims_table
from effdepth.report.content.compare import comparison_table, passage_sections
from effdepth.report.content.facts import extras_rows, page_title, provenance_groups
from effdepth.report.sources import Source
from effdepth.results.version import __version__

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

CSS = """
:root { --fg: #1a1a1a; --muted: #5a5a5a; --line: #d9d9d9; --band: #f5f7fa; --accent: #0072B2; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1240px; padding: 24px 24px 64px; color: var(--fg); background: #fff;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", Arial, sans-serif; }
h1 { font-size: 1.7em; margin: 0.2em 0 0.1em; }
h2 { font-size: 1.35em; margin: 2em 0 0.4em; padding-top: 0.6em; border-top: 2px solid var(--line); }
h3 { font-size: 1.08em; margin: 1.5em 0 0.4em; }
p.meta, p.note, figcaption { color: var(--muted); font-size: 0.88em; }
p.headline { font-size: 1.08em; background: var(--band); border-left: 4px solid var(--accent); padding: 10px 14px; margin: 0.8em 0; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.9em; font-variant-numeric: tabular-nums; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: left; vertical-align: top; }
th { background: var(--band); font-weight: 600; vertical-align: bottom; }
td.num, th.num { text-align: right; }
td.num { white-space: nowrap; }
tbody tr { background: #fff; }
tbody tr:nth-child(even) { background: #fbfbfb; }
table.sticky :is(th, td):nth-child(-n+2) { position: sticky; z-index: 1; }
table.sticky th { white-space: nowrap; }
table.sticky td:nth-child(-n+2) { background: inherit; }
table.sticky :is(th, td):first-child { left: 0; width: 3em; min-width: 3em; }
table.sticky :is(th, td):nth-child(2) { left: 3em; min-width: 9em; overflow-wrap: anywhere; box-shadow: inset -1px 0 var(--line); }
span.ci { display: block; color: var(--muted); font-size: 0.85em; }
table.kv th { vertical-align: top; text-align: left; width: 14em; background: none; font-weight: 500; color: var(--muted); white-space: normal; }
table.kv td { word-break: break-word; }
table.sortable { font-size: 0.84em; }
table.sortable th, table.sortable td { padding: 4px 6px; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; font-size: 0.75em; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; font-size: 0.75em; }
.figures { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 18px 26px; }
figure { margin: 0; }
figure img { width: 100%; height: auto; border: 1px solid var(--line); }
figure.wide { grid-column: 1 / -1; max-width: 760px; }
.prov { display: grid; grid-template-columns: repeat(auto-fit, minmax(460px, 1fr)); gap: 0 28px; }
.prov table.kv { width: 100%; }
.prov h4 { margin: 1em 0 0.2em; font-size: 0.95em; text-transform: capitalize; }
code, .mono { font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 0.92em; }
details summary { cursor: pointer; color: var(--accent); }
a { color: var(--accent); }
nav ul { margin: 0.3em 0; padding-left: 1.2em; }
footer { margin-top: 3em; color: var(--muted); font-size: 0.85em; }
ul.evidence { font-size: 0.88em; }
"""

# Marks how many images decoded, for the browser test and for anyone checking a copied file.
SCRIPT = """
(function () {
  function status() {
    var imgs = Array.prototype.slice.call(document.images);
    var el = document.getElementById('img-status');
    el.setAttribute('data-total', imgs.length);
    el.setAttribute('data-loaded', imgs.filter(function (i) { return i.complete && i.naturalWidth > 0; }).length);
  }
  function sortBy(th) {
    var table = th.closest('table'), body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = th.getAttribute('aria-sort') !== 'ascending';
    Array.prototype.forEach.call(th.parentNode.children, function (h) { h.removeAttribute('aria-sort'); });
    th.setAttribute('aria-sort', asc ? 'ascending' : 'descending');
    var numeric = th.classList.contains('num');
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute('data-sort'), y = b.cells[col].getAttribute('data-sort');
      if (numeric) {
        x = x === null || x === '' ? Infinity : parseFloat(x); y = y === null || y === '' ? Infinity : parseFloat(y);
        return asc ? x - y : y - x;
      }
      x = a.cells[col].textContent; y = b.cells[col].textContent;
      return asc ? x.localeCompare(y) : y.localeCompare(x);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.addEventListener('click', function (e) {
    var th = e.target.closest && e.target.closest('table.sortable th');
    if (th) { sortBy(th); }
  });
  if (document.readyState === 'complete') { status(); } else { window.addEventListener('load', status); }
})();
"""


def render_html(sources: list, *, sort: bool = True, failed=(), studies=()) -> str:
    """The report of one result, or a comparison of several, as one HTML page; ``failed``: the ``(model,
    error)`` not measured; ``studies`` get a section each, before the results.

    >>> import effdepth, torch, pathlib
    >>> from effdepth.report.sources import Source
    >>> r = effdepth.from_states(torch.randn(5, 8, 8, 16).cumsum(0), bootstrap=0)
    >>> page = render_html([Source(pathlib.Path("result.json"), r, "0" * 64, "demo")])
    >>> page.startswith("<!DOCTYPE html>") and "data:image/png;base64," in page
    True
    """
    from effdepth.report.sources import sort_by_ratio

    if sort:
        sources = sort_by_ratio(sources)
    several = len(sources) > 1
    title = page_title(sources, studies)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    count = f"{len(sources)} result{'s' if len(sources) != 1 else ''}"
    meta = f'<p class="meta">Written by effdepth {escape(__version__)} on {escape(when)} from {count}.</p>'
    body = [f"<header><h1>{escape(title)}</h1>", meta, "</header>"]
    if failed:
        items = "".join(f"<li>{escape(str(model))}: {escape(str(error))}</li>" for model, error in failed)
        body.append(
            f'<section id="not-measured"><h2>Not measured</h2><p>{len(failed)} model(s) the sweep could not '
            f"measure; they are in no table below:</p><ul>{items}</ul></section>"
        )
    if several:
        body.append(_comparison_section(sources))
    for k, study in enumerate(studies, start=1):
        from effdepth.report.style import figure_png

        heading = study.heading
        tables = "".join(_section(s) for s in study.sections())
        body.append(
            f'<section id="study-{k}"><h2>{esc(heading)}</h2>'
            + tables
            + f'<div class="figures">{_figure(f"study-{k}", heading, study.caption, figure_png(study.figure()), wide=True)}</div></section>'
        )
    for i, s in enumerate(sources, start=1):
        body.append(_result_section(s, i, several))
    body.append(
        "<footer>Method: effective depth D_eff = N&sup2; / &Sigma;<sub>ij</sub> sim<sub>ij</sub>; "
        "references and attribution as in docs/method.md. "
        f"Report written by effdepth {escape(__version__)}.</footer>"
    )
    body.append('<div id="img-status" hidden data-loaded="" data-total=""></div>')
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="effdepth {escape(__version__)}">\n'
        f"<title>{escape(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n"
        + "\n".join(body)
        + f"\n<script>{SCRIPT}</script>\n</body>\n</html>\n"
    )


def _comparison_section(sources: list) -> str:
    nav = "".join(f'<li><a href="#result-{i}">{escape(s.label)}</a></li>' for i, s in enumerate(sources, start=1))
    passages = all(s.result.passages for s in sources)
    fig = _figure("comparison", *figure_text("comparison", passages), comparison_png(sources), wide=True)
    sections = passage_sections([(s.label, s.result) for s in sources])
    return (
        '<section id="comparison"><h2>Comparison</h2>'
        + _table(comparison_table(sources), sortable=True, sticky=True)
        + "".join(_section(x, sortable=True) for x in sections)
        + f'<div class="figures">{fig}</div>'
        + f"<h3>Results</h3><nav><ul>{nav}</ul></nav></section>"
    )


def _result_section(source: Source, index: int, several: bool) -> str:
    r = source.result
    heading = f"<h2>{index}. {escape(source.label)}</h2>" if several else ""
    parts = [f'<section id="result-{index}">', heading]
    said = result_content(r)
    lines = "<br>".join(esc(line) for line in said.headline)
    parts += [f'<p class="headline">{lines}</p>', "<h3>Summary</h3>" + _kv(said.summary, symbols=True)]
    parts += [_section(s, index) for s in said.sections]
    evidence = "".join(f"<li>{esc(line)}</li>" for line in claims_evidence(r))
    parts.append(
        '<h3 id="claims-%d">Does it reproduce the paper?</h3>' % index
        + _table(claims_table(r))
        + f'<details><summary>The numbers behind each verdict</summary><ul class="evidence">{evidence}</ul></details>'
    )
    extras = extras_rows(r)
    if extras:
        parts.append("<h3>Extra measurements</h3>" + _kv(extras))
    figures = "".join(_figure(f.stem, f.title, f.caption, f.png) for f in render_figures(r))
    view = r.default.name
    parts.append(f'<h3>Figures (view {escape(view)})</h3><div class="figures">{figures}</div>')
    prov = "".join(f"<div><h4>{escape(name)}</h4>{_kv(rows)}</div>" for name, rows in provenance_groups(source))
    parts.append(
        f'<h3>Provenance</h3><p class="note">Everything needed to trace and reproduce the numbers above.</p><div class="prov">{prov}</div>'
    )
    parts.append("</section>")
    return "\n".join(p for p in parts if p)


_SYMBOL = re.compile(r"\b([DFRSL])_(eff|N|L|init|size|matched|corr|norm|h0|structural_cal|matched_cal|0|1)\b")


def esc(text) -> str:
    """Escape text for HTML, then typeset the method's symbols (D_eff, F_N, R_init...) with subscripts.

    >>> esc("D_eff < F_N")
    'D<sub>eff</sub> &lt; F<sub>N</sub>'
    """
    return _SYMBOL.sub(r"\1<sub>\2</sub>", escape(str(text)))


def _figure(stem: str, title: str, caption: str, png: bytes, wide: bool = False) -> str:
    data = base64.b64encode(png).decode("ascii")
    cls = ' class="wide"' if wide else ""
    return (
        f'<figure id="fig-{escape(stem)}"{cls}><img alt="{escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption><b>{esc(title)}.</b> {esc(caption)}</figcaption></figure>"
    )


def _section(section: Section, index: int | None = None, sortable: bool = False) -> str:
    # A section of a result gets its result's number in the anchor, so that several results' anchors differ.
    anchor = (f"{section.anchor}-{index}" if index is not None else section.anchor) if section.anchor else ""
    ident = f' id="{escape(anchor)}"' if anchor else ""
    heading = f"<h3{ident}>{esc(section.heading)}</h3>" if section.title else ""
    return heading + _table(section.table, sortable)


def _table(table: Table, sortable: bool = False, sticky: bool = False) -> str:
    """A table in its own scrolling box (the page never gets wider); ``sticky``: its first two columns
    stay in view while it scrolls."""
    numeric = table.numeric or [False] * len(table.header)
    head = "".join(f'<th scope="col"{_cls(n)}>{esc(h)}</th>' for h, n in zip(table.header, numeric))
    rows = "".join("<tr>" + "".join(_cell(c, n) for c, n in zip(row, numeric)) + "</tr>" for row in table.rows)
    classes = " ".join(name for name, on in (("sortable", sortable), ("sticky", sticky)) if on)
    cls = f' class="{classes}"' if classes else ""
    legend = "".join(f"<li>{esc(line)}</li>" for line in table.legend)
    below = (f"<ul>{legend}</ul>" if legend else "") + (f'<p class="note">{esc(table.note)}</p>' if table.note else "")
    return f'<div class="scroll"><table{cls}><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>{below}'


def _cell(c: Cell, numeric: bool) -> str:
    label = f"{c.text}:" if c.reason else c.text  # a cell without a value says why under it
    label = escape(label) if numeric else escape(label).replace(",", ",<wbr>")  # lists may wrap at commas
    text = f'<a href="{escape(c.href)}">{label}</a>' if c.href else label
    small = c.ci or c.reason
    ci = f'<span class="ci">{escape(small)}</span>' if small else ""
    sort = f' data-sort="{c.sort!r}"' if c.sort is not None else ""
    return f"<td{_cls(numeric)}{sort}>{text}{ci}</td>"


def _cls(numeric: bool) -> str:
    return ' class="num"' if numeric else ""


def _kv(rows: list, symbols: bool = False) -> str:
    # Provenance values stay verbatim; only the summary's own wording gets subscripts.
    show = (lambda v: esc(v)) if symbols else _value
    body = "".join(f'<tr><th scope="row">{esc(k)}</th><td>{show(v)}</td></tr>' for k, v in rows)
    return f'<table class="kv"><tbody>{body}</tbody></table>'


def _value(v) -> str:
    if isinstance(v, Folded):
        return (
            f'<details><summary class="mono">{escape(v.preview)} ({v.count} values)</summary>'
            f'<div class="mono">{escape(v.full)}</div></details>'
        )
    return f'<span class="mono">{escape(str(v))}</span>' if _looks_like_id(v) else escape(str(v))


def _looks_like_id(v) -> bool:
    s = str(v)
    return len(s) >= 32 and all(ch in "0123456789abcdef" for ch in s.lower())
