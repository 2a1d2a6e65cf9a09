"""Priors of the latent coefficients θ (spec §1). Adding one: a file with an
[`AbstractPrior`][] subclass, its import below, and a branch in `dynamics.config`."""

from ._base import AbstractPrior as AbstractPrior
from ._discrete import AbstractDiscretePrior as AbstractDiscretePrior
from ._discrete import Discrete as Discrete
from ._discrete import FlippedSpike as FlippedSpike
from ._discrete import OneHot as OneHot
from ._gaussian import Gaussian as Gaussian
