"""Training checkpoints from branch and folder names: step, tokens seen, training stage.

Names found in the wild:

- Pythia: ``step0``, ``step1``, ..., ``step143000``; every step is
  2,097,152 tokens (1024 sequences of 2048), :data:`PYTHIA_TOKENS_PER_STEP`.
- OLMo-2: ``stage1-step{N}-tokens{M}B``, ``stage2-ingredient{k}-step{N}-tokens{M}B``
  (annealing runs that restart their step and token counts after stage 1),
  and the unprefixed ``step{N}-tokens{M}B``.
- ``main``: the final model.
- Local folders of checkpoints: ``step-100``, ``step100``, ``step_100``,
  ``checkpoint-100``.

Anything else is not a checkpoint name: :func:`parse_revisions` lists it
among the skipped names instead of guessing.

>>> parse_revision("stage2-ingredient3-step11931-tokens50B").track
'stage2-ingredient3'
>>> parse_revision("step1000", tokens_per_step=PYTHIA_TOKENS_PER_STEP).tokens
2097152000
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from .errors import EffdepthError

#: Pythia's batch: 1024 sequences x 2048 tokens per optimiser step.
PYTHIA_TOKENS_PER_STEP = 2_097_152
FINAL = "main"

_OLMO = re.compile(r"^(?:(?P<stage>stage\d+)(?:-(?P<ingredient>ingredient\d+))?-)?step(?P<step>\d+)-tokens(?P<tokens>\d+(?:\.\d+)?)B$")
_STEP = re.compile(r"^(?:step|checkpoint)[-_]?(?P<step>\d+)$")
# Git allows much more; this is what a checkpoint branch or a tag looks like, and
# what can be handed to the hub and printed without surprises.
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")


@dataclass(frozen=True)
class Checkpoint:
    """One training checkpoint: a hub branch or a local folder.

    ``tokens`` is what the name says (for OLMo-2 stage 2, tokens of that
    stage only); ``tokens_seen`` is the running total used for plotting
    (stage 2 continues from the end of stage 1; see :func:`parse_revisions`).
    ``track`` groups checkpoints that follow each other in training.

    >>> c = parse_revision("step0", tokens_per_step=PYTHIA_TOKENS_PER_STEP)
    >>> c.step, c.tokens, c.final
    (0, 0, False)
    """

    revision: str
    step: int | None = None
    tokens: int | None = None
    track: str = "main"
    final: bool = False
    path: str | None = None
    tokens_seen: int | None = None

    @property
    def label(self) -> str:
        return self.revision


def parse_revision(name: str, *, tokens_per_step: int | None = None) -> Checkpoint | None:
    """The checkpoint a branch or folder name stands for, or ``None`` for other names.

    >>> parse_revision("stage1-step140000-tokens588B").tokens
    588000000000
    >>> parse_revision("main").final
    True
    >>> parse_revision("checkpoint-100").step, parse_revision("v1.0") is None
    (100, True)
    """
    text = str(name).strip()
    if text == FINAL:
        return Checkpoint(revision=text, final=True)
    m = _OLMO.match(text)
    if m:
        track = "-".join(p for p in (m["stage"], m["ingredient"]) if p) or "main"
        return Checkpoint(revision=text, step=int(m["step"]), tokens=round(float(m["tokens"]) * 1e9), track=track)
    m = _STEP.match(text)
    if m:
        step = int(m["step"])
        return Checkpoint(revision=text, step=step, tokens=step * tokens_per_step if tokens_per_step else None)
    return None


def parse_revisions(names, *, tokens_per_step: int | None = None) -> tuple[list[Checkpoint], list[str]]:
    """``(checkpoints in training order, names that are not checkpoints)``.

    Order: stage 1 (and unprefixed names) by step, then each later stage or
    ingredient by step, then ``main``. Stage-2 ingredients restart their
    counts, so their ``tokens_seen`` adds the most tokens stage 1 reached.

    >>> cps, skipped = parse_revisions(["main", "step10", "step2", "v0"], tokens_per_step=4)
    >>> [c.revision for c in cps], skipped
    (['step2', 'step10', 'main'], ['v0'])
    """
    parsed, skipped = [], []
    for name in dict.fromkeys(str(n) for n in names):  # keep first-seen order, drop repeats
        c = parse_revision(name, tokens_per_step=tokens_per_step)
        if c is None:
            skipped.append(name)
        else:
            parsed.append(c)
    return _with_tokens_seen(sorted(parsed, key=_training_order)), skipped


def _training_order(c: Checkpoint) -> tuple:
    if c.final:
        return (2, "", 0)
    first = c.track in ("main", "stage1")
    return (0 if first else 1, "" if first else c.track, c.step or 0)


def _with_tokens_seen(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    base = max((c.tokens for c in checkpoints if c.track in ("main", "stage1") and c.tokens is not None), default=0)
    out = []
    for c in checkpoints:
        later_stage = c.track not in ("main", "stage1")
        seen = None if c.tokens is None else c.tokens + (base if later_stage else 0)
        out.append(replace(c, tokens_seen=seen))
    return out


def select_every(checkpoints: list[Checkpoint], k: int) -> list[Checkpoint]:
    """Every ``k``-th checkpoint in training order, plus the last one (and ``main``).

    >>> cps, _ = parse_revisions([f"step{i}" for i in range(10)])
    >>> [c.step for c in select_every(cps, 4)]
    [0, 4, 8, 9]
    """
    if k < 1:
        raise EffdepthError(f"every:K needs K >= 1, got {k}")
    steps = [c for c in checkpoints if not c.final]
    kept = steps[::k]
    if steps and steps[-1] not in kept:
        kept.append(steps[-1])
    return kept + [c for c in checkpoints if c.final]


def parse_selection(text: str) -> tuple[str, object]:
    """``--revisions`` as ``("auto", None)``, ``("every", K)`` or ``("list", [names])``.

    >>> parse_selection("every:10"), parse_selection("step0,main")
    (('every', 10), ('list', ['step0', 'main']))
    >>> parse_selection("step0,step0")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --revisions names step0 more than once; list each checkpoint once
    """
    text = str(text).strip()
    if text == "auto":
        return "auto", None
    if text.startswith("every:"):
        raw = text[len("every:"):]
        if not raw.isdigit() or int(raw) < 1:
            raise EffdepthError(f"--revisions every:K needs a whole number K >= 1, got {text!r}")
        return "every", int(raw)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise EffdepthError("--revisions needs auto, every:K or a comma-separated list of branch names")
    for n in names:
        check_revision(n)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise EffdepthError(f"--revisions names {', '.join(repeated)} more than once; list each checkpoint once")
    return "list", names


def check_revision(revision: str) -> str:
    """A revision safe to send to the hub and to show; raises on anything path-like.

    >>> check_revision("stage1-step1000-tokens5B")
    'stage1-step1000-tokens5B'
    """
    text = str(revision)
    parts = text.split("/")
    if len(text) > 200 or not _REVISION.match(text) or any(p in ("", ".", "..") for p in parts):
        raise EffdepthError(
            f"malformed revision {text!r}: use a branch, tag or commit name (letters, digits, . _ - /; no '..', no leading '/')"
        )
    return text


def tokens_per_step_for(model_id: str | None) -> int | None:
    """Tokens per step when a family's batch is known and its names do not say (Pythia).

    >>> tokens_per_step_for("EleutherAI/pythia-70m-deduped"), tokens_per_step_for("allenai/OLMo-2-1124-7B")
    (2097152, None)
    """
    name = str(model_id or "").lower()
    return PYTHIA_TOKENS_PER_STEP if "pythia" in name else None
