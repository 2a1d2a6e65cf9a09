"""The Hermite expansion of a function of one standard normal variable, and its information
exponent.

`g(z) = Σ_k c_k He_k(z)` with `c_k = E[g(z) He_k(z)] / k!` (the probabilists' Hermite
polynomials, orthogonal with `E[He_j He_k] = k! δ_jk`). The information exponent of `g` is the
smallest `k ≥ 1` with `c_k ≠ 0`: for a target `y = g(w*·x/√D)` learned from a random start
(overlap `O(D^{-1/2})`), it sets how the time of online SGD to leave the start grows with D.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

POINTS = 201
"""Gauss–Hermite points of the expansion: exact for polynomials of degree up to 401; for a
function with a kink (`abs`, ReLU) the coefficients converge slowly in the points, but those
that vanish by parity are zero to round-off, since the nodes are symmetric."""


def normal_rule(points: int) -> tuple[np.ndarray, np.ndarray]:
    """`(nodes, weights)` of the `points`-point Gauss–Hermite rule of N(0, 1) (weights summing
    to one; nodes symmetric, `x[::-1] = −x`)."""
    x, w = np.polynomial.hermite_e.hermegauss(points)
    return x, w / math.sqrt(2.0 * math.pi)


def _on_rule(g: Callable[[Float[Array, " n"]], Float[Array, " n"]], points: int
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(nodes, weights, g at the nodes)` of [`normal_rule`][]`(points)`."""
    x, w = normal_rule(points)
    return x, w, np.asarray(g(jnp.asarray(x)), dtype=np.float64)


def hermite_coefficients(g: Callable[[Float[Array, " n"]], Float[Array, " n"]], order: int = 8,
                         points: int = POINTS) -> np.ndarray:
    """`(c_0, …, c_order)`, `c_k = E[g(z) He_k(z)] / k!` for `z ~ N(0, 1)`, by the `points`-point
    Gauss–Hermite rule (`g` maps an array of points to their values, elementwise)."""
    return _coefficients(*_on_rule(g, points), order)


def _coefficients(x: np.ndarray, w: np.ndarray, gx: np.ndarray, order: int) -> np.ndarray:
    he = np.polynomial.hermite_e.hermevander(x, order)                # (points, order + 1)
    return np.array([float(np.sum(w * gx * he[:, k])) / math.factorial(k)
                     for k in range(order + 1)])


def information_exponent(g: Callable[[Float[Array, " n"]], Float[Array, " n"]],
                         order: int = 8, rtol: float = 1e-9) -> int | None:
    """The smallest `k ≥ 1` whose Hermite coefficient is non-zero: `|c_k| √k!` (its share of
    `g`'s norm) above `rtol` times `√E[(g(z) − c_0)²]` (or `|c_0|`, when larger: a constant's
    other coefficients are round-off). None when no coefficient up to `order` is non-zero."""
    x, w, gx = _on_rule(g, POINTS)                    # g evaluated once, for both sums
    c = _coefficients(x, w, gx, order)
    share = np.abs(c) * np.sqrt([math.factorial(k) for k in range(order + 1)])
    norm = math.sqrt(max(float(np.sum(w * (gx - c[0]) ** 2)), 0.0))
    scale = max(norm, abs(float(c[0])), np.finfo(np.float64).tiny)   # a constant: round-off
    for k in range(1, order + 1):
        if share[k] > rtol * scale:
            return k
    return None


def parity(g: Callable[[Float[Array, " n"]], Float[Array, " n"]], rtol: float = 1e-12) -> int:
    """`+1` when `g` is even, `−1` when odd, `0` otherwise: `g(−x)` against `±g(x)` on the
    symmetric Gauss–Hermite nodes, to `rtol` of `g`'s largest value there."""
    _, _, gx = _on_rule(g, POINTS)
    flipped = gx[::-1]                                 # the nodes are symmetric: x[::-1] = −x
    tol = rtol * max(float(np.max(np.abs(gx))), np.finfo(np.float64).tiny)
    if np.all(np.abs(flipped - gx) <= tol):
        return 1
    if np.all(np.abs(flipped + gx) <= tol):
        return -1
    return 0
