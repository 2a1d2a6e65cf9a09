"""Order-parameter ODEs of every model: integration with diffrax, runs of a config, and
differentiable learning curves."""

from ._integrate import BLOWUP as BLOWUP
from ._integrate import BlowUp as BlowUp
from ._integrate import Integrator as Integrator
from ._integrate import ODESolution as ODESolution
from ._integrate import explain as explain
from ._integrate import get_solver as get_solver
from ._integrate import integrate as integrate
from ._integrate import solve as solve
from ._integrate import traced_values as traced_values
from ._run import ODEResult as ODEResult
from ._run import AUTO_FALLBACK as AUTO_FALLBACK
from ._run import AUTO_PILOT as AUTO_PILOT
from ._run import backend_of as backend_of
from ._run import error_target as error_target
from ._run import relative_error as relative_error
from ._run import sized as sized
from ._run import build_field as build_field
from ._run import initial_state as initial_state
from ._run import run_ode as run_ode
from ._curve import ADJOINTS as ADJOINTS
from ._curve import adjoint_of as adjoint_of
from ._curve import curve_solver as curve_solver
from ._curve import final_risk as final_risk
from ._curve import mean_risk as mean_risk
from ._curve import time_to_risk as time_to_risk
from ._models import model_arrays as model_arrays
from ._models import model_field as model_field
from ._models import model_start as model_start
from ._models import risk_rule as risk_rule
from ._models import states_risk as states_risk
from ._models import ModelCurve as ModelCurve
from ._models import curve_from_config as curve_from_config
from ._models import differentiable_keys as differentiable_keys
