"""headflow: order-parameter theory of online SGD for models of Gaussian local fields, the
finite-D simulations that check it, and a GPT-2 bound checker.

The package holds three subpackages:

- [`headflow.dynamics`][]: the models, their local fields and expectations, the ODE and SDE of
  their order parameters, the symbolic derivation and the analyses;
- [`headflow.sims`][]: finite-D online SGD, in weight space and in overlap space;
- [`headflow.validation`][]: the experiments, figures and the `headflow` command, and the GPT-2
  checker.

Importing `headflow` imports none of them (and no JAX): `import headflow.dynamics as hd`.
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("headflow")
except _metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
    __version__ = "0+unknown"

__all__ = ["__version__"]
