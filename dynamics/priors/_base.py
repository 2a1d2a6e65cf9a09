"""The prior family `P_θ` of the latent coefficients (spec §1)."""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


class AbstractPrior(eqx.Module):
    """A distribution of `θ ∈ R^F`.

    What the rest of headflow needs from a prior:

    - `sample(key, shape)`: draws for the simulator;
    - `theta_nodes(normals)`: integration nodes for expectations over θ (exact enumeration for
      discrete priors, a map from standard normals for continuous ones);
    - `log_pi(c)`: `log E_θ exp(θ·c − |θ|²/2)`, the location likelihood of the Bayes posterior
      (spec §7);
    - `mean()`, `variance()`, and `scaled(factor)` (the signal-amplitude knob).
    """

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
    def scaled(self, factor: float) -> AbstractPrior:
        """The same prior with its signal multiplied by `factor` (θ → factor·θ)."""
