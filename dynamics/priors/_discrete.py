"""Discrete priors: finitely many support points with weights."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from .._errors import ConfigError
from ._base import AbstractPrior


class AbstractDiscretePrior(AbstractPrior):
    """`θ = θ^s` with probability `p_s`, `s = 1..S`. Subclasses define `points` and `weights`;
    every expectation over θ is then an exact weighted sum over the support."""

    @property
    @abc.abstractmethod
    def points(self) -> Float[Array, "S F"]: ...

    @property
    @abc.abstractmethod
    def weights(self) -> Float[Array, " S"]: ...

    @property
    def F(self) -> int:
        return self.points.shape[-1]

    @property
    def n_normal_dims(self) -> int:
        return 0

    @property
    def S(self) -> int:
        return self.points.shape[0]

    def sample(self, key: PRNGKeyArray, shape: tuple[int, ...] = (), dtype=jnp.float64):
        idx = jr.choice(key, self.S, shape=shape, p=self.weights)
        return self.points.astype(dtype)[idx]

    def theta_nodes(self, normals):
        n = normals.shape[0]
        theta = jnp.broadcast_to(self.points[:, None, :], (self.S, n, self.F))
        return theta, self.weights

    def log_pi(self, c):
        logits = c @ self.points.T - 0.5 * jnp.sum(self.points**2, axis=-1)
        return jax.nn.logsumexp(logits, axis=-1, b=self.weights)

    def mean(self):
        return self.weights @ self.points

    def variance(self):
        return self.weights @ (self.points - self.mean()) ** 2

    def scaled(self, factor: float) -> Discrete:
        return Discrete(points=self.points * factor, weights=self.weights)


def _check_weights(weights: np.ndarray, key: str) -> None:
    if weights.ndim != 1 or weights.size == 0:
        raise ConfigError(f"{key}: must be a non-empty list of numbers")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ConfigError(f"{key}: weights must be finite and non-negative, got {weights.tolist()}")
    if abs(weights.sum() - 1.0) > 1e-8:
        raise ConfigError(f"{key}: weights must sum to 1, they sum to {weights.sum():.10g}")


class Discrete(AbstractDiscretePrior):
    """A general discrete prior with given support points and weights."""

    _points: Float[Array, "S F"]
    _weights: Float[Array, " S"]

    def __init__(self, points, weights=None):
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[0] == 0 or pts.shape[1] == 0:
            raise ConfigError(f"prior.points: must be a non-empty list of points (lists of F "
                              f"numbers), got shape {pts.shape}")
        if not np.all(np.isfinite(pts)):
            raise ConfigError("prior.points: must be finite")
        w = (np.full(pts.shape[0], 1.0 / pts.shape[0]) if weights is None
             else np.asarray(weights, dtype=np.float64))
        _check_weights(w, "prior.weights")
        if w.shape[0] != pts.shape[0]:
            raise ConfigError(f"prior.weights: {w.shape[0]} weights for {pts.shape[0]} points")
        self._points = jnp.asarray(pts)
        self._weights = jnp.asarray(w)

    @property
    def points(self):
        return self._points

    @property
    def weights(self):
        return self._weights


class FlippedSpike(AbstractDiscretePrior):
    """`θ = ±amplitude·u`, `+` with probability `p` (spec §1). With `p ≠ 1/2` the mean is
    non-zero (it drives the unspecialized phase) and one softmax head cannot serve both signs
    (it drives specialization)."""

    amplitude: float
    p: float
    direction: Float[Array, " F"]

    def __init__(self, amplitude: float, p: float, direction):
        u = np.asarray(direction, dtype=np.float64)
        if u.ndim != 1 or not np.all(np.isfinite(u)) or np.linalg.norm(u) == 0:
            raise ConfigError("prior.direction: must be a non-zero vector of F numbers")
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"prior.p = {p}: must lie in [0, 1]")
        if not np.isfinite(amplitude) or amplitude < 0:
            raise ConfigError(f"prior.amplitude = {amplitude}: must be finite and >= 0")
        self.amplitude = float(amplitude)
        self.p = float(p)
        self.direction = jnp.asarray(u / np.linalg.norm(u))

    @property
    def points(self):
        return self.amplitude * jnp.stack([self.direction, -self.direction])

    @property
    def weights(self):
        return jnp.array([self.p, 1.0 - self.p])

    def scaled(self, factor: float) -> FlippedSpike:
        return FlippedSpike(self.amplitude * factor, self.p, self.direction)


class OneHot(AbstractDiscretePrior):
    """`θ = amplitude·e_f` with `f` drawn with the given weights (uniform by default)."""

    amplitude: float
    _weights: Float[Array, " F"]
    _F: int = eqx.field(static=True)

    def __init__(self, amplitude: float, F: int, weights=None):
        if not np.isfinite(amplitude) or amplitude < 0:
            raise ConfigError(f"prior.amplitude = {amplitude}: must be finite and >= 0")
        w = np.full(F, 1.0 / F) if weights is None else np.asarray(weights, dtype=np.float64)
        _check_weights(w, "prior.weights")
        if w.shape[0] != F:
            raise ConfigError(f"prior.weights: one_hot needs F = {F} weights, got {w.shape[0]}")
        self.amplitude = float(amplitude)
        self._weights = jnp.asarray(w)
        self._F = int(F)

    @property
    def points(self):
        return self.amplitude * jnp.eye(self._F)

    @property
    def weights(self):
        return self._weights

    def scaled(self, factor: float) -> OneHot:
        return OneHot(self.amplitude * factor, self._F, self._weights)
