"""The theory of online SGD for models of Gaussian local fields: the models (the family of
[`headflow.dynamics.models`][], the attention model of the single-location setting), their
fields and expectation backends, the ODE and SDE of their order parameters, the symbolic
derivation and the analyses; everything shared by theory and simulation.

headflow computes in float64 where accuracy matters (the ODEs, overlaps, reference checks) and
asks for float32 explicitly where it is meant (the weight-space simulator's default). JAX's
float64 is off unless the program enables it; importing this package does not change that
global setting. Call `jax.config.update("jax_enable_x64", True)` first (the `headflow`
command line and the test suite do).
"""

from . import models as models  # first: the model interface sits above the engine it imports
from . import activations as activations
from . import expectations as expectations
from . import priors as priors
from ._errors import ConfigError as ConfigError
from ._errors import DivergenceError as DivergenceError
from ._errors import HeadflowError as HeadflowError
from ._errors import require_x64 as require_x64
from ._layout import ATTENTION as ATTENTION
from ._layout import Layout as Layout
from ._value_moments import SIGNAL as SIGNAL
from ._value_moments import ValueMoments as ValueMoments
from ._overlaps import CROSS_OVERLAPS as CROSS_OVERLAPS
from ._overlaps import ORDER_PARAMETERS as ORDER_PARAMETERS
from ._overlaps import FieldLaw as FieldLaw
from ._overlaps import Overlaps as Overlaps
from ._risk import bayes_construction as bayes_construction
from ._risk import bayes_risk as bayes_risk
from ._risk import key_expectation as key_expectation
from ._risk import population_risk as population_risk
from ._risk import risk_nodes as risk_nodes
from ._schedule import Schedule as Schedule
from ._exported import set_export_cache as set_export_cache
from ._node_cache import set_node_cache as set_node_cache
from ._source_cache import set_source_cache as set_source_cache
from ._steps import StepSizes as StepSizes
from ._stop import Interrupted as Interrupted
from ._stop import check_stop as check_stop
from ._stop import clear_stop as clear_stop
from ._stop import request_stop as request_stop
from ._stop import stop_requested as stop_requested
from ._teacher import Teacher as Teacher
from ._teacher import make_teacher as make_teacher
from ._teacher import sample_data as sample_data
from ._weights import Weights as Weights
from ._weights import construction_weights as construction_weights
from ._weights import init_weights as init_weights
from ._weights import weights_from_overlaps as weights_from_overlaps
from .config import Config as Config
from .config import load_config as load_config
from .models import attention as attention  # noqa: E402
from .models.attention import Model as Model  # noqa: E402
