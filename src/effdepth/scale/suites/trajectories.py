"""Named trajectory presets: a model and a checkpoint selection, for ``effdepth trajectory PRESET``
and ``effdepth fetch PRESET``.

A preset names no branch: its selection (``log:35``) runs on the hub's branch list (or the one
``effdepth fetch`` recorded), so it picks only checkpoints that exist.

>>> p = trajectory_preset("paper-pythia")
>>> p.model, p.revisions
('EleutherAI/pythia-1.4b', 'log:35')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from effdepth.errors import EffdepthError
from effdepth.scale.revisions import parse_selection


@dataclass(frozen=True)
class TrajectoryPreset:
    """A model, the checkpoints to measure (a ``--revisions`` selection) and why these."""

    name: str
    model: str
    revisions: str
    source: str

    def to_dict(self) -> dict:
        """The preset as ``trajectory.json`` records it.

        >>> sorted(trajectory_preset("paper-olmo2").to_dict())
        ['model', 'name', 'revisions', 'source']
        """
        return asdict(self)


PRESETS = {
    p.name: p
    for p in (
        TrajectoryPreset(
            "paper-olmo2",
            "allenai/OLMo-2-1124-13B",
            "log:35",
            "the paper's Figure 3, OLMo-2 through 5T tokens: OLMo-2 13B is the OLMo-2 pretrained on 5T tokens (its model "
            "card: 7B 4T, 13B 5T); 35 checkpoints spaced evenly in log tokens over stage 1 (pretraining), first and last "
            "kept, plus main",
        ),
        TrajectoryPreset(
            "paper-pythia",
            "EleutherAI/pythia-1.4b",
            "log:35",
            "the paper's Figure 3, Pythia-1.4B (the suite paper16's id) with 35 planned checkpoints: spaced evenly in log "
            "tokens over its step branches, first and last kept, plus main",
        ),
    )
}


def preset_names() -> list[str]:
    """The trajectory presets shipped with effdepth.

    >>> preset_names()
    ['paper-olmo2', 'paper-pythia']
    """
    return sorted(PRESETS)


def trajectory_preset(name) -> TrajectoryPreset | None:
    """The preset called ``name``, or ``None`` when ``name`` is not a preset.

    >>> trajectory_preset("EleutherAI/pythia-1.4b") is None
    True
    """
    return PRESETS.get(str(name).strip())


def preset_selection(name, revisions: str | None) -> tuple[TrajectoryPreset | None, str]:
    """``(preset or None, the --revisions selection to use)`` for a trajectory of ``name``.

    A preset fixes its checkpoints: ``revisions`` with a preset is a one-line error; without a
    preset, ``revisions`` defaults to ``auto``.

    >>> preset_selection("paper-pythia", None)[1], preset_selection("acme/m", None)[1]
    ('log:35', 'auto')
    >>> preset_selection("paper-pythia", "every:2")
    Traceback (most recent call last):
    ...
    effdepth.errors.EffdepthError: preset paper-pythia fixes its checkpoints (log:35 of EleutherAI/pythia-1.4b); for others pass the model id with --revisions instead: EleutherAI/pythia-1.4b --revisions every:2
    """
    preset = trajectory_preset(name)
    if preset is None:
        return None, "auto" if revisions is None else revisions
    if revisions is not None:
        raise EffdepthError(
            f"preset {preset.name} fixes its checkpoints ({preset.revisions} of {preset.model}); for others "
            f"pass the model id with --revisions instead: {preset.model} --revisions {revisions}"
        )
    parse_selection(preset.revisions)
    return preset, preset.revisions


def not_a_trajectory_source(text: str) -> str:
    """The one-line error for a name that is neither a preset, a folder of checkpoints nor a hub id.

    >>> not_a_trajectory_source("paper-olmo")
    "'paper-olmo' is not a trajectory preset (paper-olmo2, paper-pythia), a folder of checkpoints or a Hugging Face id (owner/name)"
    """
    return (
        f"{text!r} is not a trajectory preset ({', '.join(preset_names())}), a folder of checkpoints or a Hugging Face "
        "id (owner/name)"
    )
