"""Order-parameter ODEs: initial states, integration with diffrax, and runs of a config."""

from ._integrate import BLOWUP as BLOWUP
from ._integrate import BlowUp as BlowUp
from ._integrate import Integrator as Integrator
from ._integrate import ODESolution as ODESolution
from ._integrate import explain as explain
from ._integrate import get_solver as get_solver
from ._integrate import integrate as integrate
from ._integrate import solve as solve
from ._run import ODEResult as ODEResult
from ._run import AUTO_FALLBACK as AUTO_FALLBACK
from ._run import AUTO_PILOT as AUTO_PILOT
from ._run import backend_of as backend_of
from ._run import error_target as error_target
from ._run import relative_error as relative_error
from ._run import resolved_rhs as resolved_rhs
from ._run import sized as sized
from ._run import build_field as build_field
from ._run import initial_state as initial_state
from ._run import run_ode as run_ode
from ._run import trajectory_risk as trajectory_risk
from ._state import random_start as random_start
from ._state import symmetric_start as symmetric_start
