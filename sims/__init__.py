"""Finite-dimensional online SGD simulations of the single-location model (spec §3)."""

from ._sgd import SGDHyper as SGDHyper
from ._sgd import advance as advance
from ._sgd import field_gradients as field_gradients
from ._sgd import sgd_step as sgd_step
from ._simulate import SGDResult as SGDResult
from ._simulate import recorded_risk as recorded_risk
from ._simulate import run_sgd as run_sgd
from ._simulate import save_steps_for as save_steps_for
from ._simulate import seed_keys as seed_keys
from ._simulate import simulate as simulate
