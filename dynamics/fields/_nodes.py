"""Gaussian nodes closed under a model's exact symmetry group (`docs/ode.md#nodes`).

The exact ODE of a model is equivariant under the permutations of its exchangeable units
(heads, hidden units) and under the symmetries of its prior (the sign flip of a feature whose
law is symmetric, the exchange of features the prior treats alike): each acts on the Gaussian
nodes as a signed permutation of their coordinates and on the state as a relabelling. A Monte
Carlo estimate on independent nodes breaks this: its error is not symmetric and seeds a
spurious escape from the invariant subspaces (equal heads, zero overlap with a sign-symmetric
feature). Closing the node set under the group (each random node followed by its images) makes
the estimated vector field exactly equivariant, so the subspaces fixed by the group stay
invariant at any node count and symmetry breaking is seeded only by the initial condition, as
in SGD.

A group element is a pair `(perm, signs)` of arrays over the node coordinates acting as
`x → x[perm] · signs`; a group is the pair of `(G, d)` arrays of its elements.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

MAX_GROUP = 24
"""The default largest group of permutations of one set of exchangeable objects (units, or one
class of exchangeable features): all `n!` permutations up to n = 4; beyond, the n cyclic
shifts (the field is then equivariant under those rotations only)."""

Group = tuple[np.ndarray, np.ndarray]
"""`(perm (G, d), signs (G, d))`: signed permutations `x → x[perm_g] · signs_g`."""


def unit_permutations(n: int, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations `(G, n)` of `n` units the nodes are closed under: all `n!` when
    `n! ≤ max_group`, else the n cyclic shifts."""
    if math.factorial(n) <= max_group:
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    return np.array([np.roll(np.arange(n), k) for k in range(n)], dtype=np.int64)


def identity_group(dim: int) -> Group:
    return np.arange(dim)[None, :], np.ones((1, dim))


def row_group(dim: int, offset: int, cols: int, perms: np.ndarray,
              signs: np.ndarray | None = None) -> Group:
    """The group acting on the `(rows, cols)` block of the node vector at `offset` (row-major)
    by permuting its first `k` rows with `perms (G, k)` and multiplying row `r` by
    `signs[g, r]` (default 1); the other coordinates are left alone."""
    G, k = perms.shape
    P = np.tile(np.arange(dim), (G, 1))
    S = np.ones((G, dim))
    base = offset + cols * np.arange(k)[:, None] + np.arange(cols)[None, :]   # (k, cols)
    for g in range(G):
        P[g, base.ravel()] = base[perms[g]].ravel()
        if signs is not None:
            S[g, base.ravel()] = np.repeat(signs[g], cols)
    return P, S


def product_group(*groups: Group) -> Group:
    """Every composition of one element from each group (groups acting on disjoint
    coordinates: their direct product), the identity first. Applying `(P, S)` and then
    `(p, s)` is `x → x[P[p]] · S[p] · s`."""
    perm, signs = groups[0]
    for P, S in groups[1:]:
        perm, signs = (np.stack([Pj[p] for p in perm for Pj in P]),
                       np.stack([Sj[p] * s for p, s in zip(perm, signs) for Sj in S]))
    return perm, signs
