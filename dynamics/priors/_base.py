"""The prior family `P_θ` of the latent coefficients
(`docs/model.md#priors-of-the-latent-coefficients`)."""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

import equinox as eqx
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._errors import ConfigError
from .._registry import Registry

REQUIRED: Any = object()
"""The default of a [`Param`][] that has none: the config must give it."""


@dataclasses.dataclass(frozen=True)
class Param:
    """One key of a prior's config table (`[prior]`).

    **Fields:** `name` (the key), `kind` (`float`, `int`, `bool`, `str` or `list`: the TOML type
    it must have), `default` (a value, a callable of F for defaults that depend on the number of
    latent directions, or [`REQUIRED`][]), `help` (one line for the docs and `--help`), and
    `check(value, F)`, which returns an error text (without the key) or None.
    """

    name: str
    kind: type
    default: Any
    help: str
    check: Callable[[Any, int], str | None] | None = None

    def default_for(self, F: int) -> Any:
        return self.default(F) if callable(self.default) else self.default


def finite_nonnegative(value: Any, F: int) -> str | None:
    del F
    if not math.isfinite(value) or value < 0:
        return "must be a finite number >= 0"
    return None


def vector(value: Any, F: int) -> str | None:
    """A list of F finite numbers."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return f"must be a list of F = {F} numbers"
    if arr.shape != (F,):
        return f"must have F = {F} entries (got shape {list(arr.shape)})"
    if not np.all(np.isfinite(arr)):
        return "entries must be finite"
    return None


class AbstractPrior(eqx.Module):
    """A distribution of `θ ∈ R^F`.

    What the rest of headflow needs from a prior:

    - `sample(key, shape)`: draws for the simulator;
    - `theta_nodes(normals)`: integration nodes for expectations over θ (exact enumeration for
      discrete priors, a map from standard normals for continuous ones);
    - `log_pi(c)`: `log E_θ exp(θ·c − |θ|²/2)`, the location likelihood of the Bayes posterior;
    - `mean()`, `variance()`, and `scaled(factor)` (the signal-amplitude knob).

    A prior that can be chosen in a config also sets `kind` (the value of `prior.kind`),
    `params` (its keys: every prior has `amplitude`) and implements `from_params`, and is
    decorated with [`register_prior`][]. Constructors raise `ValueError` naming their own
    arguments; the config layer prefixes the `prior.` table.
    """

    kind: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]

    @property
    @abc.abstractmethod
    def F(self) -> int:
        """Number of latent directions."""

    @property
    @abc.abstractmethod
    def n_normal_dims(self) -> int:
        """Standard-normal dimensions `theta_nodes` consumes (0 for discrete priors)."""

    @abc.abstractmethod
    def sample(self, key: PRNGKeyArray, shape: tuple[int, ...] = (),
               dtype=jnp.float64) -> Float[Array, "*shape F"]:
        """Independent draws of θ."""

    @abc.abstractmethod
    def theta_nodes(self, normals: Float[Array, "n d"]
                    ) -> tuple[Float[Array, "k n F"], Float[Array, " k"]]:
        """Integration nodes: `E_θ f(θ) ≈ Σ_k w_k mean_i f(theta[k, i])` where `normals` are
        the standard-normal nodes of the expectation backend (`d = n_normal_dims`)."""

    @abc.abstractmethod
    def log_pi(self, c: Float[Array, "*batch F"]) -> Float[Array, "*batch"]:
        """`log π(c) = log E_θ exp(θ·c − |θ|²/2)`."""

    @abc.abstractmethod
    def mean(self) -> Float[Array, " F"]:
        """`E θ`."""

    @abc.abstractmethod
    def variance(self) -> Float[Array, " F"]:
        """`Var θ_f` per feature."""

    @abc.abstractmethod
    def scaled(self, factor: float | Float[Array, ""]) -> AbstractPrior:
        """The same prior with its signal multiplied by `factor` (θ → factor·θ)."""

    @classmethod
    def from_params(cls, F: int, values: Mapping[str, Any]) -> AbstractPrior:
        """The prior from its validated config values (every key of `params`, defaults
        filled)."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from a config")


_REGISTRY: Registry[type[AbstractPrior]] = Registry("prior", "kind")

_P = TypeVar("_P", bound=type[AbstractPrior])


def register_prior(cls: _P) -> _P:
    """Class decorator: make `cls` available as `prior.kind = cls.kind` in configs."""
    names = [p.name for p in cls.params]
    if "amplitude" not in names or "kind" in names or len(set(names)) != len(names):
        raise TypeError(f"{cls.__name__}.params: need an 'amplitude' key, no 'kind' key and no "
                        "repeated names")
    _REGISTRY.register(cls)
    return cls


def unregister_prior(kind: str) -> None:
    """Remove a registered prior (tests that register temporary ones)."""
    _REGISTRY.unregister(kind)


def prior_kinds() -> tuple[str, ...]:
    """The registered prior kinds, in registration order."""
    return _REGISTRY.names()


def prior_class(kind: str) -> type[AbstractPrior]:
    """The class registered as `kind`; a [`ConfigError`][] naming `prior.kind` otherwise."""
    return _REGISTRY.get(kind, lambda msg: ConfigError(f"prior.kind = {msg}"))
