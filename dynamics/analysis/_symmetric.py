"""The symmetric subspace (every head alike), its projector, and an exactly head-equivariant
vector field (`docs/phases.md`)."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._errors import HeadflowError
from .._overlaps import Overlaps
from .._steps import StepSizes
from ..expectations import AbstractExpectation
from ..fields import MAX_GROUP, AbstractField
from ..models.attention import ManifoldField, Model, head_permutations

EQUIVARIANT_GROUP = 720
"""Largest permutation group (`H!`, so H ≤ 6) over which [`equivariant_field`][] closes its
nodes."""


def sym_matrix(a: Float[Array, "H H"]) -> Float[Array, "H H"]:
    """The projection onto matrices invariant under every permutation of the units: the mean
    diagonal entry on the diagonal, the mean off-diagonal entry off it (of the symmetric part;
    also used by `_units.unit_average`)."""
    H = a.shape[-1]
    a = 0.5 * (a + a.T)
    diag = jnp.mean(jnp.diagonal(a))
    eye = jnp.eye(H, dtype=a.dtype)
    off = (jnp.sum(a) - jnp.trace(a)) / (H * (H - 1)) if H > 1 else jnp.zeros((), a.dtype)
    return diag * eye + off * (1.0 - eye)


def head_average(ov: Overlaps) -> Overlaps:
    """The orthogonal projection onto the symmetric subspace (every head alike): per-head
    quantities replaced by their head mean, the diagonal and off-diagonal entries of `q` and `s`
    by their means; cross overlaps dropped (the invariant manifold)."""
    H = ov.H
    m = jnp.broadcast_to(jnp.mean(ov.m, axis=0), ov.m.shape)
    n = jnp.full((H,), jnp.mean(ov.n), ov.n.dtype)
    b = jnp.full((H,), jnp.mean(ov.b), ov.b.dtype)
    return Overlaps.manifold(m, sym_matrix(ov.q), n, sym_matrix(ov.s), b)


def head_differences(ov: Overlaps) -> Overlaps:
    """`ov − head_average(ov)` on the manifold: the part of the state where heads differ."""
    avg = head_average(ov)
    return jax.tree.map(lambda a, b: a - b, ov.on_manifold(), avg)


def flatten(ov: Overlaps) -> Float[Array, " N"]:
    """Manifold coordinates `(m, q, n, s, b)` as one vector (q and s as full matrices)."""
    return jnp.concatenate([ov.m.ravel(), ov.q.ravel(), ov.n, ov.s.ravel(), ov.b])


def unflatten(vec: Float[Array, " N"], H: int, F: int) -> Overlaps:
    """Inverse of [`flatten`][] (cross overlaps zero)."""
    i = 0
    out = []
    for shape in ((H, F), (H, H), (H,), (H, H), (H,)):
        size = math.prod(shape)
        out.append(vec[i:i + size].reshape(shape))
        i += size
    return Overlaps.manifold(*out)


def equivariant_field(model: Model, steps: StepSizes, backend: AbstractExpectation, *,
                      sgd_noise: bool = True) -> ManifoldField:
    """The manifold vector field with nodes closed under *all* head permutations
    (`backend.samples` nodes in all). For H ≤ 4 this is the engine's field (it closes the nodes
    under the full group); for H = 5, 6 the engine closes them under cyclic shifts only, and
    this closes them under all `H!` permutations, so the symmetric subspace is exactly
    invariant and the Jacobian exactly commutes with head permutations.

    **Raises:** [`HeadflowError`][] when `H! > 720`, or, beyond the engine's group, when
    `samples < 16·H!`.
    """
    G = math.factorial(model.H)
    if G > EQUIVARIANT_GROUP:
        raise HeadflowError(f"the equivariant vector field closes the nodes under all H! head "
                            f"permutations; H = {model.H} gives {G} > {EQUIVARIANT_GROUP}: "
                            "use H ≤ 6")
    if len(head_permutations(model.H, MAX_GROUP)) != G and backend.samples < 16 * G:
        raise HeadflowError(f"ode.samples = {backend.samples} is too small to close the nodes "
                            f"under all {G} permutations of H = {model.H} heads: need at least "
                            f"16·H! = {16 * G} (or use the engine's cyclic closure, "
                            "--engine-field)")
    return ManifoldField.build(model, steps, backend, sgd_noise=sgd_noise,
                               max_group=EQUIVARIANT_GROUP)


class SymmetricField(eqx.Module):
    """The reduced ODE on the symmetric subspace: `P f(P ov)` with `P` = [`head_average`][].
    Exactly invariant (round-off cannot seed specialization)."""

    field: AbstractField

    def __call__(self, t, ov: Overlaps, args=None) -> Overlaps:
        return head_average(self.field(t, head_average(ov)))
