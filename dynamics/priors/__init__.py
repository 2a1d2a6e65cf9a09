"""Priors of the latent coefficients θ (`docs/model.md#priors-of-the-latent-coefficients`).
Adding one: a file with an [`AbstractPrior`][] subclass that declares its `kind`, its config
keys (`params`) and `from_params`, decorated with [`register_prior`][]."""

from ._base import REQUIRED as REQUIRED
from ._base import AbstractPrior as AbstractPrior
from ._base import Param as Param
from ._base import prior_class as prior_class
from ._base import prior_kinds as prior_kinds
from ._base import register_prior as register_prior
from ._base import unregister_prior as unregister_prior
# registration order is the order of the config docs and CLI choices
from ._discrete import AbstractDiscretePrior as AbstractDiscretePrior  # noqa: I001
from ._discrete import FlippedSpike as FlippedSpike
from ._discrete import OneHot as OneHot
from ._discrete import Discrete as Discrete
from ._gaussian import Gaussian as Gaussian
