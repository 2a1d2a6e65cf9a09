"""Gaussian nodes closed under permutations of a model's exchangeable units.

The exact ODE of a model whose student units (heads, hidden units) are exchangeable is
equivariant under their permutations, so the subspace where all units are equal is invariant and
a run started there never specializes (`docs/phases.md`). A Monte Carlo estimate with
independent nodes per unit breaks this: its error is not symmetric across units and seeds a
spurious escape. Closing the node set under the permutations (each random node followed by its
images) makes the estimated vector field exactly equivariant, so specialization is seeded only
by the initial condition, as in SGD.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

MAX_GROUP = 24
"""The default largest group: all `n!` permutations up to n = 4 units; beyond, the n cyclic
shifts (the field is then equivariant under rotations of the units only)."""


def unit_permutations(n: int, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations `(G, n)` of `n` units the nodes are closed under: all `n!` when
    `n! ≤ max_group`, else the n cyclic shifts."""
    if math.factorial(n) <= max_group:
        return np.array(list(itertools.permutations(range(n))), dtype=np.int64)
    return np.array([np.roll(np.arange(n), k) for k in range(n)], dtype=np.int64)
