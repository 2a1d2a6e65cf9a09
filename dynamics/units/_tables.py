"""Index tables for the Gaussian integrals of a committee: the covariance of every tuple of
fields an integral names, taken from the Gram matrix of all of them, and the unordered pairs
over which the integrals symmetric in two indices are evaluated once."""

from __future__ import annotations

import functools

import numpy as np
from jaxtyping import Array, Float


def sub(C: Float[Array, "P P"], idx: np.ndarray) -> Array:
    """The covariances `C[idx_i, idx_j]` of index tuples `idx (..., n)`: `(..., n, n)`."""
    return C[idx[..., :, None], idx[..., None, :]]


def grid(*ranges: int) -> np.ndarray:
    """Every index tuple of `ranges`: `(*ranges, len(ranges))`."""
    return np.stack(np.meshgrid(*[np.arange(r) for r in ranges], indexing="ij"), axis=-1)


@functools.cache
def pairs(n: int) -> np.ndarray:
    """The unordered pairs `(a, b)`, `a ≤ b < n`, in row-major order: `(n(n+1)/2, 2)`."""
    return np.stack(np.triu_indices(n), axis=-1)


@functools.cache
def pair_index(n: int) -> np.ndarray:
    """`(n, n)`: the row of `pairs(n)` holding `{a, b}`."""
    pos = np.empty((n, n), dtype=np.int64)
    a, b = pairs(n).T
    pos[a, b] = pos[b, a] = np.arange(len(a))
    return pos


def pair_quadruples(S: int, P: int) -> np.ndarray:
    """`(i, k, a, b)` for every pair `{i, k}` of `pairs(S)` and `{a, b}` of `pairs(P)`:
    `(S(S+1)/2, P(P+1)/2, 4)`."""
    ik, ab = pairs(S), pairs(P)
    return np.concatenate(np.broadcast_arrays(ik[:, None, :], ab[None, :, :]), axis=-1)
