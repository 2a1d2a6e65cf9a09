"""Discrete priors: finitely many support points with weights."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.random as jr
import numpy as np
from jaxtyping import Array, Float, PRNGKeyArray

from ._base import REQUIRED, AbstractPrior, Param, finite_nonnegative, register_prior, vector


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

    def invariant_under(self, perm, signs):
        # the weighted support mapped onto itself: every image point carries the weight of
        # the support points it lands on (points within round-off of each other are merged)
        pts, w = np.asarray(self.points, dtype=np.float64), np.asarray(self.weights)
        img = pts[:, perm] * signs[None, :]
        tol = 1e-12 * max(1.0, float(np.max(np.abs(pts))))

        def mass(at, of, weights):
            close = np.all(np.abs(at[:, None, :] - of[None, :, :]) <= tol, axis=-1)
            return close.astype(np.float64) @ weights

        return bool(np.allclose(mass(img, img, w), mass(img, pts, w), rtol=1e-12, atol=1e-14))

    def log_pi(self, c):
        lead = (1,) * (c.ndim - 1)          # explicit broadcasting over the batch axes
        logits = c @ self.points.T - 0.5 * jnp.sum(self.points**2, axis=-1).reshape(*lead, -1)
        return jax.nn.logsumexp(logits, axis=-1, b=self.weights.reshape(*lead, -1))

    def mean(self):
        return self.weights @ self.points

    def variance(self):
        return self.weights @ (self.points - self.mean()[None, :]) ** 2

    def scaled(self, factor: float | Float[Array, ""]) -> AbstractDiscretePrior:
        if isinstance(self, Discrete) and not isinstance(factor, (int, float)):
            # a traced factor (differentiable theory): no constructor checks
            return eqx.tree_at(lambda p: p._points, self, self._points * factor)
        return Discrete(points=self.points * factor, weights=self.weights)


def _check_weights(weights: np.ndarray, name: str) -> None:
    if weights.ndim != 1 or weights.size == 0:
        raise ValueError(f"{name}: must be a non-empty list of numbers")
    if not np.all(np.isfinite(weights)) or np.any(weights < 0):
        raise ValueError(f"{name}: weights must be finite and non-negative, got "
                         f"{weights.tolist()}")
    if abs(weights.sum() - 1.0) > 1e-8:
        raise ValueError(f"{name}: weights must sum to 1, they sum to {weights.sum():.10g}")


def _points(value: Any, F: int) -> str | None:
    try:
        pts = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return f"must be a list of points, each a list of F = {F} numbers"
    if pts.ndim != 2 or pts.shape[1] != F:
        return f"each point must have F = {F} coordinates (got shape {list(pts.shape)})"
    return None


_WEIGHTS_HELP = "probabilities of the support points (default uniform)"


@register_prior
class FlippedSpike(AbstractDiscretePrior):
    """`θ = ±amplitude·u`, `+` with probability `p`. With `p ≠ 1/2` the mean is non-zero (it
    drives the unspecialized phase) and one softmax head cannot serve both signs (it drives
    specialization)."""

    kind: ClassVar[str] = "flipped_spike"
    params: ClassVar[tuple[Param, ...]] = (
        Param("amplitude", float, 3.0, "|θ| = √ν, the spike amplitude", finite_nonnegative),
        Param("p", float, 0.7, "probability of +"),
        Param("direction", list, lambda F: [1.0] + [0.0] * (F - 1),
              "the unit vector u (default e_1)", vector),
    )

    amplitude: float
    p: float
    direction: Float[Array, " F"]

    def __init__(self, amplitude: float, p: float, direction):
        u = np.asarray(direction, dtype=np.float64)
        if u.ndim != 1 or not np.all(np.isfinite(u)) or np.linalg.norm(u) == 0:
            raise ValueError("direction: must be a non-zero vector of F numbers")
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p = {p}: must lie in [0, 1]")
        if not np.isfinite(amplitude) or amplitude < 0:
            raise ValueError(f"amplitude = {amplitude}: must be finite and >= 0")
        self.amplitude = float(amplitude)
        self.p = float(p)
        self.direction = jnp.asarray(u / np.linalg.norm(u))

    @property
    def points(self):
        return self.amplitude * jnp.stack([self.direction, -self.direction])

    @property
    def weights(self):
        return jnp.array([self.p, 1.0 - self.p])

    def scaled(self, factor: float | Float[Array, ""]) -> FlippedSpike:
        if not isinstance(factor, (int, float)):
            # a traced factor (differentiable theory): no constructor checks
            return eqx.tree_at(lambda p: p.amplitude, self, self.amplitude * factor)
        return FlippedSpike(self.amplitude * factor, self.p, self.direction)

    @classmethod
    def from_params(cls, F: int, values: Mapping[str, Any]) -> AbstractPrior:
        del F
        return cls(values["amplitude"], values["p"], values["direction"])


@register_prior
class OneHot(AbstractDiscretePrior):
    """`θ = amplitude·e_f` with `f` drawn with the given weights (uniform by default)."""

    kind: ClassVar[str] = "one_hot"
    params: ClassVar[tuple[Param, ...]] = (
        Param("amplitude", float, 3.0, "|θ| = √ν, the spike amplitude", finite_nonnegative),
        Param("weights", list, None, "probabilities of the F directions (default uniform)"),
    )

    amplitude: float
    _weights: Float[Array, " F"]
    _F: int = eqx.field(static=True)

    def __init__(self, amplitude: float, F: int, weights=None):
        if not np.isfinite(amplitude) or amplitude < 0:
            raise ValueError(f"amplitude = {amplitude}: must be finite and >= 0")
        w = np.full(F, 1.0 / F) if weights is None else np.asarray(weights, dtype=np.float64)
        _check_weights(w, "weights")
        if w.shape[0] != F:
            raise ValueError(f"weights: one_hot needs F = {F} weights, got {w.shape[0]}")
        self.amplitude = float(amplitude)
        self._weights = jnp.asarray(w)
        self._F = int(F)

    @property
    def points(self):
        return self.amplitude * jnp.eye(self._F)

    @property
    def weights(self):
        return self._weights

    def scaled(self, factor: float | Float[Array, ""]) -> OneHot:
        if not isinstance(factor, (int, float)):
            # a traced factor (differentiable theory): no constructor checks
            return eqx.tree_at(lambda p: p.amplitude, self, self.amplitude * factor)
        return OneHot(self.amplitude * factor, self._F, self._weights)

    @classmethod
    def from_params(cls, F: int, values: Mapping[str, Any]) -> AbstractPrior:
        return cls(values["amplitude"], F, values["weights"])


@register_prior
class Discrete(AbstractDiscretePrior):
    """A general discrete prior with given support points and weights."""

    kind: ClassVar[str] = "discrete"
    params: ClassVar[tuple[Param, ...]] = (
        Param("amplitude", float, 1.0, "a factor on the support points",
              finite_nonnegative),
        Param("points", list, REQUIRED, "support points: S lists of F numbers", _points),
        Param("weights", list, None, _WEIGHTS_HELP),
    )

    _points: Float[Array, "S F"]
    _weights: Float[Array, " S"]

    def __init__(self, points, weights=None):
        pts = np.asarray(points, dtype=np.float64)
        if pts.ndim != 2 or pts.shape[0] == 0 or pts.shape[1] == 0:
            raise ValueError(f"points: must be a non-empty list of points (lists of F "
                             f"numbers), got shape {pts.shape}")
        if not np.all(np.isfinite(pts)):
            raise ValueError("points: must be finite")
        w = (np.full(pts.shape[0], 1.0 / pts.shape[0]) if weights is None
             else np.asarray(weights, dtype=np.float64))
        _check_weights(w, "weights")
        if w.shape[0] != pts.shape[0]:
            raise ValueError(f"weights: {w.shape[0]} weights for {pts.shape[0]} points")
        self._points = jnp.asarray(pts)
        self._weights = jnp.asarray(w)

    @property
    def points(self):
        return self._points

    @property
    def weights(self):
        return self._weights

    @classmethod
    def from_params(cls, F: int, values: Mapping[str, Any]) -> AbstractPrior:
        del F
        return cls(values["points"], values["weights"]).scaled(values["amplitude"])
