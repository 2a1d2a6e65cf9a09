"""Head-exchangeable integration nodes.

The exact ODE is equivariant under permutations of the heads, so the subspace where all heads are
equal is invariant and a run started there never specializes (spec §8.3). A Monte Carlo estimate
with independent nodes per head breaks this: its error is not symmetric across heads and seeds a
spurious escape. Closing the node set under head permutations (each random node followed by its
images) makes the estimated vector field exactly equivariant, so specialization is seeded only by
the initial condition, as in SGD.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax.numpy as jnp
import numpy as np

from ..expectations import AbstractExpectation, Nodes, Quadrature

MAX_GROUP = 24
"""All `H!` permutations up to H = 4; beyond, the H cyclic shifts (the field is then equivariant
under rotations of the heads only, and the symmetric subspace is invariant up to Monte Carlo
error; use `dynamics.stability` for the exactly symmetric dynamics)."""


def head_permutations(H: int) -> np.ndarray:
    """The permutation group used to close the nodes, as an array `(G, H)`."""
    if math.factorial(H) <= MAX_GROUP:
        return np.array(list(itertools.permutations(range(H))), dtype=np.int64)
    return np.array([np.roll(np.arange(H), k) for k in range(H)], dtype=np.int64)


def exchangeable_nodes(backend: AbstractExpectation, dim: int, H: int, L: int,
                       blocks: list[tuple[int, int]]) -> Nodes:
    """Nodes of `backend` in dimension `dim`, closed under permutations of the heads.

    **Arguments:** `blocks`: `(offset, rows)` of every per-token block of the node vector that is
    a `(rows, L)` array whose first `H` rows belong to the heads (e.g. `g⊥`).

    **Returns:** about `backend.samples` nodes (`ceil(samples / G)` random ones and their `G`
    images) with `orbit = G`. The quadrature rule is already invariant and is returned as is.
    """
    if isinstance(backend, Quadrature) or H == 1:
        return backend.nodes(dim)
    perms = head_permutations(H)
    G = len(perms)
    base = dataclasses.replace(backend, samples=max(math.ceil(backend.samples / G), 2))
    nodes = base.nodes(dim)
    x = np.asarray(nodes.x)
    n = x.shape[0]
    images = []
    for p in perms:
        y = x.copy()
        for off, rows in blocks:
            blk = x[:, off:off + rows * L].reshape(n, rows, L)
            new = blk.copy()
            new[:, :H] = blk[:, p]
            y[:, off:off + rows * L] = new.reshape(n, rows * L)
        images.append(y)
    xs = np.stack(images, axis=1).reshape(n * G, dim)
    w = np.repeat(np.asarray(nodes.w), G) / G
    return Nodes(x=jnp.asarray(xs), w=jnp.asarray(w), groups=nodes.groups, orbit=G)
