"""Backends for the Gaussian expectations of the ODEs and risks (spec §5)."""

from .._errors import ConfigError
from ._base import AbstractExpectation as AbstractExpectation
from ._base import Nodes as Nodes
from ._mc import MonteCarlo as MonteCarlo
from ._qmc import QuasiMonteCarlo as QuasiMonteCarlo
from ._quadrature import Quadrature as Quadrature

_BACKENDS = {"mc": MonteCarlo, "qmc": QuasiMonteCarlo, "quadrature": Quadrature}


def get_expectation(name: str, samples: int, seed: int = 0) -> AbstractExpectation:
    """The backend `name` ("mc", "qmc" or "quadrature") with a budget of `samples` nodes."""
    if name not in _BACKENDS:
        raise ConfigError(f"ode.expectation = {name!r}: choose one of {', '.join(_BACKENDS)}")
    if name == "quadrature":
        return Quadrature(samples=samples)
    return _BACKENDS[name](samples=samples, seed=seed)
