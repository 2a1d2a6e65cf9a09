"""Gaussian nodes of the attention model's vector fields, closed under permutations of the
heads ([`dynamics.fields.unit_permutations`][], `docs/phases.md`)."""

from __future__ import annotations

import numpy as np

from ..._model import Model
from ..._risk import key_dims
from ...expectations import AbstractExpectation, AbstractNodes
from ...fields import MAX_GROUP, unit_permutations


def head_permutations(H: int, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations `(G, H)` of the heads the nodes are closed under
    ([`dynamics.fields.unit_permutations`][])."""
    return unit_permutations(H, max_group)


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
