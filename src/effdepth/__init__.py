"""effdepth: effective depth of a transformer's residual stream.

>>> import effdepth, torch
>>> r = effdepth.from_states(torch.randn(4, 8, 8, 16))
>>> r.default.reference
1.5
"""

from .errors import EffdepthError
from .intervene import InterventionResult, intervene
from .loading import SavedTrajectory, load
from .measure import from_states, measure
from .passage_measure import analyse_saved, from_pooled
from .result import Result, ViewResult
from .results_carry import ExperimentResult
from .version import __version__

__all__ = [
    "measure",
    "analyse_saved",
    "from_pooled",
    "from_states",
    "intervene",
    "InterventionResult",
    "ExperimentResult",
    "SavedTrajectory",
    "load",
    "Result",
    "ViewResult",
    "EffdepthError",
    "__version__",
]

# The notebook API: your model object, your loop.
from .notebook import Accumulator, capture, from_hidden_states

__all__ += ["capture", "Accumulator", "from_hidden_states"]
