"""Sentences and labels every output (tables, reports, figures) shares, written once.

>>> similarity_name("cka")
"cka (linear CKA across passages, biased HSIC: the paper's)"
>>> carry_text({"intervention": {"carry": 0.5, "layers": [1, 2], "all_layers": False}})
'residual carry 0.5 on blocks 1,2'
"""

from __future__ import annotations

from effdepth.numerics.similarities import SIMILARITIES

#: The attribution's one sign convention (docs/method.md#attribution), used by every table, figure and caption.
ATTRIBUTION = (
    "Attribution (docs/method.md#attribution): F_N - D_eff = initial state (F_N - R_init) + size imbalance "
    "(R_init - R_matched) + correlated updates (R_matched - D_eff); a positive term pushes D_eff below F_N, "
    "a negative one above."
)


def passage_wording(text: str) -> str:
    """A sentence written about F_N as passage mode says it (its N states are the L block outputs).

    >>> passage_wording("D_eff / F_N")
    'D_eff / F_L'
    """
    return text.replace("F_N", "F_L")


#: What the paper's abstract reports, claim by claim (only the abstract is public).
PAPER_ABSTRACT = {
    "sub-reference": "15 of 16 models, 23-44% below F_L",
    "correlated-updates": "claimed in the abstract; no numbers public",
    "not-pos0": "claimed in the abstract (a symmetric position-0 control); no numbers public",
    "controls": "all 16 models below F_L after token-norm or top-1-PC removal",
    "calibrated": "not in the paper (effdepth's calibrated reference, docs/method.md#calibrated-references)",
    "not-length": "not in the paper (effdepth's length control, docs/method.md#the-first-token-x-length-confound)",
}
PAPER_NOTE = (
    "The paper (arXiv 2609.31098, its abstract): 15 of 16 models 23-44% below F_L, all 16 below it after "
    "token-norm or top-1-PC removal. Per-model values: its Table 2, as a public third-party reading of the "
    "paper gives them (effdepth/data/paper_table2.yaml)."
)

CALIBRATED = {"structural_cal": "R_structural_cal", "matched_cal": "R_matched_cal"}
#: The similarities of old token-mode results (statistics summed over tokens), as those files name them:
#: ``(label, axis label)``, so they show as they were saved.
OLD_TOKEN_SIMILARITIES = {
    "frobenius": ("squared cosine of the flattened states", r"$\cos^2(S_i, S_j)$"),
    "token": ("mean per-token squared cosine", r"token mean of $\cos^2(s_i, s_j)$"),
    "cka": ("cross-sequence linear CKA", "cross-sequence linear CKA"),
    "cka-full": ("pooled linear CKA", "linear CKA, tokens pooled"),
}


def similarity_labels(similarity: str, passages: bool = True) -> tuple | None:
    """``(label, axis label)`` of a similarity, or None for one unknown; ``passages=False``: an old result's.

    >>> similarity_labels("token", passages=False)[0], similarity_labels("token")
    ('mean per-token squared cosine', None)
    """
    if not passages:
        return OLD_TOKEN_SIMILARITIES.get(similarity)
    spec = SIMILARITIES.get(similarity)
    return None if spec is None else (spec.label, spec.axis_label)


def similarity_name(similarity: str, passages: bool = True) -> str:
    """The similarity's name with what it is, for headlines and captions (``passages=False``: an old result's).

    >>> similarity_name("token", passages=False), similarity_name("cka")
    ('token (mean per-token squared cosine)', "cka (linear CKA across passages, biased HSIC: the paper's)")
    """
    labels = similarity_labels(similarity, passages)
    return f"{similarity} ({labels[0]})" if labels else similarity


def intervention(extras: dict | None) -> dict | None:
    """``extras["intervention"]`` of an intervened result, or None for a plain measurement.

    >>> intervention({}) is None, intervention({"intervention": {"carry": 1.0}})["carry"]
    (True, 1.0)
    """
    found = (extras or {}).get("intervention")
    return found if isinstance(found, dict) and found.get("carry") is not None else None


def carry_value(extras: dict | None) -> str:
    """The carry lam as tables write it, or ``"-"`` (no intervention).

    >>> carry_value({"intervention": {"carry": 0.75}}), carry_value({})
    ('0.75', '-')
    """
    found = intervention(extras)
    return f"{float(found['carry']):g}" if found else "-"


def carry_text(extras: dict | None) -> str:
    """``"residual carry 0.5 on blocks 1,2"`` (or ``"... on all N blocks"``), ``""`` for a plain measurement.

    >>> carry_text({"intervention": {"carry": 0.5, "layers": [1, 2, 3], "all_layers": True}})
    'residual carry 0.5 on all 3 blocks'
    """
    found = intervention(extras)
    if not found:
        return ""
    layers = list(found.get("layers") or [])
    where = f"all {len(layers)} blocks" if found.get("all_layers") else "blocks " + ",".join(map(str, layers))
    sublayers = " (every attention and MLP sublayer)" if found.get("carry_on") == "sublayers" else ""
    return f"residual carry {carry_value(extras)} on {where}{sublayers}"


def context(result, similarity: str | None = None) -> str:
    """What a table of ``result`` shows: the similarity, and the carry when intervened.

    >>> import effdepth, torch
    >>> context(effdepth.from_states(torch.randn(3, 8, 4, 8)))
    'similarity cka'
    """
    parts = [f"similarity {similarity or result.primary_similarity}"]
    carry = carry_text(result.extras)
    if carry:
        parts.append(carry)
    return ", ".join(parts)
