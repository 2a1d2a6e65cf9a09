"""The single-location model: definitions shared by theory and simulation, and its ODEs.

Importing this package enables float64 in JAX (`jax_enable_x64`): the ODEs and the reference
checks run in float64, while the simulator and the GPT-2 model ask for float32 explicitly.
"""

import jax as _jax

_jax.config.update("jax_enable_x64", True)

from . import activations as activations
from . import expectations as expectations
from . import priors as priors
from . import ode as ode
from ._errors import ConfigError as ConfigError
from ._errors import DivergenceError as DivergenceError
from ._errors import HeadflowError as HeadflowError
from ._linalg import psd_sqrt as psd_sqrt
from ._model import SIGNAL as SIGNAL
from ._model import Model as Model
from ._model import ValueMoments as ValueMoments
from ._overlaps import FieldLaw as FieldLaw
from ._overlaps import Overlaps as Overlaps
from ._risk import bayes_construction as bayes_construction
from ._risk import bayes_risk as bayes_risk
from ._risk import key_dims as key_dims
from ._risk import population_risk as population_risk
from ._risk import risk_integrand as risk_integrand
from ._risk import split_key_normals as split_key_normals
from ._teacher import Teacher as Teacher
from ._teacher import make_teacher as make_teacher
from ._teacher import sample_data as sample_data
from ._weights import Weights as Weights
from ._weights import construction_weights as construction_weights
from ._weights import init_weights as init_weights
from ._weights import weights_from_overlaps as weights_from_overlaps
from .config import Config as Config
from .config import load_config as load_config
