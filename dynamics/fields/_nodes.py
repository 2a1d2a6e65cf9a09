"""Gaussian nodes of the vector fields, closed under permutations of the heads.

The exact ODE is equivariant under permutations of the heads, so the subspace where all heads are
equal is invariant and a run started there never specializes (`docs/phases.md`). A Monte Carlo
estimate with independent nodes per head breaks this: its error is not symmetric across heads and
seeds a spurious escape. Closing the node set under head permutations (each random node followed
by its images) makes the estimated vector field exactly equivariant, so specialization is seeded
only by the initial condition, as in SGD.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .._model import Model
from .._risk import key_dims
from ..expectations import AbstractExpectation, AbstractNodes

MAX_GROUP = 24
"""The default largest group: all `H!` permutations up to H = 4; beyond, the H cyclic shifts
(the field is then equivariant under rotations of the heads only)."""


def head_permutations(H: int, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations `(G, H)` the nodes are closed under: all `H!` when `H! ≤ max_group`,
    else the H cyclic shifts."""
    if math.factorial(H) <= max_group:
        return np.array(list(itertools.permutations(range(H))), dtype=np.int64)
    return np.array([np.roll(np.arange(H), k) for k in range(H)], dtype=np.int64)


def g_perp_block(model: Model) -> tuple[int, int]:
    """Where the per-head normals `g⊥` (a `(H, L)` block) sit in a key node: after θ's normals
    and the teacher's `g*` (see `dynamics._risk.split_key_normals`)."""
    return model.prior.n_normal_dims + model.L * model.F, model.H


def key_nodes(model: Model, backend: AbstractExpectation, *, max_group: int = MAX_GROUP
              ) -> AbstractNodes:
    """Nodes over the key fields (dimension `key_dims(model)`), closed under head
    permutations."""
    perms = head_permutations(model.H, max_group)
    return backend.closed_nodes(key_dims(model), perms, [g_perp_block(model)], model.L)


def full_dims(model: Model) -> int:
    """Gaussian dimensions of one draw of all fields: the key fields, `g^ν` per token (H value
    fields and the teacher's) and the label noise ξ."""
    return key_dims(model) + model.L * (model.H + 1) + 1


def full_nodes(model: Model, backend: AbstractExpectation, *, max_group: int = MAX_GROUP
               ) -> AbstractNodes:
    """Nodes over all fields (dimension `full_dims(model)`), closed under head permutations
    (of `g⊥` and of the value normals)."""
    perms = head_permutations(model.H, max_group)
    blocks = [g_perp_block(model), (key_dims(model), model.H + 1)]
    return backend.closed_nodes(full_dims(model), perms, blocks, model.L)
