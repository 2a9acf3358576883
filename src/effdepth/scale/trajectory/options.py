"""``effdepth trajectory``'s options, declared once."""

from __future__ import annotations

from dataclasses import dataclass

from effdepth.options import option


@dataclass(frozen=True)
class TrajectoryOptions:
    """``effdepth trajectory``: the model's checkpoints, and their tokens."""

    model: str = option(None, "Hugging Face id, a local folder of checkpoints, or a preset", flags=())
    revisions: str | None = option(
        None,
        "auto (every checkpoint), every:K (every K-th and the last), log:K (K spaced evenly in log tokens over "
        "the first training track, plus main) or a comma-separated list (default auto; a preset fixes its own)",
    )
    tokens_per_step: int | None = option(
        None, "training tokens per step, when the names do not say (Pythia's is known)", kind="int"
    )
