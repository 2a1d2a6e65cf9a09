"""Anisotropic Gaussian prior `θ ~ N(μ, diag σ²)`."""

from __future__ import annotations

import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float

from .._errors import ConfigError
from ._base import AbstractPrior


class Gaussian(AbstractPrior):
    """`θ ~ N(μ, diag(σ²))`. The paper's claim: heads learn the features in the order of the
    variances `σ_f²`."""

    mu: Float[Array, " F"]
    var: Float[Array, " F"]

    def __init__(self, mean, var):
        mu = np.atleast_1d(np.asarray(mean, dtype=np.float64))
        v = np.atleast_1d(np.asarray(var, dtype=np.float64))
        if mu.ndim != 1 or v.ndim != 1:
            raise ConfigError("prior.mean and prior.var: must be lists of F numbers")
        if mu.shape != v.shape:
            raise ConfigError(f"prior.mean has {mu.size} entries but prior.var has {v.size}")
        if not np.all(np.isfinite(mu)):
            raise ConfigError("prior.mean: must be finite")
        if not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ConfigError(f"prior.var: variances must be finite and > 0, got {v.tolist()}")
        self.mu = jnp.asarray(mu)
        self.var = jnp.asarray(v)

    @property
    def F(self) -> int:
        return self.mu.shape[0]

    @property
    def n_normal_dims(self) -> int:
        return self.F

    def sample(self, key, shape=(), dtype=jnp.float64):
        g = jr.normal(key, (*shape, self.F), dtype=dtype)
        return (self.mu + jnp.sqrt(self.var) * g).astype(dtype)

    def theta_nodes(self, normals):
        return (self.mu + jnp.sqrt(self.var) * normals)[None], jnp.ones(1)

    def log_pi(self, c):
        # E exp(θ·c − |θ|²/2) for θ ~ N(μ, Σ), Σ diagonal: spec §7.
        d = c - self.mu
        shrink = self.var / (1.0 + self.var)
        return (c @ self.mu + 0.5 * jnp.sum(shrink * d**2, axis=-1)
                - 0.5 * jnp.sum(self.mu**2) - 0.5 * jnp.sum(jnp.log1p(self.var)))

    def mean(self):
        return self.mu

    def variance(self):
        return self.var

    def scaled(self, factor: float) -> Gaussian:
        return Gaussian(self.mu * factor, self.var * factor**2)
