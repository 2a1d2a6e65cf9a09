"""Order-parameter ODEs: vector fields, initial states and integration with diffrax."""

from ._fields import AbstractField as AbstractField
from ._fields import FullField as FullField
from ._fields import Hyper as Hyper
from ._fields import ManifoldField as ManifoldField
from ._fields import full_dims as full_dims
from ._integrate import ODESolution as ODESolution
from ._integrate import check_initial_state as check_initial_state
from ._integrate import get_solver as get_solver
from ._integrate import integrate as integrate
from ._state import random_start as random_start
from ._state import symmetric_start as symmetric_start
from ._run import ODEResult as ODEResult
from ._run import backend_of as backend_of
from ._run import build_field as build_field
from ._run import initial_state as initial_state
from ._run import run_ode as run_ode
from ._run import trajectory_risk as trajectory_risk
