"""Controlled experiments: small models trained from scratch, then measured like any other.

>>> from effdepth.experiment import CarryExperiment
>>> CarryExperiment().checkpoint_steps()
[0, 75, 150, 225, 300]
"""

from .carry import (
    CarryExperiment,
    ExperimentResult,
    carry_experiment,
    checkpoint_carry,
    load_experiment,
    measure_checkpoint,
    save_experiment,
    split_corpus,
)

__all__ = [
    "CarryExperiment",
    "ExperimentResult",
    "carry_experiment",
    "checkpoint_carry",
    "load_experiment",
    "measure_checkpoint",
    "save_experiment",
    "split_corpus",
]
