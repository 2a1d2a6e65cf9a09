"""Finite-dimensional online SGD of every model, in weight space and exactly in law in
overlap space: [`run_sgd`][] for a config; the generic simulators of the model family
([`simulate_model`][]); the attention model's in [`headflow.sims.attention`][]."""

from ._simulate import SGDResult as SGDResult
from ._simulate import run_sgd as run_sgd
from ._simulate import simulate_states as simulate_states
from ._models import simulate_model as simulate_model
from . import attention as attention  # registers the attention model's simulator  # noqa: I001
