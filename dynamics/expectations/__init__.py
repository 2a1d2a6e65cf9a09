"""Backends for the Gaussian expectations of the ODEs and risks
(`docs/ode.md#expectation-backends`)."""

from .._constants import MIN_SAMPLES as MIN_SAMPLES  # light: shown by `headflow --help`
from .._errors import ConfigError
from ._base import AbstractExpectation as AbstractExpectation
from ._base import AbstractNodes as AbstractNodes
from ._base import EmbeddedNodes as EmbeddedNodes
from ._base import MonteCarloNodes as MonteCarloNodes
from ._base import ReplicateNodes as ReplicateNodes
from ._mc import MonteCarlo as MonteCarlo
from ._qmc import QuasiMonteCarlo as QuasiMonteCarlo
from ._quadrature import EXACT_MAX_NODES as EXACT_MAX_NODES
from ._quadrature import Quadrature as Quadrature
from ._quadrature import exact_rule as exact_rule
from ._sparse import SparseGrid as SparseGrid
from ._sparse import smolyak_rule as smolyak_rule


AUTO_MAX_SAMPLES = 1 << 18
"""The most nodes `[ode] samples = "auto"` chooses."""

_BACKENDS = {"mc": MonteCarlo, "qmc": QuasiMonteCarlo, "quadrature": Quadrature,
             "sparse": SparseGrid}
BACKENDS = tuple(_BACKENDS)
"""The config names of the backends (`[ode] expectation`)."""


def get_expectation(name: str, samples: int, seed: int = 0) -> AbstractExpectation:
    """The backend `name` ("mc", "qmc", "quadrature" or "sparse") with a budget of `samples`
    nodes."""
    if name not in _BACKENDS:
        raise ConfigError(f"ode.expectation = {name!r}: choose one of {', '.join(_BACKENDS)}")
    if name in ("quadrature", "sparse"):                 # deterministic nodes: no seed
        return _BACKENDS[name](samples=samples)
    return _BACKENDS[name](samples=samples, seed=seed)
