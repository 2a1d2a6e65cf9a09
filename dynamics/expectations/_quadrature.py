import itertools
import math

import jax.numpy as jnp
import numpy as np

from .._errors import ConfigError
from ._base import AbstractExpectation, EmbeddedNodes


def _tensor_rule(order: int, dim: int):
    x1, w1 = np.polynomial.hermite_e.hermegauss(order)
    w1 = w1 / w1.sum()
    x = np.array(list(itertools.product(x1, repeat=dim)))
    w = np.prod(np.array(list(itertools.product(w1, repeat=dim))), axis=1)
    return x, w


class Quadrature(AbstractExpectation):
    """Tensor-product Gauss–Hermite quadrature with the largest order `k` such that
    `k^dim ≤ samples`; the error estimate is the difference from the order `k − 1` rule.
    Only for small dimensions (few heads and tokens)."""

    samples: int

    def order(self, dim: int) -> int:
        k = int(np.floor(self.samples ** (1.0 / dim) + 1e-9)) if dim > 0 else 1
        return k

    def nodes(self, dim: int) -> EmbeddedNodes:
        k = self.order(dim)
        if k < 3:
            raise ConfigError(
                f"ode.expectation = 'quadrature': a {dim}-dimensional tensor rule needs at least "
                f"3^{dim} = {3**dim} nodes but ode.samples = {self.samples}; use 'qmc' or 'mc' "
                "(quadrature suits small H·L)")
        x, w = _tensor_rule(k, dim)
        xl, wl = _tensor_rule(k - 1, dim)
        return EmbeddedNodes(x=jnp.asarray(x), w=jnp.asarray(w), x_low=jnp.asarray(xl),
                             w_low=jnp.asarray(wl))

    def closed_nodes(self, dim, perm, signs) -> EmbeddedNodes:
        # a tensor-product rule of symmetric 1-d rules is already invariant under signed
        # permutations of the coordinates
        del perm, signs
        return self.nodes(dim)


EXACT_MAX_NODES = 1 << 16
"""The largest tensor Gauss–Hermite rule [`exact_rule`][] builds (beyond it: None)."""


def exact_rule(dim: int, degree: int, max_nodes: int = EXACT_MAX_NODES) -> Quadrature | None:
    """The tensor Gauss–Hermite rule over `dim` standard normals that integrates every
    polynomial of total degree ≤ `degree` exactly, and so does the next lower order that
    estimates its error (order `k ≥ (degree + 3)/2`: the order-k rule is exact to degree
    `2k − 1` in each coordinate); None when it has more than `max_nodes` nodes."""
    k = max(3, math.ceil((degree + 3) / 2))
    if k**dim > max_nodes:
        return None
    return Quadrature(samples=k**dim)
