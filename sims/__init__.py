"""Finite-dimensional online SGD of every model, in weight space and exactly in law in
overlap space: [`run_sgd`][] for a config, [`simulate_states`][] for a model, the family's
simulators ([`simulate_model`][]) and the attention model's ([`headflow.sims.attention`][]), all
run by one driver ([`simulate_sgd`][]) over the model's own maps
(`headflow.dynamics.models.AbstractSGD`)."""

from ._simulate import SGDResult as SGDResult
from ._simulate import run_sgd as run_sgd
from ._simulate import simulate_states as simulate_states
from ._models import simulate_model as simulate_model
from ._runs import simulate_sgd as simulate_sgd
from . import attention as attention  # noqa: I001
