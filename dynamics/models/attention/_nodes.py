"""Gaussian nodes of the attention model's vector fields, closed under the model's symmetry
group ([`headflow.dynamics.fields.product_group`][], `docs/ode.md#nodes`): the permutations of the
heads and the prior's feature group ([`headflow.dynamics.priors.AbstractPrior.symmetry`][])."""

from __future__ import annotations

import numpy as np

from ..._model import AttentionBase
from ..._risk import key_dims
from ...expectations import AbstractExpectation, AbstractNodes
from ...fields import MAX_GROUP, Group, product_group, row_group, unit_permutations


def head_permutations(H: int, max_group: int = MAX_GROUP) -> np.ndarray:
    """The permutations `(G, H)` of the heads the nodes are closed under
    ([`headflow.dynamics.fields.unit_permutations`][])."""
    return unit_permutations(H, max_group)


def g_perp_block(model: AttentionBase) -> tuple[int, int]:
    """Where the per-head normals `g⊥` (a `(H, L)` block) sit in a key node: after θ's node
    coordinates and the teacher's `g*` (see `headflow.dynamics._risk.split_key_normals`)."""
    return model.prior.n_node_dims + model.L * model.F, model.H


def feature_group(model: AttentionBase, dim: int, max_group: int = MAX_GROUP) -> Group:
    """The prior's feature group acting on the teacher's key normals `g*` (rows = features):
    a sign flip of feature f negates its row, an exchange permutes rows. Exact because every
    integrand depends on θ and `g*` only through `χ* = θ δ_{ℓ1} + g*` and the θ average is
    exact (discrete priors) or joins `g*_1` (Gaussian priors); a prior with θ coordinates in
    the nodes gets the trivial group."""
    prior = model.prior
    sym = prior.symmetry()
    if sym.trivial or prior.n_node_dims > 0:
        return np.arange(dim)[None, :], np.ones((1, dim))
    perm, signs = sym.elements(max_group)
    return row_group(dim, 0, model.L, perm, signs)


def node_group(model: AttentionBase, dim: int, *, values: bool, features: bool = True,
               max_group: int = MAX_GROUP) -> Group:
    """The group the nodes of dimension `dim` are closed under: the head permutations (of
    `g⊥` and, with `values`, of the value normals that follow the key block) times, with
    `features`, the prior's feature group (`features=False`: the heads only, the construction
    that does not know the prior)."""
    perms = head_permutations(model.H, max_group)
    off, H = g_perp_block(model)
    heads = row_group(dim, off, model.L, perms)
    if values:
        P, S = row_group(dim, key_dims(model), model.L, perms)
        heads = (np.stack([a[b] for a, b in zip(heads[0], P)]), heads[1] * S)
    if not features:
        return heads
    return product_group(heads, feature_group(model, dim, max_group))


def key_nodes(model: AttentionBase, backend: AbstractExpectation, *, features: bool = True,
              max_group: int = MAX_GROUP) -> AbstractNodes:
    """Nodes over the key fields (dimension `key_dims(model)`), closed under
    `node_group`."""
    dim = key_dims(model)
    return backend.closed_nodes(dim, *node_group(model, dim, values=False, features=features,
                                                 max_group=max_group))


def full_dims(model: AttentionBase) -> int:
    """Gaussian dimensions of one draw of all fields: the key fields, `g^ν` per token (H value
    fields and the teacher's) and the label noise ξ."""
    return key_dims(model) + model.L * (model.H + 1) + 1


def full_nodes(model: AttentionBase, backend: AbstractExpectation, *, features: bool = True,
               max_group: int = MAX_GROUP) -> AbstractNodes:
    """Nodes over all fields (dimension `full_dims(model)`), closed under `node_group`
    (heads permute `g⊥` and the value normals together)."""
    dim = full_dims(model)
    return backend.closed_nodes(dim, *node_group(model, dim, values=True, features=features,
                                                 max_group=max_group))
