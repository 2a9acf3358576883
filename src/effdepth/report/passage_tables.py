"""Passage-mode results on the terminal: the tables of :mod:`.passage_content` as plain text.

- one result (``effdepth measure``, ``effdepth show``): :func:`passage_summary_text`;
- several (``effdepth claims DIR``, the demo): :func:`comparison_table`, one row per model in the
  layout of the paper's Table 2, with its row beside ours.

The HTML and Markdown reports render the same tables, so the three formats carry the same numbers.
"""

from __future__ import annotations

from ..result import Result
from . import passage_content
from .content import extras_table
from .plain import table_text


def passage_headline(result: Result) -> str:
    """What was measured, and the main number with each estimator's own null beside it."""
    return "\n".join(passage_content.headline_lines(result))


def passage_summary_text(result: Result) -> str:
    """Everything the terminal shows for a passage-mode result."""
    parts = [passage_headline(result)]
    parts += [f"{s.title}:\n{table_text(s.table)}" for s in passage_content.sections(result)]
    extras = extras_table(result)
    if extras is not None:
        parts.append(table_text(extras))
    return "\n\n".join(parts)


def comparison_table(entries: list) -> str:
    """Several passage-mode results (``(label, Result)``) in the layout of the paper's Table 2."""
    return table_text(passage_content.comparison_table(entries))
