"""The diffusion matrix of the order parameters, `Σ = Cov[U]`, and a factor of it drawn from
the same per-sample increments (`docs/sde.md#the-diffusion-matrix`): what every model's
diffusion shares."""

from __future__ import annotations

import abc

import equinox as eqx
import jax.numpy as jnp
from jaxtyping import Array, Float

from .._steps import StepSizes


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

    @abc.abstractmethod
    def gram(self, y: Float[Array, " p"]) -> Float[Array, "P P"]:
        """The Gram matrix of the weight vectors (students and teachers, over D) at the SDE's
        coordinates `y`: the SDE's domain is where it is PSD
        ([`headflow.dynamics.sde.domain`][])."""

    def at(self, t):
        """The diffusion with its step sizes at time `t` (a learning-rate schedule evaluated
        there, [`headflow.dynamics.StepSizes.at`][]); `self` when nothing is scheduled."""
        if not self.steps.scheduled:
            return self
        return eqx.tree_at(lambda f: f.steps, self, self.steps.at(t))

    def matrix(self, state) -> Float[Array, "p p"]:
        """`Σ = B Bᵀ`, symmetric PSD by construction."""
        return gram_of(self.factor(state))

    def sqrt_factor(self, state) -> Float[Array, "p p"]:
        """The symmetric square root `Σ^{1/2}` (`eigh`): the alternative factor."""
        return symmetric_sqrt(self.matrix(state))
