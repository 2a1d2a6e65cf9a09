"""Sparse-grid Gauss–Hermite quadrature (Smolyak's construction) for Gaussian expectations in
many dimensions (`docs/ode.md#expectation-backends`)."""

from __future__ import annotations

import functools
import itertools
import math

import jax.numpy as jnp
import numpy as np

from .._errors import ConfigError
from ._base import AbstractExpectation, EmbeddedNodes

MAX_LEVEL = 40
"""The highest Smolyak level [`SparseGrid`][] considers."""


@functools.cache
def _gauss_hermite(level: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1-d rule of `level`: Gauss–Hermite (probabilists') of order `2·level − 1`, exact for
    polynomials of degree `4·level − 3`; made exactly symmetric about 0 (a sign flip maps the
    node set onto itself to the last bit)."""
    x, w = np.polynomial.hermite_e.hermegauss(2 * level - 1)
    x = 0.5 * (x - x[::-1])
    w = 0.5 * (w + w[::-1])
    return x, w / w.sum()


def _levels(dim: int, level: int):
    """The levels of Smolyak's sum, written as their excess `e = i − 1 ≥ 0` over the first
    level (arrays of `dim`), with `max(level − dim, 0) ≤ |e| ≤ level − 1`, and the coefficient
    `(−1)^{level−1−|e|} C(dim − 1, level − 1 − |e|)` of each."""
    top = level - 1
    for total in range(max(top - dim + 1, 0), top + 1):
        coef = (-1) ** (top - total) * math.comb(dim - 1, top - total)
        for cut in itertools.combinations(range(total + dim - 1), dim - 1):   # stars and bars
            parts = np.diff((-1, *cut, total + dim - 1)) - 1
            yield parts, coef


@functools.cache
def smolyak_rule(dim: int, level: int) -> tuple[np.ndarray, np.ndarray]:
    """Smolyak's sparse grid of `level` (1: one node) over `dim` standard normals, from the
    1-d Gauss–Hermite rules `U^l` of order `2l − 1`:
    `A = Σ (−1)^{L−1−|e|} C(d−1, L−1−|e|) ⊗_k U^{1+e_k}` over `L − d ≤ |e| ≤ L − 1`.
    Coinciding nodes are merged (their weights summed); weights sum to 1 and may be negative.
    Exact for every polynomial of total degree `≤ 2·level − 1`."""
    if dim == 0:
        return np.zeros((1, 0)), np.ones(1)
    rules = [_gauss_hermite(lv) for lv in range(1, level + 1)]
    # every 1-d node value gets an integer code, so coinciding nodes are found exactly
    values = np.unique(np.concatenate([x for x, _ in rules]))
    codes = [np.searchsorted(values, x) for x, _ in rules]
    base = np.full(dim, codes[0][0])                        # the 1-node rule's node, 0
    keys, weights = [], []
    for excess, coef in _levels(dim, level):
        active = np.flatnonzero(excess)
        if active.size == 0:
            keys.append(base[None, :])
            weights.append(np.array([float(coef)]))
            continue
        pos = [np.arange(len(codes[excess[k]])) for k in active]
        at = np.stack(np.meshgrid(*pos, indexing="ij"), axis=-1).reshape(-1, active.size)
        idx = np.stack([codes[excess[k]][at[:, j]] for j, k in enumerate(active)], axis=1)
        factors = np.stack([rules[excess[k]][1][at[:, j]] for j, k in enumerate(active)], axis=1)
        # multiplied in sorted order: a node and its images under a permutation get the same
        # rounding, so the rule is invariant to the last bit
        w = np.multiply.reduce(np.sort(factors, axis=1), axis=1)
        block = np.broadcast_to(base, (idx.shape[0], dim)).copy()
        block[:, active] = idx
        keys.append(block)
        weights.append(coef * w)
    allk, allw = np.concatenate(keys), np.concatenate(weights)
    uniq, inverse = np.unique(allk, axis=0, return_inverse=True)
    # the terms of a node's weight cancel (Σ|w| grows with the level): sum them exactly rounded
    order = np.argsort(inverse.reshape(-1), kind="stable")
    starts = np.searchsorted(inverse.reshape(-1)[order], np.arange(uniq.shape[0] + 1))
    terms = allw[order].tolist()
    w = np.array([math.fsum(terms[a:b]) for a, b in zip(starts[:-1], starts[1:])])
    keep = w != 0.0
    return values[uniq[keep]], w[keep]


@functools.cache
def rule_size(dim: int, level: int) -> int:
    """The number of distinct nodes of [`smolyak_rule`][]`(dim, level)`, counted without
    building it: the nonzero nodes of different 1-d orders are distinct, so a node is a choice
    per coordinate of 0 or one of the `2e` nonzero nodes of excess level `e ≥ 1`, with the
    excesses summing to at most `level − 1` (`Σ_{j<level} [x^j] (1 + Σ_e 2e x^e)^dim`). Nodes
    whose merged weight cancels to exactly 0 are dropped by the rule, so it may have fewer."""
    top = level - 1
    one = np.array([1] + [2 * e for e in range(1, top + 1)], dtype=object)
    poly = np.array([1] + [0] * top, dtype=object)
    for _ in range(dim):
        poly = np.convolve(poly, one)[: top + 1]
    return int(sum(poly))


class SparseGrid(AbstractExpectation):
    """Sparse-grid Gauss–Hermite quadrature: Smolyak's rule of the highest level `L` whose
    nodes fit in `samples`; the error estimate is its difference from the level `L − 1`
    rule. Its nodes are fixed and exactly invariant under every signed permutation of the
    coordinates, so they are closed under any model's symmetry group. It suits smooth
    integrands in many dimensions; its weights may be negative."""

    samples: int

    def level(self, dim: int) -> int:
        """The highest level (≥ 2) whose rule has at most `samples` nodes (counted without
        building the rule)."""
        level = 1
        while level < MAX_LEVEL and rule_size(dim, level + 1) <= self.samples:
            level += 1
        if level < 2:
            raise ConfigError(
                f"ode.expectation = 'sparse': the level-2 rule in {dim} dimensions has "
                f"{rule_size(dim, 2)} nodes but ode.samples = {self.samples}")
        return level

    def nodes(self, dim: int) -> EmbeddedNodes:
        level = self.level(dim)
        x, w = smolyak_rule(dim, level)
        xl, wl = smolyak_rule(dim, level - 1)
        return EmbeddedNodes(x=jnp.asarray(x), w=jnp.asarray(w), x_low=jnp.asarray(xl),
                             w_low=jnp.asarray(wl))

    def closed_nodes(self, dim, perm, signs) -> EmbeddedNodes:
        # isotropic levels of exactly symmetric 1-d rules: invariant under signed permutations
        del perm, signs
        return self.nodes(dim)
