"""Anisotropic Gaussian prior `θ ~ N(μ, diag σ²)`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from ._base import AbstractPrior, Param, finite_nonnegative, register_prior, vector


@register_prior
class Gaussian(AbstractPrior):
    """`θ ~ N(μ, diag(σ²))`. The paper's claim: heads learn the features in the order of the
    variances `σ_f²`."""

    kind: ClassVar[str] = "gaussian"
    params: ClassVar[tuple[Param, ...]] = (
        Param("amplitude", float, 1.0, "a factor on the mean and the standard deviations",
              finite_nonnegative),
        Param("mean", list, lambda F: [0.0] * F, "μ: F numbers (default 0)", vector),
        Param("var", list, lambda F: [1.0] * F, "σ²: F variances > 0 (default 1)", vector),
    )

    mu: Float[Array, " F"]
    var: Float[Array, " F"]

    def __init__(self, mean, var):
        mu = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        v = np.atleast_1d(np.asarray(var, dtype=np.float64))
        if mu.ndim != 1 or v.ndim != 1:
            raise ValueError("mean and var: must be lists of F numbers")
        if mu.shape != v.shape:
            raise ValueError(f"mean has {mu.size} entries but var has {v.size}")
        if not np.all(np.isfinite(mu)):
            raise ValueError("mean: must be finite")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"var: variances must be finite and > 0, got {v.tolist()}")
        self.mu = jnp.asarray(mu)
        self.var = jnp.asarray(v)

    @property
    def F(self) -> int:
        return self.mu.shape[0]

    @property
    def n_normal_dims(self) -> int:
        return self.F

    @property
    def n_node_dims(self) -> int:
        # θ joins the signal token's Gaussian law (`signal_theta`): no θ coordinates in nodes
        return 0

    def signal_theta(self, normals, g_signal):
        # θ + g ~ N(μ, diag(1 + σ²)) is reached from g alone: θ = μ + (√(1 + σ²) − 1) g
        del normals
        return (self.mu + (jnp.sqrt(1.0 + self.var) - 1.0) * g_signal)[None, :], jnp.ones(1)

    def invariant_under(self, perm, signs):
        mu, var = np.asarray(self.mu, dtype=np.float64), np.asarray(self.var, dtype=np.float64)
        return bool(np.array_equal(mu[perm] * signs, mu) and np.array_equal(var[perm], var))

    def sample(self, key, shape=(), dtype=jnp.float64):
        g = jr.normal(key, (*shape, self.F), dtype=dtype)
        lead = (1,) * len(shape)
        return (self.mu.reshape(*lead, -1) + jnp.sqrt(self.var).reshape(*lead, -1) * g
                ).astype(dtype)

    def theta_nodes(self, normals):
        return (self.mu[None, :] + jnp.sqrt(self.var)[None, :] * normals)[None], jnp.ones(1)

    def log_pi(self, c):
        # E exp(θ·c − |θ|²/2) for θ ~ N(μ, Σ), Σ diagonal (docs/model.md, Bayes-optimal risk)
        lead = (1,) * (c.ndim - 1)          # explicit broadcasting over the batch axes
        d = c - self.mu.reshape(*lead, -1)
        shrink = (self.var / (1.0 + self.var)).reshape(*lead, -1)
        return (c @ self.mu + 0.5 * jnp.sum(shrink * d**2, axis=-1)
                - 0.5 * jnp.sum(self.mu**2) - 0.5 * jnp.sum(jnp.log1p(self.var)))

    def mean(self):
        return self.mu

    def variance(self):
        return self.var

    def scaled(self, factor: float | Float[Array, ""]) -> Gaussian:
        if not isinstance(factor, (int, float)):
            # a traced factor (differentiable theory): no constructor checks
            return eqx.tree_at(lambda g: (g.mu, g.var), self,
                               (self.mu * factor, self.var * factor**2))
        return Gaussian(self.mu * factor, self.var * factor**2)

    @classmethod
    def from_params(cls, F: int, values: Mapping[str, Any]) -> AbstractPrior:
        del F
        return cls(values["mean"], values["var"]).scaled(values["amplitude"])
