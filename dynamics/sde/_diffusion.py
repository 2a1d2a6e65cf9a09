"""The diffusion matrix of the overlaps, `Σ(Ω) = Cov[U]`, and a factor of it drawn from the
same per-sample increments (`docs/sde.md#the-diffusion-matrix`)."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, Float

from .._model import Model
from .._overlaps import FieldLaw, Overlaps
from .._steps import StepSizes
from ..expectations import AbstractExpectation, AbstractNodes
from ..fields import MAX_GROUP, full_nodes, sample_increment, split_full_node


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

def increments(model: Model, steps: StepSizes, ov: Overlaps, nodes: AbstractNodes, *,
               sgd_noise: bool = True) -> tuple[Float[Array, "n S p"], Float[Array, "n S"]]:
    """The per-sample increments `U` ([`dynamics.fields.sample_increment`][], flattened) at every
    node of all fields and every support point of θ, with their weights.

    A discrete prior is summed exactly inside each node, so one node stands for S samples
    (its support points, weights `p_s`); the weight of `(node i, point s)` is `w_i p_s`. A
    continuous prior draws θ from the node itself (S = 1). Every expectation over samples is
    then `Σ_{i,s} w_{is} f(U_{is})`: the mean is the drift of the sampled field, and the
    covariance below is a covariance of the same mixture."""
    law = FieldLaw.from_overlaps(ov, model.rho, manifold=False)

    def at_node(x):
        thetas, pw = model.prior.theta_nodes(split_full_node(model, x)[0][None, :])
        U = jax.vmap(lambda th: flatten(sample_increment(model, steps, ov, law, x, th,
                                                         sgd_noise=sgd_noise)))(thetas[:, 0])
        return U, pw

    U, pw = jax.vmap(at_node)(nodes.x)
    return U, nodes.w[:, None] * pw


def centred_factor(U: Float[Array, "n S p"], w: Float[Array, "n S"]) -> Float[Array, "p k"]:
    """`B` with `B Bᵀ = Σ_{is} w_{is} (U_{is} − Ū)(U_{is} − Ū)ᵀ`, the covariance of the
    weighted increments (`k = n·S` columns, one per sample): the centred increments scaled by
    `√w`. For Monte Carlo nodes (`w = 1/n`) this is `U_cᵀ/√n`."""
    p = U.shape[-1]
    Uf, wf = U.reshape(-1, p), w.reshape(-1)
    mean = jnp.tensordot(wf, Uf, axes=1)
    return ((Uf - mean[None, :]) * jnp.sqrt(jnp.clip(wf, 0.0))[:, None]).T


def gram_of(B: Float[Array, "p k"]) -> Float[Array, "p p"]:
    """`B Bᵀ`, exactly symmetric (a matmul need not be)."""
    S = B @ B.T
    return 0.5 * (S + S.T)


def symmetric_sqrt(S: Float[Array, "p p"]) -> Float[Array, "p p"]:
    """`S^{1/2}` of a symmetric PSD matrix by `eigh` (negative round-off eigenvalues clipped)."""
    lam, vec = jnp.linalg.eigh(S)
    return (vec * jnp.sqrt(jnp.clip(lam, 0.0))[None, :]) @ vec.T


class AbstractDiffusion(eqx.Module):
    """What the SDE needs of a diffusion: a factor `B (p × k)` with `B Bᵀ = Σ` at a state, the
    step sizes (a schedule evaluated by [`at`][]), and the SDE's coordinates of a state
    (`flatten`, `unflatten`) with the Brownian dimension `control_size`. The matrix and its
    symmetric square root are written once, here."""

    steps: eqx.AbstractVar[StepSizes]

    @abc.abstractmethod
    def factor(self, state) -> Float[Array, "p k"]:
        """`B` with `B Bᵀ = Σ` at `state`."""

    @property
    @abc.abstractmethod
    def size(self) -> int:
        """`p`, the SDE's coordinates."""

    @property
    @abc.abstractmethod
    def control_size(self) -> int:
        """`k`, the columns of [`factor`][] (the Brownian dimension)."""

    @abc.abstractmethod
    def flatten(self, state) -> Float[Array, " p"]:
        """The SDE's coordinates of a state (or of an increment of it)."""

    @abc.abstractmethod
    def unflatten(self, y: Float[Array, " p"]):
        """The state of the SDE's coordinates."""

    def at(self, t):
        """The diffusion with its step sizes at time `t` (a learning-rate schedule evaluated
        there, [`dynamics.StepSizes.at`][]); `self` when nothing is scheduled."""
        if not self.steps.scheduled:
            return self
        return eqx.tree_at(lambda f: f.steps, self, self.steps.at(t))

    def matrix(self, state) -> Float[Array, "p p"]:
        """`Σ = B Bᵀ`, symmetric PSD by construction."""
        return gram_of(self.factor(state))

    def sqrt_factor(self, state) -> Float[Array, "p p"]:
        """The symmetric square root `Σ^{1/2}` (`eigh`): the alternative factor."""
        return symmetric_sqrt(self.matrix(state))


class Diffusion(AbstractDiffusion):
    """The diffusion of the overlaps' SDE, from the per-sample increments at fixed nodes of all
    fields (common random numbers, so it is a smooth function of the state).

    - [`factor`][]`(ov)`: `B (p × k)` with `B Bᵀ = Σ` ([`centred_factor`][]), no matrix square
      root; `k` = nodes × θ support points.
    - [`matrix`][]`(ov)`: `Σ = Cov[U]/B_batch` (`p × p`), symmetric PSD by construction.
    - [`sqrt_factor`][]`(ov)`: the symmetric square root `Σ^{1/2}` by `eigh` (`p × p`), the
      alternative factor.

    Per-step noise of one batch is the mean of B independent samples, hence the division by the
    batch size. **Fields:** `model`, `steps`, `nodes` (of dimension `full_dims(model)`),
    `sgd_noise` (keep the `η²` term in `U`).
    """

    model: Model
    steps: StepSizes
    nodes: AbstractNodes
    sgd_noise: bool = eqx.field(static=True, default=True)

    @classmethod
    def build(cls, model: Model, steps: StepSizes, backend: AbstractExpectation, *,
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
        S = prior.theta_nodes(jnp.zeros((1, prior.n_normal_dims)))[1].shape[0]
        return self.nodes.size * S

    def flatten(self, ov: Overlaps) -> Float[Array, " p"]:
        """The SDE's coordinates of a state ([`flatten`][])."""
        return flatten(ov)

    def unflatten(self, y: Float[Array, " p"]) -> Overlaps:
        """The state of the SDE's coordinates ([`unflatten`][])."""
        return unflatten(y, self.model.H, self.model.F)

    def increments(self, ov: Overlaps) -> tuple[Float[Array, "n S p"], Float[Array, "n S"]]:
        return increments(self.model, self.steps, ov, self.nodes, sgd_noise=self.sgd_noise)

    def factor(self, ov: Overlaps) -> Float[Array, "p k"]:
        U, w = self.increments(ov)
        return centred_factor(U, w) / jnp.sqrt(float(self.steps.batch))


    def drift(self, ov: Overlaps) -> Float[Array, " p"]:
        """The mean of the same increments (the sampled drift, `SampledFullField` flattened)."""
        U, w = self.increments(ov)
        return jnp.tensordot(w.reshape(-1), U.reshape(-1, U.shape[-1]), axes=1)
