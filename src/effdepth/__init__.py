"""effdepth: effective depth of a transformer's residual stream.

>>> import effdepth, torch
>>> r = effdepth.from_states(torch.randn(4, 8, 8, 16))
>>> r.default.reference
1.5
"""

from effdepth.errors import EffdepthError
from effdepth.measurement import measure
from effdepth.measurement.notebook import Accumulator, capture, from_hidden_states, from_pooled, from_states
from effdepth.measurement.run import analyse_saved
from effdepth.results.loading import load
from effdepth.results.result import Result, ViewResult
from effdepth.results.version import __version__
from effdepth.scale.trajectory import SavedTrajectory
from effdepth.studies.compare import Comparison, compare
from effdepth.studies.experiment import ExperimentResult
from effdepth.studies.intervene import InterventionResult, intervene

__all__ = [
    "measure",
    "analyse_saved",
    "from_pooled",
    "from_states",
    "intervene",
    "compare",
    "Comparison",
    "InterventionResult",
    "ExperimentResult",
    "SavedTrajectory",
    "load",
    "Result",
    "ViewResult",
    "EffdepthError",
    "__version__",
    # The notebook API: your model object, your loop.
    "capture",
    "Accumulator",
    "from_hidden_states",
]
