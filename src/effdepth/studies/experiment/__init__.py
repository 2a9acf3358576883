"""Controlled experiments: small models trained from scratch, then measured like any other.

>>> from effdepth.studies.experiment import CarryExperiment
>>> CarryExperiment().checkpoint_steps()
[0, 75, 150, 225, 300]
"""

from effdepth.studies.experiment.carry import carry_experiment
from effdepth.studies.experiment.checkpoints import checkpoint_carry, measure_checkpoint
from effdepth.studies.experiment.result import ExperimentResult
from effdepth.studies.experiment.setting import CarryExperiment
from effdepth.studies.experiment.training import split_corpus
