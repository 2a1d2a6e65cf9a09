"""Expectation backends: standard-normal integration nodes that carry their own error rule."""

from __future__ import annotations

import abc
import dataclasses
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float, PyTree

PerNode = Callable[[Float[Array, "n d"]], PyTree[Float[Array, "n ..."]]]
"""Maps the node array to per-node values (leading axis n)."""


class AbstractNodes(eqx.Module):
    """Integration nodes for `E f(g)`, `g ~ N(0, I_d)`: `E f ≈ Σ_i w_i f(x_i)`, and the rule
    for the error of that estimate (each backend's nodes know theirs)."""

    x: eqx.AbstractVar[Float[Array, "n d"]]
    w: eqx.AbstractVar[Float[Array, " n"]]

    @property
    def size(self) -> int:
        return self.x.shape[0]

    @property
    def dim(self) -> int:
        return self.x.shape[1]

    def mean(self, values: PyTree[Float[Array, "n ..."]]) -> PyTree:
        """`Σ_i w_i values_i` leafwise."""
        return jax.tree.map(lambda v: jnp.tensordot(self.w, v, axes=1), values)

    @abc.abstractmethod
    def error(self, values: PyTree, mean: PyTree, f: PerNode) -> PyTree:
        """The error estimate of `mean = self.mean(values)`, leafwise (`f` is the per-node
        function, for rules that evaluate it elsewhere)."""

    def estimate(self, f: PerNode) -> tuple[PyTree, PyTree]:
        """`(E f, its error estimate)`."""
        values = f(self.x)
        mean = self.mean(values)
        return mean, self.error(values, mean, f)

    def with_images(self, x: Float[Array, "m d"], w: Float[Array, " m"], G: int
                    ) -> AbstractNodes:
        """Nodes of the same rule made of every node of `self` followed by its `G` images
        under a symmetry (`x`, `w`: node-major, image-minor)."""
        raise NotImplementedError(f"{type(self).__name__} nodes cannot be closed under a "
                                  "symmetry")


class MonteCarloNodes(AbstractNodes):
    """Independent nodes (or `orbit`-sized runs of images of independent nodes under a
    symmetry): the error is the standard error of the weighted mean of the orbit means."""

    x: Float[Array, "n d"]
    w: Float[Array, " n"]
    orbit: int = eqx.field(static=True, default=1)

    def error(self, values, mean, f):
        del f
        k = self.orbit
        n = self.size // k
        w = self.w.reshape(n, k).sum(axis=1)

        def se(v, mu):
            vm = v.reshape(n, k, *v.shape[1:]).mean(axis=1)
            return jnp.sqrt(jnp.tensordot(w, (vm - mu[None]) ** 2, axes=1) / max(n - 1, 1))

        return jax.tree.map(se, values, mean)

    def with_images(self, x, w, G) -> MonteCarloNodes:
        # images are not independent: the error averages each orbit first
        return MonteCarloNodes(x=x, w=w, orbit=self.orbit * G)


class ReplicateNodes(AbstractNodes):
    """`replicates` independent equal-size blocks (randomized QMC): the error is the spread of
    the block means. `orbit > 1`: each block is made of runs of `orbit` images of one node
    under a symmetry."""

    x: Float[Array, "n d"]
    w: Float[Array, " n"]
    replicates: int = eqx.field(static=True)
    orbit: int = eqx.field(static=True, default=1)

    def error(self, values, mean, f):
        del f
        R = self.replicates

        def se(v, mu):
            g = v.reshape(R, -1, *v.shape[1:]).mean(axis=1)
            return jnp.sqrt(jnp.sum((g - mu[None]) ** 2, axis=0) / (R * (R - 1)))

        return jax.tree.map(se, values, mean)

    def with_images(self, x, w, G) -> ReplicateNodes:
        # node-major images keep every replicate block contiguous
        return ReplicateNodes(x=x, w=w, replicates=self.replicates, orbit=self.orbit * G)


class EmbeddedNodes(AbstractNodes):
    """A rule with an embedded lower-order rule `(x_low, w_low)` (quadrature): the error is the
    difference of the two estimates."""

    x: Float[Array, "n d"]
    w: Float[Array, " n"]
    x_low: Float[Array, "n2 d"]
    w_low: Float[Array, " n2"]

    def error(self, values, mean, f):
        del values
        low = jax.tree.map(lambda v: jnp.tensordot(self.w_low, v, axes=1), f(self.x_low))
        return jax.tree.map(lambda a, b: jnp.abs(a - b), mean, low)


def _images(x: np.ndarray, perm: np.ndarray, signs: np.ndarray) -> np.ndarray:
    """Every node followed by its images `x[perm_g] · signs_g` under each group element
    (node-major, element-minor, so contiguous replicate blocks stay contiguous)."""
    n, d = x.shape
    images = x[:, perm] * signs[None, :, :]                  # (n, G, d)
    return images.reshape(n * perm.shape[0], d)


class AbstractExpectation(eqx.Module):
    """A rule for Gaussian expectations with a budget of `samples` nodes. Subclasses implement
    `nodes(dim)`; fixed nodes make the ODE vector field a smooth function of the state (common
    random numbers)."""

    samples: eqx.AbstractVar[int]

    @abc.abstractmethod
    def nodes(self, dim: int) -> AbstractNodes:
        """Nodes for a `dim`-dimensional standard Gaussian."""

    def closed_nodes(self, dim: int, perm: np.ndarray, signs: np.ndarray) -> AbstractNodes:
        """About `samples` nodes closed under a group of signed coordinate permutations
        `x → x[perm_g] · signs_g` (`perm`, `signs`: `(G, dim)`, the identity among them):
        `ceil(samples/G)` nodes and their `G` images, weights divided by G. An estimate on
        closed nodes of an expectation equivariant under the group is exactly equivariant, at
        any node count; the error rule treats each orbit as one sample."""
        G = perm.shape[0]
        if G == 1:
            return self.nodes(dim)
        base = dataclasses.replace(self, samples=max(math.ceil(self.samples / G), 2))
        nodes = base.nodes(dim)
        x = jnp.asarray(_images(np.asarray(nodes.x), perm, signs))
        w = jnp.asarray(np.repeat(np.asarray(nodes.w), G) / G)
        return nodes.with_images(x, w, G)
