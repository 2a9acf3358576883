"""What every report says about one result whatever its mode: its title, the model measured, the
extra measurements (loss, ...) and the provenance (every key of the config and provenance)."""

from __future__ import annotations

import json

from effdepth.report.content.model import Cell, Folded, Table
from effdepth.report.numbers import fmt
from effdepth.report.sources import Source
from effdepth.results.result import SCHEMA, Result

#: Lists longer than this are folded (HTML) or shortened (Markdown) in the provenance.
LONG_LIST = 12


def title(source: Source) -> str:
    """The page title of one result (its label says the carry of an intervened model).

    >>> import effdepth, torch, pathlib
    >>> title(Source(pathlib.Path("r.json"), effdepth.from_states(torch.randn(3, 8, 4, 8)), "", "states"))
    'Effective depth of states'
    """
    return f"Effective depth of {source.label}"


def page_title(sources: list, studies=()) -> str:
    """The title of a report: one result's, the comparison of several, or without results its first study's.
    A paired comparison names the page over the one result beside it (a model ``compare`` measured into its
    folder): the page is about both models, not that one.

    >>> from types import SimpleNamespace as S
    >>> page_title([S(label="gemma")], [S(kind="comparison", heading="Paired comparison of smol, gemma")])
    'Paired comparison of smol, gemma'
    >>> page_title([S(label="gemma")], [S(kind="sensitivity", heading="Sensitivity of gemma")])
    'Effective depth of gemma'
    """
    comparisons = [s for s in studies if s.kind == "comparison"]
    if comparisons and len(sources) <= 1:
        return comparisons[0].heading
    if len(sources) > 1:
        return f"Effective depth: comparison of {len(sources)} results"
    return title(sources[0]) if sources else studies[0].heading


def model_name(result: Result) -> str:
    """The model's id (``states`` for states given directly), with its revision unless it is ``main``.

    >>> import effdepth, torch
    >>> model_name(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    'states'
    """
    model = result.provenance.get("model", {})
    name = str(model.get("id") or "states")
    return name + (f"@{model['revision']}" if model.get("revision") not in (None, "main") else "")


def model_rows(result: Result) -> list:
    """``(label, value)`` pairs of the model measured: id and source, revision, architecture, layers."""
    model = result.provenance.get("model") or {}
    return [
        ("model", f"{model.get('id') or 'n/a'} ({model.get('source') or 'n/a'})"),
        ("revision / commit", f"{model.get('revision') or 'n/a'} / {model.get('commit') or 'n/a'}"),
        ("architecture", " / ".join(str(x) for x in (model.get("model_type"), model.get("class")) if x) or "n/a"),
        ("layers L", plain(result.config.get("num_layers"))),
    ]


def device_rows(result: Result) -> list:
    """``[("dtype / device", ...)]`` when the provenance says either, else nothing."""
    model = result.provenance.get("model") or {}
    if model.get("dtype") or model.get("device"):
        return [("dtype / device", f"{model.get('dtype', 'n/a')} / {model.get('device', 'n/a')}")]
    return []


#: Extras that have sections of their own (:mod:`.confounds`), not rows of the extras table.
SECTIONED_EXTRAS = ("passage_lengths", "confounds", "sample_size")


def extras_rows(result: Result) -> list:
    """Extra measurements (e.g. ``loss``), flattened to ``(key, value)``; numbers as every table writes them.

    >>> import effdepth, torch
    >>> r = effdepth.from_states(torch.randn(3, 8, 4, 8))
    >>> r.extras["loss"] = {"mean": 2.5, "perplexity": 12.18, "tokens": 90}
    >>> extras_rows(r)
    [('loss.mean', '2.500'), ('loss.perplexity', '12.180'), ('loss.tokens', '90')]
    """
    shown = {k: v for k, v in (result.extras or {}).items() if k not in SECTIONED_EXTRAS}
    return [(k, _extra_value(x)) for k, x in _flatten(shown)]


def extras_table(result: Result) -> Table | None:
    """:func:`extras_rows` as a table; None without extra measurements."""
    rows = extras_rows(result)
    if not rows:
        return None
    return Table(
        ["extra", "value"],
        [[Cell(k), Cell(v) if isinstance(v, str) else Cell(v.preview)] for k, v in rows],
        [False, True],
    )


def provenance_groups(source: Source) -> list:
    """``(group, [(key, value)])`` covering every key of the config and provenance; values are strings,
    or :class:`~.model.Folded` for long lists.

    >>> import effdepth, torch, pathlib
    >>> r = effdepth.from_states(torch.randn(3, 8, 4, 8))
    >>> [g for g, _ in provenance_groups(Source(pathlib.Path("r.json"), r, "0" * 64))][:2]
    ['result file', 'model']
    """
    r = source.result
    p = dict(r.provenance or {})
    groups = [("result file", [("path", str(source.path)), ("sha256", source.sha256), ("schema", SCHEMA)])]
    order = ["model", "corpus", "code", "libraries", "machine"]
    for key in order + [k for k in p if k not in order and isinstance(p[k], dict)]:
        if isinstance(p.get(key), dict):
            groups.append((key, [(k, _value(x)) for k, x in _flatten(p[key])]))
    groups.append(("configuration", [(k, _value(x)) for k, x in _flatten(r.config or {})]))
    # Top-level scalars (created, elapsed_s, ...) join a "run" group, the one provenance may already have.
    run = [(k, _value(x)) for k, x in p.items() if not isinstance(x, dict)]
    named = dict(groups)
    if run and "run" in named:
        named["run"].extend(run)
    elif run:
        groups.append(("run", run))
    return groups


def plain(x) -> str:
    """A config or provenance value as text: strings as they are, anything else as JSON.

    >>> plain("a"), plain(3), plain(None)
    ('a', '3', 'null')
    """
    return x if isinstance(x, str) else json.dumps(x, default=str)


def _flatten(d: dict, prefix: str = ""):
    for k, x in d.items():
        key = f"{prefix}{k}"
        if isinstance(x, dict) and x:
            yield from _flatten(x, key + ".")
        else:
            yield key, x


def _extra_value(x):
    if x is None:
        return "n/a"  # non-finite values are saved as null
    if isinstance(x, float):
        return fmt(x) if abs(x) < 1e6 else f"{x:.4g}"
    return _value(x)


def _value(x):
    if isinstance(x, list) and len(x) > LONG_LIST:
        full = json.dumps(x)
        preview = json.dumps(x[:6])[:-1] + ", …]"
        return Folded(preview, full, len(x))
    return plain(x)
