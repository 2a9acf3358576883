"""Controlled experiments: small models trained from scratch, then measured like any other.

>>> from effdepth.experiment import CarryExperiment
>>> CarryExperiment().checkpoint_steps()
[0, 75, 150, 225, 300]
"""

from ..results_carry import ExperimentResult, load_experiment
from .carry import carry_experiment, save_experiment
from .checkpoints import checkpoint_carry, measure_checkpoint
from .setting import CarryExperiment
from .training import split_corpus

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
