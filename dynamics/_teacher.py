"""The teacher and the data of the single-location model (`docs/model.md#data-the-teacher`)."""

from __future__ import annotations

import equinox as eqx
import jax.numpy as jnp
import jax.random as jr
from jaxtyping import Array, Float, PRNGKeyArray

from ._model import AttentionBase


class Teacher(eqx.Module):
    """Teacher directions: `k*_f` orthonormal with `k*_f·k*_g/D = δ_fg`, and `v*` orthogonal to
    them with `|v*|²/D = ρ*`."""

    kstar: Float[Array, "F D"]
    vstar: Float[Array, " D"]

    @property
    def D(self) -> int:
        return self.vstar.shape[-1]

    def rows(self) -> Float[Array, "F1 D"]:
        """`[K*; v*]`."""
        return jnp.concatenate([self.kstar, self.vstar[None, :]], axis=0)


def make_teacher(key: PRNGKeyArray, D: int, F: int, rho: float = 1.0,
                 dtype=jnp.float32) -> Teacher:
    """A random teacher: QR of a `D×(F+1)` Gaussian matrix, scaled by `√D` (and `√ρ*` for v*)."""
    q, _ = jnp.linalg.qr(jr.normal(key, (D, F + 1), dtype=jnp.float64))
    q = q * jnp.sqrt(D)
    return Teacher(kstar=q[:, :F].T.astype(dtype), vstar=(jnp.sqrt(rho) * q[:, F]).astype(dtype))


def sample_data(key: PRNGKeyArray, teacher: Teacher, model: AttentionBase, batch: int
                ) -> tuple[Float[Array, "batch L D"], Float[Array, " batch"]]:
    """`batch` sequences and labels: `x_ℓ ~ N(0, I)` except `x_ε = g + Σ_f θ_f k*_f/√D` at a
    uniform hidden location ε, and `y = v*·x_ε/√D + Δ ξ`."""
    D, L = teacher.D, model.L
    dtype = teacher.vstar.dtype
    kx, kt, ke, kn = jr.split(key, 4)
    X = jr.normal(kx, (batch, L, D), dtype=dtype)
    theta = model.prior.sample(kt, (batch,), dtype=dtype)
    eps = jr.randint(ke, (batch,), 0, L)
    rows = jnp.arange(batch)
    X = X.at[rows, eps].add(theta @ teacher.kstar / jnp.sqrt(jnp.asarray(D, dtype)))
    y = X[rows, eps] @ teacher.vstar / jnp.sqrt(jnp.asarray(D, dtype))
    y = y + model.noise * jr.normal(kn, (batch,), dtype=dtype)
    return X, y
