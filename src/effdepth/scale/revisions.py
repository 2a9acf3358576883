"""Training checkpoints from branch and folder names: step, tokens seen, training stage.

Names found in the wild: Pythia's ``step0`` ... ``step143000`` (:data:`PYTHIA_TOKENS_PER_STEP` each);
OLMo-2's ``stage1-step{N}-tokens{M}B``, ``stage2-ingredient{k}-step{N}-tokens{M}B`` (annealing runs that
restart their counts) and ``step{N}-tokens{M}B``; ``main``, the final model; local folders ``step-100``,
``step100``, ``step_100``, ``checkpoint-100``. :func:`parse_revisions` lists any other name as skipped
instead of guessing.

>>> parse_revision("stage2-ingredient3-step11931-tokens50B").track
'stage2-ingredient3'
>>> parse_revision("step1000", tokens_per_step=PYTHIA_TOKENS_PER_STEP).tokens
2097152000
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from effdepth.errors import EffdepthError

#: Pythia's batch: 1024 sequences x 2048 tokens per optimiser step.
PYTHIA_TOKENS_PER_STEP = 2_097_152
FINAL = "main"
#: The tracks of the first training run (OLMo-2's stage 1, or names without a stage); later stages restart their counts.
FIRST_TRACKS = ("main", "stage1")

_OLMO = re.compile(
    r"^(?:(?P<stage>stage\d+)(?:-(?P<ingredient>ingredient\d+))?-)?step(?P<step>\d+)-tokens(?P<tokens>\d+(?:\.\d+)?)B$"
)
_STEP = re.compile(r"^(?:step|checkpoint)[-_]?(?P<step>\d+)$")
# Git allows much more; this is what a checkpoint branch or a tag looks like, and
# what can be handed to the hub and printed without surprises.
_REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-/]*$")


@dataclass(frozen=True)
class Checkpoint:
    """One training checkpoint: a hub branch or a local folder.

    ``tokens`` is what the name says (OLMo-2 stage 2: that stage's only); ``tokens_seen`` the running
    total used for plotting; ``track`` groups checkpoints that follow each other in training.

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

    Order: stage 1 (and unprefixed names), then each later stage or ingredient, by step, then ``main``.
    Stage-2 ingredients restart their counts: their ``tokens_seen`` adds the most stage 1 reached.

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
    first = c.track in FIRST_TRACKS
    return (0 if first else 1, "" if first else c.track, c.step or 0)


def _with_tokens_seen(checkpoints: list[Checkpoint]) -> list[Checkpoint]:
    base = max((c.tokens for c in checkpoints if c.track in FIRST_TRACKS and c.tokens is not None), default=0)
    out = []
    for c in checkpoints:
        later_stage = c.track not in FIRST_TRACKS
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


def select_log(checkpoints: list[Checkpoint], k: int) -> tuple[list[Checkpoint], int]:
    """``(checkpoints, planned)``: ``k`` checkpoints of the first training track spaced evenly in log
    tokens seen (in log steps when a checkpoint's tokens are unknown), plus ``main``.

    The first and the last checkpoint are always kept; every other position takes the nearest checkpoint
    (in log), once, so fewer than ``k`` come back where branches are sparse. Later tracks (OLMo-2's
    stage-2 ingredients) are not selected. ``planned``: ``k``, or the track's size when no more than ``k``.

    >>> cps, _ = parse_revisions(["main"] + [f"step{s}" for s in (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1000, 2000)])
    >>> picked, planned = select_log(cps, 6)
    >>> [c.revision for c in picked], planned
    (['step0', 'step1', 'step8', 'step32', 'step256', 'step2000', 'main'], 6)
    >>> select_log(cps, 0)
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: log:K needs K >= 2 (the first and the last checkpoint are always kept), got 0
    """
    if k < 2:
        raise EffdepthError(f"log:K needs K >= 2 (the first and the last checkpoint are always kept), got {k}")
    track = [c for c in checkpoints if not c.final and c.track in FIRST_TRACKS]
    finals = [c for c in checkpoints if c.final]
    if len(track) <= k:
        return track + finals, len(track)
    key = "tokens_seen" if all(c.tokens_seen is not None for c in track) else "step"
    picks = log_spaced_picks([getattr(c, key) or 0 for c in track], k)
    return [track[i] for i in picks] + finals, k


def log_spaced_picks(positions: list, k: int) -> list[int]:
    """Indices of ``positions`` (ascending, >= 0) nearest in log to ``k`` points spaced evenly in log
    from the first to the last; a first position of 0 (step 0) is kept as the first point and the log
    grid runs from the smallest positive one. Both ends are always picked; no index twice.

    >>> log_spaced_picks([0, 1, 10, 100, 1000], 3)
    [0, 1, 4]
    >>> log_spaced_picks([1, 2, 3, 4, 100, 10000], 3)
    [0, 4, 5]
    """
    n = len(positions)
    if n <= k:
        return list(range(n))
    starts_at_zero = positions[0] <= 0
    positive = [i for i, p in enumerate(positions) if p > 0]
    if len(positive) < 2:
        return sorted({0, n - 1})
    lo, hi = math.log(positions[positive[0]]), math.log(positions[-1])
    count = k - 1 if starts_at_zero else k
    grid = [hi] if count == 1 else [lo + (hi - lo) * j / (count - 1) for j in range(count)]
    picks = [0] if starts_at_zero else []
    for target in grid:
        # Ties go to the earlier checkpoint: the choice never depends on set iteration order.
        nearest = min(positive, key=lambda i: (abs(math.log(positions[i]) - target), i))
        if nearest not in picks:
            picks.append(nearest)
    return picks


def parse_selection(text: str) -> tuple[str, object]:
    """``--revisions`` as ``("auto", None)``, ``("every", K)``, ``("log", K)`` or ``("list", [names])``.

    >>> parse_selection("every:10"), parse_selection("log:35"), parse_selection("step0,main")
    (('every', 10), ('log', 35), ('list', ['step0', 'main']))
    >>> parse_selection("step0,step0")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: --revisions names step0 more than once; list each checkpoint once
    """
    text = str(text).strip()
    if text == "auto":
        return "auto", None
    if text.startswith("every:"):
        raw = text[len("every:") :]
        if not raw.isdigit() or int(raw) < 1:
            raise EffdepthError(f"--revisions every:K needs a whole number K >= 1, got {text!r}")
        return "every", int(raw)
    if text.startswith("log:"):
        raw = text[len("log:") :]
        if not raw.isdigit() or int(raw) < 2:
            raise EffdepthError(
                f"--revisions log:K needs a whole number K >= 2 (the first and the last checkpoint are "
                f"always kept), got {text!r}"
            )
        return "log", int(raw)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise EffdepthError("--revisions needs auto, every:K, log:K or a comma-separated list of branch names")
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
