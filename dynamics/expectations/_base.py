"""Expectation backends: standard-normal integration nodes with weights and error estimates."""

from __future__ import annotations

import abc
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PyTree


class Nodes(eqx.Module):
    """Integration nodes for `E f(g)`, `g ~ N(0, I_d)`: `E f ≈ Σ_i w_i f(x_i)`.

    `groups` > 0 means the nodes are `groups` independent equal-size replicates (QMC
    randomizations), used for the error estimate. `orbit` > 1 means consecutive runs of `orbit`
    nodes are images of one random node under a symmetry (exchangeable heads): they are not
    independent, so error estimates first average over each orbit. `x_low, w_low` is an embedded
    lower-order rule (quadrature) whose difference from the main rule estimates the error.
    """

    x: Float[Array, "n d"]
    w: Float[Array, " n"]
    groups: int = eqx.field(static=True, default=0)
    orbit: int = eqx.field(static=True, default=1)
    x_low: Float[Array, "n2 d"] | None = None
    w_low: Float[Array, " n2"] | None = None

    @property
    def size(self) -> int:
        return self.x.shape[0]

    def mean(self, values: PyTree[Float[Array, "n ..."]]) -> PyTree:
        """`Σ_i w_i values_i` leafwise."""
        return jax.tree.map(lambda v: jnp.tensordot(self.w, v, axes=1), values)


class AbstractExpectation(eqx.Module):
    """A rule for Gaussian expectations. Subclasses implement `nodes(dim)`; fixed nodes make the
    ODE vector field a smooth function of the state (common random numbers)."""

    samples: int = eqx.field(static=True)

    @abc.abstractmethod
    def nodes(self, dim: int) -> Nodes:
        """Nodes for a `dim`-dimensional standard Gaussian."""

    def estimate(self, f: Callable[[Float[Array, "n d"]], PyTree[Float[Array, "n ..."]]],
                 nodes: Nodes) -> tuple[PyTree, PyTree]:
        """`(E f, its error estimate)` with the given nodes; `f` maps the node array to per-node
        values (leading axis n)."""
        values = f(nodes.x)
        mean = nodes.mean(values)
        return mean, self.error(values, mean, nodes, f)

    def error(self, values, mean, nodes: Nodes, f) -> PyTree:
        """Standard error of a weighted mean of independent samples (Monte Carlo)."""
        del f
        k = nodes.orbit
        n = nodes.size // k

        def se(v, mu):
            # orbit means (weights are equal within an orbit), then their weighted spread
            w = nodes.w.reshape(n, k).sum(axis=1)
            vm = v.reshape(n, k, *v.shape[1:]).mean(axis=1)
            dev = vm - mu
            return jnp.sqrt(jnp.tensordot(w, dev**2, axes=1) / max(n - 1, 1))

        return jax.tree.map(se, values, mean)
