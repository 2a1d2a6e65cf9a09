"""The attention model's diffusion matrix `Σ(Ω) = Cov[U]` of the overlaps, and a factor of it
drawn from the same per-sample increments (`docs/sde.md#the-diffusion-matrix`)."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from ..._model import SIGNAL, AttentionBase
from ..._overlaps import FieldLaw, Overlaps
from ..._steps import StepSizes
from ...expectations import AbstractExpectation, AbstractNodes
from ...sde._diffusion import AbstractDiffusion, centred_factor
from ._nodes import MAX_GROUP, full_nodes
from ._sampled import sample_increment, split_full_node


# -- the independent entries ------------------------------------------------------------------

def n_entries(H: int, F: int) -> int:
    """`p`, the independent entries of a state: the upper triangle (diagonal included) of the
    student Gram block over `[K; V]` (q, kv, s), the student–teacher block `2H × (F + 1)`
    (m, kvs, vks, n) and the biases."""
    return H * (2 * H + 1) + 2 * H * (F + 1) + H


def entry_names(H: int, F: int) -> list[str]:
    """A readable name for each of the [`n_entries`][] entries, in the order of
    [`flatten`][] (heads and features counted from 1)."""
    rows = [f"k{h + 1}" for h in range(H)] + [f"v{h + 1}" for h in range(H)]
    cols = [f"k*{f + 1}" for f in range(F)] + ["v*"]
    i, j = np.triu_indices(2 * H)
    names = [f"{rows[a]}·{rows[b]}" for a, b in zip(i, j)]
    names += [f"{r}·{c}" for r in rows for c in cols]
    return names + [f"b{h + 1}" for h in range(H)]


def flatten(ov: Overlaps) -> Float[Array, " p"]:
    """The independent entries of one state (or of an increment of it), in the order of
    [`entry_names`][]. The teacher block of the Gram matrix is constant and not included."""
    H = ov.H
    ss = ov.student_gram()
    st = jnp.block([[ov.m, ov.kvs[:, None]], [ov.vks, ov.n[:, None]]])
    i, j = np.triu_indices(2 * H)
    return jnp.concatenate([ss[i, j], jnp.ravel(st), ov.b])


def unflatten(y: Float[Array, " p"], H: int, F: int) -> Overlaps:
    """The inverse of [`flatten`][]: the symmetric student block is filled from its upper
    triangle."""
    n = 2 * H
    i, j = np.triu_indices(n)
    k = len(i)
    upper = jnp.zeros((n, n), y.dtype).at[i, j].set(y[:k])
    ss = upper + jnp.triu(upper, 1).T
    st = y[k:k + n * (F + 1)].reshape(n, F + 1)
    return Overlaps.from_student_rows(jnp.concatenate([ss, st], axis=1), y[k + n * (F + 1):], F)


# -- the per-sample increments and their covariance -------------------------------------------

def increments(model: AttentionBase, steps: StepSizes, ov: Overlaps, nodes: AbstractNodes, *,
               sgd_noise: bool = True) -> tuple[Float[Array, "n S p"], Float[Array, "n S"]]:
    """The per-sample increments `U` ([`sample_increment`][], flattened) at every
    node of all fields and every support point of θ, with their weights.

    A discrete prior is summed exactly inside each node, so one node stands for S samples
    (its support points, weights `p_s`); the weight of `(node i, point s)` is `w_i p_s`. A
    continuous prior draws θ from the node itself (S = 1). Every expectation over samples is
    then `Σ_{i,s} w_{is} f(U_{is})`: the mean is the drift of the sampled field, and the
    covariance below is a covariance of the same mixture."""
    law = FieldLaw.from_overlaps(ov, model.rho, manifold=False)

    def at_node(x):
        tn, g_star = split_full_node(model, x)[:2]
        thetas, pw = model.prior.signal_theta(tn, g_star[:, SIGNAL])
        U = jax.vmap(lambda th: flatten(sample_increment(model, steps, ov, law, x, th,
                                                         sgd_noise=sgd_noise)))(thetas)
        return U, pw

    U, pw = jax.vmap(at_node)(nodes.x)
    return U, nodes.w[:, None] * pw


class Diffusion(AbstractDiffusion):
    """The diffusion of the overlaps' SDE, from the per-sample increments at fixed nodes of all
    fields (common random numbers, so it is a smooth function of the state).

    - [`factor`][]`(ov)`: `B (p × k)` with `B Bᵀ = Σ` ([`centred_factor`][]), no matrix square
      root; `k` = nodes × θ support points.
    - [`matrix`][headflow.dynamics.sde.AbstractDiffusion.matrix]`(ov)`: `Σ = Cov[U]/B_batch` (`p ×
      p`), symmetric PSD by construction.
    - [`sqrt_factor`][headflow.dynamics.sde.AbstractDiffusion.sqrt_factor]`(ov)`: the symmetric
      square root `Σ^{1/2}` by `eigh` (`p × p`), the alternative factor.

    Per-step noise of one batch is the mean of B independent samples, hence the division by the
    batch size. **Fields:** `model`, `steps`, `nodes` (of dimension `full_dims(model)`),
    `sgd_noise` (keep the `η²` term in `U`).
    """

    model: AttentionBase
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)

    @classmethod
    def build(cls, model: AttentionBase, steps: StepSizes, backend: AbstractExpectation, *,
              sgd_noise: bool = True, max_group: int = MAX_GROUP) -> Diffusion:
        """With `backend`'s nodes over all fields, closed under head permutations (so `Σ` is
        exactly equivariant under permutations of the heads)."""
        return cls(model=model, steps=steps,
                   nodes=full_nodes(model, backend, max_group=max_group), sgd_noise=sgd_noise)

    @property
    def size(self) -> int:
        """`p`, the entries of the state ([`n_entries`][])."""
        return n_entries(self.model.H, self.model.F)

    @property
    def control_size(self) -> int:
        """Columns of [`factor`][]: nodes × θ support points."""
        prior = self.model.prior
        S = prior.signal_theta(jnp.zeros(prior.n_node_dims), jnp.zeros(prior.F))[1].shape[0]
        return self.nodes.size * S

    def flatten(self, ov: Overlaps) -> Float[Array, " p"]:
        """The SDE's coordinates of a state ([`flatten`][])."""
        return flatten(ov)

    def unflatten(self, y: Float[Array, " p"]) -> Overlaps:
        """The state of the SDE's coordinates ([`unflatten`][])."""
        return unflatten(y, self.model.H, self.model.F)

    def gram(self, y: Float[Array, " p"]) -> Float[Array, "P P"]:
        """The Gram matrix of `[K; V; teacher]` at the coordinates `y`."""
        return self.unflatten(y).gram(self.model.rho)

    def increments(self, ov: Overlaps) -> tuple[Float[Array, "n S p"], Float[Array, "n S"]]:
        return increments(self.model, self.steps, ov, self.nodes, sgd_noise=self.sgd_noise)

    def factor(self, ov: Overlaps) -> Float[Array, "p k"]:
        U, w = self.increments(ov)
        return centred_factor(U, w) / jnp.sqrt(float(self.steps.batch))

    def drift(self, ov: Overlaps) -> Float[Array, " p"]:
        """The mean of the same increments (the sampled drift, `SampledFullField` flattened)."""
        U, w = self.increments(ov)
        return jnp.tensordot(w.reshape(-1), U.reshape(-1, U.shape[-1]), axes=1)
