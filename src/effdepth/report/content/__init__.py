"""What a report says, independent of its format: every writer renders the same objects, so the three
formats carry the same numbers.
"""

from __future__ import annotations

from effdepth.report.content.model import Cell, Folded, ResultContent, Section, Table
from effdepth.report.content.passages import passage_content
from effdepth.report.content.tokens import token_content
from effdepth.results.result import Result


def result_content(result: Result) -> ResultContent:
    """What every format shows of ``result``: its mode's headline, summary and sections.

    >>> import effdepth, torch
    >>> c = result_content(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    >>> c.headline[0].startswith("model states"), [s.heading for s in c.sections]
    (True, ['Views', 'Confounds: first position and passage length', 'Sample size', 'References', 'Attribution, similarity cka', 'Update diagnostic, similarity cka', 'Update norm ratio per layer, view default', 'Maximum lag, taper and aggregation, similarity cka'])
    """
    return passage_content(result) if result.passages else token_content(result)


__all__ = ["Cell", "Folded", "ResultContent", "Section", "Table", "result_content"]
