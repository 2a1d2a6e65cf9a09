"""Finite-dimensional online SGD of the single-location model
(`docs/model.md#training-online-sgd`)."""

from ._sgd import field_gradients as field_gradients
from ._sgd import sgd_step as sgd_step
from ._simulate import SGDResult as SGDResult
from ._simulate import Simulation as Simulation
from ._simulate import recorded_risk as recorded_risk
from ._simulate import run_sgd as run_sgd
from ._simulate import simulate as simulate
from ._simulate import sgd_overlaps as sgd_overlaps
from ._overlap_chain import simulate_overlaps as simulate_overlaps
from ._models import simulate_model as simulate_model
